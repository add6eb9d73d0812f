"""The widget view, which the live widget refreshes from: ``{% whos_online live=True %}`` rendered
for the poll, with the JSON view's names rule, read, caching and fail-open."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import translation

import whos_online
from tests.support.helpers import (
    HOSTILE,
    NAMES_RULE_CASES,
    client_of,
    configure,
    members,
    override_widget_template,
    render,
    widget_text,
)
from whos_online.flushing import batches
from whos_online.recording.throttle import COOKIE_NAME

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser
    from django.test import Client

    from tests.support.helpers import RedisCalls

URL = "/online/widget/"
QUERY = "peak=1&visitors=1&refresh=30&lang=en-us"
TAG = "{% load whos_online %}{% whos_online live=True visitors=True %}"


def get(client: Client, query: str = QUERY) -> Any:
    """The response (Django's test response type), checked to be the widget's HTML."""
    response = client.get(f"{URL}?{query}")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    return response


def populate(alice: AbstractUser, bob: AbstractUser) -> None:
    """alice (newest) and bob online, two guests and a bot, milliseconds apart (one UTC day)."""
    now = time.time()
    whos_online.record_user(bob, now=now - 0.020)
    whos_online.record_guest("198.51.100.1", now=now - 0.015)
    whos_online.record_guest("198.51.100.2", now=now - 0.012)
    whos_online.record_guest("198.51.100.3", bot=True, now=now - 0.011)
    whos_online.record_user(alice, now=now - 0.010)


def test_the_url_is_named():
    assert reverse("whos_online:widget") == URL


def test_it_renders_what_the_tag_renders_on_a_page(backend, alice, bob):
    populate(alice, bob)

    response = get(client_of())

    assert response.content.decode() == render(TAG)
    assert response["Whos-Online-Ok"] == "1"
    text = widget_text(response.content.decode())
    assert text == "Who's online: 2 users, 2 guests and 1 bot 4 unique visitors today"


def test_staff_get_names(backend, alice, bob, staff):
    populate(alice, bob)

    text = widget_text(get(client_of(staff)).content.decode())

    assert text.startswith("Who's online: alice, bob, 2 guests and 1 bot")


@pytest.mark.parametrize(
    "case",
    NAMES_RULE_CASES,
    ids=lambda case: f"{case[0]}-{case[1]}",
)
@pytest.mark.usefixtures("backend", "staff")
def test_names_only_for_those_allowed(settings, alice, bob, case):
    show_names_to, viewer, named = case
    configure(settings, SHOW_NAMES_TO=show_names_to)
    populate(alice, bob)
    viewing = get_user_model().objects.get(username=viewer) if viewer else None

    markup = get(client_of(viewing)).content.decode()

    assert ("alice" in markup) is named
    assert ("2 users" in widget_text(markup)) is not named


def test_the_tag_arguments_come_from_the_query(backend, alice, bob):
    populate(alice, bob)

    markup = get(client_of(), "peak=0&visitors=0&refresh=5&lang=en-us").content.decode()

    assert "whos-online-visitors" not in markup
    assert "whos-online-peak" not in markup
    assert 'data-whos-online-refresh="5"' in markup
    assert 'data-whos-online-live="/online/widget/?peak=0&amp;visitors=0&amp;refresh=5' in markup


def test_the_refreshes_of_a_site_override_are_the_override(backend, settings, tmp_path, alice):
    override_widget_template(
        settings,
        tmp_path,
        '<p data-whos-online-live="{{ live.url }}">{% load i18n %}'
        "{% blocktranslate count people=counts.total %}{{ people }} soul aboard"
        "{% plural %}{{ people }} souls aboard{% endblocktranslate %}</p>",
    )
    whos_online.record_user(alice)

    markup = get(client_of()).content.decode()

    assert (
        markup
        == f'<p data-whos-online-live="{URL}?{QUERY.replace("&", "&amp;")}">1 soul aboard</p>'
    )


def test_the_page_language_is_used_and_said(backend, settings):
    settings.LANGUAGES = [("en", "English"), ("de", "German")]

    german = get(client_of(), "lang=de")
    gone = get(client_of(), "lang=fr")  # a language the site no longer offers
    invalid = get(client_of(), "lang=de-%3Cb%3E")

    assert german["Content-Language"] == "de"
    assert "lang=de" in german.content.decode()
    assert gone["Content-Language"] == invalid["Content-Language"] == translation.get_language()


@pytest.mark.parametrize(
    "query",
    [
        "peak=2",
        "visitors=yes",
        "site=true",
        "refresh=0",
        "refresh=-1",
        "refresh=1.5",
        "refresh=86401",
    ],
)
def test_bad_arguments_are_a_bad_request(backend, query):
    response = client_of().get(f"{URL}?{query}")

    assert response.status_code == 400
    assert response["Content-Type"] == "text/plain; charset=utf-8"


def test_missing_arguments_take_the_tags_defaults(backend, settings):
    configure(settings, REFRESH_INTERVAL=12)

    markup = get(client_of(), "").content.decode()

    assert 'data-whos-online-refresh="12"' in markup
    assert "whos-online-visitors" not in markup


def test_cached_like_the_json_view(backend, settings, staff):
    configure(settings, JSON_MAX_AGE=7)

    anonymous = get(client_of())
    named = get(client_of(staff))

    assert anonymous["Cache-Control"] == "public, max-age=7"
    assert "Vary" not in anonymous
    assert not anonymous.cookies
    assert named["Cache-Control"] == "private, max-age=7"
    assert "Cookie" in named["Vary"]


def test_a_poll_is_one_round_trip_and_records_nobody(
    settings, r, alice, bob, redis_calls: RedisCalls
):
    configure(settings, COUNT_HITS=True)
    populate(alice, bob)
    guests_before = members(r, "guests")
    redis_calls.clear()

    response = get(client_of())

    assert redis_calls.trips == [["EVALSHA"]]
    assert members(r, "guests") == guests_before
    assert batches.buffer().total() == 0
    assert COOKIE_NAME not in response.cookies


def test_a_room_and_the_site_are_one_round_trip(backend, alice, bob, redis_calls: RedisCalls):
    whos_online.record_user(bob)
    whos_online.record_user(alice, room="topic:1")
    query = urlencode({"room": "topic:1", "token": whos_online.room_token("topic:1"), "site": 1})
    get(client_of(), query)  # loads the script into a fresh server
    redis_calls.clear()

    response = get(client_of(), query)

    assert redis_calls.trips == [["EVALSHA", "EVALSHA"]]
    assert widget_text(response.content.decode()) == "Here now: 1 user Who's online: 2 users"


def test_polls_share_the_kept_snapshot(settings, alice, bob, redis_calls: RedisCalls):
    configure(settings, SNAPSHOT_MAX_AGE=60)
    populate(alice, bob)
    get(client_of())
    redis_calls.clear()

    get(client_of())
    client_of().get("/online/counts.json")

    assert redis_calls.trips == []


def test_names_are_escaped(backend, settings, db):
    configure(settings, SHOW_NAMES_TO="everyone")
    whos_online.record_user(get_user_model().objects.create_user(HOSTILE))

    markup = get(client_of()).content.decode()

    assert "<img" not in markup
    assert "&lt;img" in markup


def test_says_when_redis_cannot_be_read(redis_down):
    response = get(client_of())

    assert response["Whos-Online-Ok"] == "0"
    assert widget_text(response.content.decode()).startswith("Who's online: nobody")


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_only_get_and_head(backend, method):
    assert getattr(client_of(), method)(URL).status_code == 405
    assert client_of().head(URL).status_code == 200
