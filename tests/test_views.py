"""The JSON view of the counts: its document, who gets names, cache headers, and what it costs."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

import whos_online
from tests.support.helpers import HOSTILE, NAMES_RULE_CASES, client_of, configure, members
from whos_online.flushing import batches
from whos_online.recording.throttle import COOKIE_NAME

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser
    from django.test import Client

    from tests.support.helpers import RedisCalls

# Their counts of unique visitors today must not straddle a UTC midnight.
pytestmark = pytest.mark.usefixtures("mid_utc_day")

URL = "/online/counts.json"
#: The document while nobody is online, for a viewer without names.
NOBODY = {
    "ok": True,
    "users": 0,
    "guests": 0,
    "bots": 0,
    "total": 0,
    "peak": {"people": 0, "when": None},
    "visitors_today": 0,
}


def not_carol(user: Any) -> bool:
    return bool(user.get_username() != "carol")


def named_carol(user: AbstractUser) -> bool:
    return user.get_username() == "carol"


def get(client: Client) -> tuple[Any, dict[str, Any]]:
    """The response (Django's test response type) and its JSON document."""
    response = client.get(URL)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    return response, json.loads(response.content)


def populate(alice: AbstractUser, bob: AbstractUser) -> float:
    """alice (newest) and bob online, two guests and a bot; returns when alice was seen.

    The visits are milliseconds apart, which orders them (the module's tests run at noon UTC,
    so that they fall on one day).
    """
    now = time.time()
    whos_online.record_user(bob, now=now - 0.020)
    whos_online.record_guest("198.51.100.1", now=now - 0.015)
    whos_online.record_guest("198.51.100.2", now=now - 0.012)
    whos_online.record_guest("198.51.100.3", bot=True, now=now - 0.011)
    whos_online.record_user(alice, now=now - 0.010)
    return now - 0.010


def test_the_url_is_named():
    assert reverse("whos_online:counts") == URL


def test_document_for_an_anonymous_visitor(backend, alice, bob):
    seen = populate(alice, bob)

    _, document = get(client_of())

    assert document == {
        "ok": True,
        "users": 2,
        "guests": 2,
        "bots": 1,
        "total": 4,
        "peak": {"people": 4, "when": document["peak"]["when"]},
        "visitors_today": 4,
    }
    # Django's JSON encoder writes aware UTC times in ISO 8601 with milliseconds and a Z.
    when = datetime.fromisoformat(document["peak"]["when"].replace("Z", "+00:00"))
    assert abs(when - datetime.fromtimestamp(seen, tz=timezone.utc)).total_seconds() < 0.001


def test_document_with_nobody_online(backend):
    _, document = get(client_of())

    assert document == NOBODY


def test_staff_get_names_newest_first_and_how_many_more(backend, settings, alice, bob, staff):
    configure(settings, DISPLAY_LIMIT=1)
    populate(alice, bob)

    _, document = get(client_of(staff))

    assert document["names"] == [{"name": "alice", "url": ""}]
    assert document["more"] == 1
    assert document["users"] == 2


def test_hidden_users_are_counted_never_named(backend, hiding_bob, alice, bob, staff):
    populate(alice, bob)

    _, document = get(client_of(staff))

    assert document["names"] == [{"name": "alice", "url": ""}]
    assert document["more"] == 0
    assert document["users"] == 2


@pytest.mark.parametrize(
    "case",
    [
        *NAMES_RULE_CASES,
        ("tests.test_views.named_carol", "alice", False),
        ("tests.test_views.named_carol", "carol", True),
    ],
    ids=lambda case: f"{case[0]}-{case[1]}",
)
@pytest.mark.usefixtures("backend", "staff")
def test_names_only_for_those_allowed(settings, alice, bob, case):
    show_names_to, viewer, named = case
    configure(settings, SHOW_NAMES_TO=show_names_to)
    get_user_model().objects.create_user("carol")
    populate(alice, bob)

    viewing = get_user_model().objects.get(username=viewer) if viewer else None
    _, document = get(client_of(viewing))

    assert ("names" in document) is named
    assert ("more" in document) is named


def test_a_rule_of_the_sites_own_is_asked_about_visitors_without_a_session(
    backend, settings, alice, bob
):
    configure(settings, SHOW_NAMES_TO="tests.test_views.not_carol")
    populate(alice, bob)

    response, document = get(client_of())

    assert [each["name"] for each in document["names"]] == ["alice", "bob"]
    assert response["Cache-Control"] == "private, max-age=10"
    assert "Vary" not in response  # asked about an AnonymousUser: no session was read


def test_an_inactive_staff_user_gets_no_names(backend, alice, bob, staff):
    staff.is_active = False
    staff.save()
    populate(alice, bob)

    _, document = get(client_of(staff))

    assert "names" not in document


def test_anonymous_answer_is_public_and_leaves_the_session_alone(backend, settings):
    configure(settings, JSON_MAX_AGE=7)

    response, _ = get(client_of())

    assert response["Cache-Control"] == "public, max-age=7"
    assert "Vary" not in response
    assert not response.cookies


def test_answer_with_names_for_staff_is_private(backend, staff):
    response, document = get(client_of(staff))

    assert "names" in document
    assert response["Cache-Control"] == "private, max-age=10"
    assert "Cookie" in response["Vary"]


def test_a_user_without_names_gets_the_public_answer(backend, alice):
    response, document = get(client_of(alice))

    assert "names" not in document
    assert response["Cache-Control"] == "public, max-age=10"


def test_names_for_everyone_are_public_and_the_user_is_never_loaded(backend, settings, alice):
    configure(settings, SHOW_NAMES_TO="everyone", JSON_MAX_AGE=0)

    response, document = get(client_of(alice))

    assert document["names"] == []
    assert response["Cache-Control"] == "public, max-age=0"
    assert "Vary" not in response


def test_a_poll_is_one_round_trip_and_records_nobody(
    settings, r, alice, bob, redis_calls: RedisCalls
):
    configure(settings, COUNT_HITS=True)
    populate(alice, bob)
    guests_before = members(r, "guests")
    redis_calls.clear()

    response, _ = get(client_of())

    assert redis_calls.trips == [["EVALSHA"]]
    assert members(r, "guests") == guests_before
    assert batches.buffer().total() == 0
    assert COOKIE_NAME not in response.cookies


def test_a_staff_poll_is_one_round_trip_too(backend, staff, redis_calls: RedisCalls):
    response, document = get(client_of(staff))

    assert "names" in document
    assert redis_calls.trips == [["EVALSHA"]]
    assert COOKIE_NAME not in response.cookies


def test_names_are_json_text_and_the_document_stays_inert_as_html(backend, settings, staff):
    configure(settings, SHOW_NAMES_TO="everyone")
    hostile = get_user_model().objects.create_user(HOSTILE)
    whos_online.record_user(hostile)

    response, document = get(client_of())

    # The right-to-left override at its end is dropped: nothing closes it.
    assert document["names"] == [{"name": HOSTILE.removesuffix("\u202e"), "url": ""}]
    assert b"<" not in response.content
    assert b">" not in response.content
    assert b"&" not in response.content


def test_fails_open_while_redis_is_down(redis_down, staff):
    response, document = get(client_of(staff))

    assert document == {**NOBODY, "ok": False, "names": [], "more": 0}
    assert response["Cache-Control"] == "private, max-age=10"


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_only_get_and_head(backend, method):
    response = getattr(client_of(), method)(URL)
    assert response.status_code == 405
    assert client_of().head(URL).status_code == 200
