"""``not_recorded``: polls record nobody and count no hit, on both middleware paths."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction
from django.test import AsyncClient

from tests.support.helpers import client_of, configure, members
from tests.urls import async_poll, poll
from whos_online.decorators import not_recorded
from whos_online.flushing import batches
from whos_online.recording.state import VIEW_ATTRIBUTE as ATTRIBUTE
from whos_online.recording.state import RequestState
from whos_online.recording.throttle import COOKIE_NAME


@pytest.fixture
def counting(settings) -> None:
    configure(settings, COUNT_HITS=True)


def test_the_decorator_marks_the_view_itself():
    def view(request):
        raise AssertionError

    assert not_recorded(view) is view
    assert getattr(view, ATTRIBUTE) is True
    assert getattr(poll, ATTRIBUTE) is True
    # An async view stays a coroutine function, which Django needs to await it.
    assert getattr(async_poll, ATTRIBUTE) is True
    assert iscoroutinefunction(async_poll)


def test_a_poll_from_a_new_guest_touches_redis_not_at_all(r, counting, redis_calls):
    response = client_of().get("/poll/")

    assert response.status_code == 200
    assert redis_calls.trips == []
    assert batches.buffer().total() == 0
    assert COOKIE_NAME not in response.cookies
    assert members(r, "guests") == []


def test_a_poll_from_a_user_records_nobody_and_leaves_the_session_alone(
    r, counting, redis_calls, alice
):
    response = client_of(alice).get("/poll/")

    assert redis_calls.trips == []
    assert members(r, "users") == []
    assert batches.buffer().total() == 0
    assert not response.cookies
    assert "Cookie" not in response.get("Vary", "")


def test_an_async_poll_records_nobody(r, counting, redis_calls):
    response = async_to_sync(AsyncClient(REMOTE_ADDR="203.0.113.7").get)("/async-poll/")

    assert response.content == b"async poll"
    assert redis_calls.trips == []
    assert batches.buffer().total() == 0
    assert COOKIE_NAME not in response.cookies


def test_ordinary_views_around_a_poll_are_still_recorded_and_counted(r, counting):
    client = client_of()

    client.get("/poll/")
    client.get("/plain/")
    client.get("/poll/")
    client.get("/no-such-page/")  # resolved to no view: an ordinary visit, but no page view

    assert len(members(r, "guests")) == 1
    # The page was counted, and the one recorded visit carried it; a 404 is no page hit.
    assert batches.buffer().total() == 0


def test_a_throttled_request_does_not_look_at_the_view(r, client, monkeypatch):
    """The fast path stays as it was: no look-up of the resolved view when there is nothing to
    count or record."""
    client.get("/plain/")
    assert COOKIE_NAME in client.cookies

    def fail(state):
        raise AssertionError("looked at the view of a throttled request")

    monkeypatch.setattr(RequestState, "is_not_recorded", fail)
    assert client.get("/poll/").status_code == 200
    assert client.get("/plain/").status_code == 200
