"""The recipes of docs/beyond-page-views.md, run as the page gives them.

Each Python block of the page that starts with a ``# mysite/<module>.py`` line is loaded as that
module of a package ``mysite``, in the page's order (a block imports the ones before it), and the
tests serve them from a URLconf of their own, under WSGI and ASGI, as an app would call them:
without cookies, with a token."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from asgiref.sync import async_to_sync
from django.urls import path
from ninja import NinjaAPI
from rest_framework.authtoken.models import Token

import whos_online
from tests.recording.test_api_clients import assert_only_user, send
from tests.support.helpers import configure, members

if TYPE_CHECKING:
    from collections.abc import Iterator

    from django.contrib.auth.models import AbstractUser

PAGE = Path(__file__).parent.parent / "docs" / "beyond-page-views.md"
#: A fenced Python block, indented as in a list item or not, whose first line names its module.
BLOCK = re.compile(r"^( *)```python\n\1# (mysite/\w+\.py)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
URLCONF = "tests_beyond_page_views_urls"

pytestmark = pytest.mark.urls(URLCONF)


def recipes() -> dict[str, str]:
    """The page's modules by name (``mysite.tokens``), with their source, in the page's order."""
    found = {}
    for indent, name, body in BLOCK.findall(PAGE.read_text(encoding="utf-8")):
        lines = [line.removeprefix(indent) for line in body.splitlines()]
        found[name.removesuffix(".py").replace("/", ".")] = "\n".join(lines)
    return found


@pytest.fixture(scope="module", autouse=True)
def mysite() -> Iterator[dict[str, ModuleType]]:
    """The page's modules, importable as the page imports them, and a URLconf serving them."""
    package = ModuleType("mysite")
    package.__path__ = []
    added = {"mysite": package}
    sys.modules["mysite"] = package
    try:
        for name, source in recipes().items():
            module = ModuleType(name)
            module.__file__ = f"{PAGE.name}:{name}"
            sys.modules[name] = added[name] = module
            exec(compile(source, module.__file__, "exec"), module.__dict__)
            setattr(package, name.rpartition(".")[2], module)
        sys.modules[URLCONF] = added[URLCONF] = _urlconf(added)
        yield added
    finally:
        for name in added:
            sys.modules.pop(name, None)


def _urlconf(modules: dict[str, ModuleType]) -> ModuleType:
    api = NinjaAPI(auth=modules["mysite.api_auth"].BearerToken(), urls_namespace="beyond")
    api.add_router("/", modules["mysite.ninja_online"].router)
    urlconf = ModuleType(URLCONF)
    urlconf.urlpatterns = [  # type: ignore [attr-defined]
        path("api/drf/online/", modules["mysite.drf_online"].online),
        path("api/ninja/", api.urls),
        path("api/me/", modules["mysite.views"].me),
    ]
    return urlconf


def test_the_page_gives_every_recipe_tested_here():
    assert list(recipes()) == [
        "mysite.tokens",
        "mysite.api_auth",
        "mysite.views",
        "mysite.rooms",
        "mysite.drf_online",
        "mysite.ninja_online",
        "mysite.consumers",
    ]


@pytest.fixture(params=["wsgi", "asgi"])
def server(request) -> str:
    return str(request.param)


def authorization(user: AbstractUser, scheme: str = "Token") -> str:
    return f"{scheme} {Token.objects.get_or_create(user=user)[0].key}"


def get_json(server: str, path: str, authorization: str = "") -> tuple[int, Any]:
    if authorization:
        response = send(server, "get", path, Authorization=authorization)
    else:
        response = send(server, "get", path)
    return response.status_code, json.loads(response.content)


@pytest.fixture
def people(alice, bob, staff) -> SimpleNamespace:
    return SimpleNamespace(alice=alice, bob=bob, staff=staff)


# Who a request is


def test_the_ninja_authentication_records_its_user(r, server, alice):
    status, _ = get_json(server, "/api/ninja/online", authorization(alice, "Bearer"))

    assert status == 200
    assert_only_user(r, alice)


def test_a_view_that_assigns_request_user_records_its_user(r, server, alice):
    status, document = get_json(server, "/api/me/", authorization(alice))

    assert (status, document) == (200, {"username": "alice"})
    assert_only_user(r, alice)


# Names for API clients

ENDPOINTS = {"drf": ("/api/drf/online/", "Token"), "ninja": ("/api/ninja/online", "Bearer")}


@pytest.fixture(params=list(ENDPOINTS))
def endpoint(request) -> tuple[str, str]:
    return ENDPOINTS[request.param]


def test_a_token_client_gets_the_names_show_names_to_allows(r, settings, server, endpoint, people):
    configure(settings, SHOW_NAMES_TO="staff")
    whos_online.record_user(people.bob)
    url, scheme = endpoint

    status, document = get_json(server, url, authorization(people.staff, scheme))
    assert status == 200
    assert document["names"] == [{"name": "bob", "url": ""}]
    assert (document["users"], document["total"]) == (1, 1)

    status, document = get_json(server, url, authorization(people.alice, scheme))
    assert status == 200
    assert "names" not in document
    assert document["users"] == 2  # bob, and sam (staff), recorded after their call

    configure(settings, SHOW_NAMES_TO="authenticated")
    _, document = get_json(server, url, authorization(people.alice, scheme))
    assert [name["name"] for name in document["names"]] == ["alice", "sam", "bob"]


def test_an_anonymous_client_gets_the_counts_of_drf_and_nothing_of_ninja(r, settings, server):
    configure(settings, SHOW_NAMES_TO="authenticated")

    status, document = get_json(server, ENDPOINTS["drf"][0])
    assert status == 200
    assert document == {"users": 0, "guests": 0, "bots": 0, "total": 0}

    status, _ = get_json(server, ENDPOINTS["ninja"][0])
    assert status == 401  # the router's authentication refuses


def test_a_room_is_answered_as_the_site_s_rule_allows(r, settings, server, endpoint, people):
    configure(settings, SHOW_NAMES_TO="authenticated")
    whos_online.record_user(people.bob, room="moderators:1")
    whos_online.record_user(people.alice, room="topic:1")
    url, scheme = endpoint
    alice, bob, staff = (
        authorization(user, scheme) for user in (people.alice, people.bob, people.staff)
    )

    status, _ = get_json(server, f"{url}?room=moderators:1", alice)
    assert status == 403

    status, document = get_json(server, f"{url}?room=moderators:1", staff)
    assert status == 200
    assert document["names"] == [{"name": "bob", "url": ""}]
    assert document["users"] == 1

    status, document = get_json(server, f"{url}?room=topic:1", bob)
    assert status == 200
    assert [name["name"] for name in document["names"]] == ["alice"]

    status, _ = get_json(server, f"{url}?room=", bob)
    assert status == 400


# Channels and WebSockets


def test_a_consumer_keeps_its_user_online_on_a_site_without_rooms(r, alice, mysite):
    keep_online = mysite["mysite.consumers"].keep_online

    async_to_sync(keep_online)(alice)

    assert members(r, "users") == [str(alice.pk)]
    assert whos_online.is_online(alice)


def test_a_consumer_would_take_its_user_out_of_their_page_s_room(r, alice, mysite):
    """What the page warns of, on a site with rooms."""
    whos_online.record_user(alice, room="topic:1")

    async_to_sync(mysite["mysite.consumers"].keep_online)(alice)

    assert whos_online.online_counts(room="topic:1").users == 0
