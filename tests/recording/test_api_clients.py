"""Who a request is, when the view's own authentication says: API clients, token logins.

Each test runs under WSGI (Django's test Client) and ASGI (its AsyncClient, through the ASGI
handler and the middleware's async path), with clients that keep no cookies, as apps do: the
person is decided after the view, the same way under both, whatever the client's User-Agent.
The site's views are in tests/api_urls.py; none of them knows of whos_online.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client
from rest_framework.authtoken.models import Token

import whos_online
from tests.api_urls import SESSION_TOKEN_HEADER
from tests.support.helpers import guest, log_in_quietly, members

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser
    from django.http import HttpResponse

pytestmark = pytest.mark.urls("tests.api_urls")

#: The address of both test clients.
ADDRESS = "127.0.0.1"
#: The default User-Agent of OkHttp (Android apps, React Native), which BOT_USER_AGENTS counts as
#: a bot's; and those of Python's HTTP libraries.
OKHTTP = "okhttp/4.12.0"
LIBRARIES = [OKHTTP, "python-requests/2.32.3", "python-httpx/0.28.1"]


@pytest.fixture(params=["wsgi", "asgi"])
def server(request) -> str:
    return str(request.param)


def send(
    server: str,
    method: str,
    path: str,
    *,
    client: Client | AsyncClient | None = None,
    agent: str = OKHTTP,
    body: dict[str, str] | None = None,
    **headers: str,
) -> HttpResponse:
    """One request as a client that keeps no cookies (a new client each time, unless given)."""
    extra: dict[str, Any] = {"headers": {"User-Agent": agent, **headers}}
    if body is not None:
        extra.update(data=json.dumps(body), content_type="application/json")
    if server == "wsgi":
        client = Client() if client is None else client
        response: HttpResponse = getattr(client, method)(path, **extra)
    else:
        client = AsyncClient() if client is None else client
        response = async_to_sync(getattr(client, method))(path, **extra)
    return response


def token_of(user: AbstractUser) -> str:
    return str(Token.objects.get_or_create(user=user)[0].key)


def assert_only_user(r: Any, user: AbstractUser) -> None:
    assert members(r, "users") == [str(user.pk)]
    assert members(r, "guests") == []
    assert members(r, "bots") == []


# Token-authenticated API clients

TOKEN_ENDPOINTS = {
    "drf": ("/api/drf/me/", "Token"),
    "ninja": ("/api/ninja/me", "Bearer"),
    "ninja-async": ("/api/ninja/async-me", "Bearer"),
    "ninja-assigning-user": ("/api/ninja/assigning-me", "Bearer"),
    "own-view": ("/api/own/me/", "Token"),
}


@pytest.mark.parametrize("endpoint", TOKEN_ENDPOINTS)
def test_a_token_user_is_recorded_as_that_user(r, server, alice, endpoint):
    path, scheme = TOKEN_ENDPOINTS[endpoint]

    response = send(server, "get", path, Authorization=f"{scheme} {token_of(alice)}")

    assert response.status_code == 200
    assert json.loads(response.content)["username"] == "alice"
    assert_only_user(r, alice)


@pytest.mark.parametrize("agent", LIBRARIES)
def test_an_authenticated_request_is_never_a_bot(r, server, alice, agent):
    send(server, "get", "/api/drf/me/", agent=agent, Authorization=f"Token {token_of(alice)}")

    assert_only_user(r, alice)


def test_an_anonymous_request_of_the_same_client_is_a_bot(r, server):
    """The User-Agent still tells a bot where nobody is authenticated."""
    response = send(server, "get", "/api/drf/token-only/")

    assert json.loads(response.content) == {"authenticated": False}
    assert members(r, "bots") == [guest(ADDRESS)]
    assert members(r, "users") == members(r, "guests") == []


def test_a_ninja_authentication_that_returns_no_user_leaves_the_request_anonymous(r, server, alice):
    response = send(
        server, "get", "/api/ninja/token-key", Authorization=f"Bearer {token_of(alice)}"
    )

    assert json.loads(response.content) == {"authenticated": False}
    assert members(r, "bots") == [guest(ADDRESS)]
    assert members(r, "users") == []


def test_a_site_without_authentication_middleware_records_guests(r, server, settings, db):
    """Whose API makes every request anonymous: nobody has a session's user to load."""
    settings.MIDDLEWARE = [
        "django.contrib.sessions.middleware.SessionMiddleware",
        "whos_online.middleware.WhosOnlineMiddleware",
    ]

    response = send(server, "get", "/api/drf/token-only/", agent="Mozilla/5.0")

    assert json.loads(response.content) == {"authenticated": False}
    assert members(r, "guests") == [guest(ADDRESS)]


@pytest.mark.parametrize("endpoint", ["drf", "ninja", "ninja-async"])
def test_a_cookie_less_token_client_costs_one_write(r, server, alice, redis_calls, endpoint):
    path, scheme = TOKEN_ENDPOINTS[endpoint]
    authorization = f"{scheme} {token_of(alice)}"

    for _ in range(100):  # as SPEC's 100 cookie-less requests of one client
        response = send(server, "get", path, Authorization=authorization)
        assert response.status_code == 200

    assert redis_calls.commands.count("EVALSHA") == 1
    assert_only_user(r, alice)


def test_every_token_user_behind_one_address_is_themselves(r, server, alice, bob):
    for user in (alice, bob, alice):
        send(server, "get", "/api/drf/me/", Authorization=f"Token {token_of(user)}")

    assert members(r, "users") == sorted([str(alice.pk), str(bob.pk)])
    assert members(r, "guests") == members(r, "bots") == []


def test_a_browser_s_session_user_stays_themselves_on_an_api_that_knows_only_tokens(
    r, server, alice
):
    """The API's authentication made the request anonymous; the browser's session still says
    who they are, as it does on the site's pages."""
    client: Client | AsyncClient = Client() if server == "wsgi" else AsyncClient()
    log_in_quietly(client, alice)

    response = send(server, "get", "/api/drf/token-only/", client=client, agent="Mozilla/5.0")

    assert json.loads(response.content) == {"authenticated": False}
    assert_only_user(r, alice)


def test_a_page_of_django_rest_framework_s_puts_its_reader_in_the_room_it_sets(r, server):
    response = send(server, "get", "/api/drf/topics/1/", agent="Mozilla/5.0")

    assert response["Content-Type"].startswith("text/html")
    assert whos_online.online_counts(room="topic:1").guests == 1


# A login that is the client's first request


def test_a_headless_login_leaves_no_guest(r, server, alice):
    """allauth's app API: a POST that logs in, without cookies, then the session token in a
    header. Its views run in a session of their own, and put the request's own user back
    after: an AnonymousUser, on the login's request."""
    response = send(
        server,
        "post",
        "/_allauth/app/v1/auth/login",
        body={"username": "alice", "password": "pw"},
    )
    assert response.status_code == 200
    assert_only_user(r, alice)

    token = json.loads(response.content)["meta"]["session_token"]
    for _ in range(3):
        response = send(
            server, "get", "/_allauth/app/v1/auth/session", **{SESSION_TOKEN_HEADER: token}
        )
        assert json.loads(response.content)["data"]["user"]["username"] == "alice"
    assert_only_user(r, alice)


def test_a_headless_logout_is_final(r, server, alice):
    token = json.loads(
        send(
            server,
            "post",
            "/_allauth/app/v1/auth/login",
            body={"username": "alice", "password": "pw"},
        ).content
    )["meta"]["session_token"]

    send(server, "delete", "/_allauth/app/v1/auth/session", **{SESSION_TOKEN_HEADER: token})

    assert members(r, "users") == []
    assert members(r, "bots") == [guest(ADDRESS)]  # okhttp, anonymous again
    assert whos_online.online_counts().users == 0


def test_a_login_after_the_view_asked_who_the_visitor_is_leaves_no_guest(r, alice):
    """``auser()`` keeps the AnonymousUser it answered before ``alogin()``."""
    response = send(
        "asgi",
        "post",
        "/api/async-login/",
        agent="Mozilla/5.0",
        body={"username": "alice", "password": "pw"},
    )

    assert response.status_code == 200
    assert_only_user(r, alice)
