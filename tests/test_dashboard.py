"""The staff dashboard: who may open it, what it shows, its charts, and what its reads cost."""

from __future__ import annotations

import html
import logging
import re
import time
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders

import whos_online
from tests.support.helpers import HOSTILE, client_of, configure, members
from whos_online import checks, dashboard
from whos_online.config.settings import get_config
from whos_online.recording.throttle import COOKIE_NAME
from whos_online.store import counters

if TYPE_CHECKING:
    from tests.support.helpers import RedisCalls

URL = "/online/"
REFRESH = "/online/refresh/"


def charts_in(markup: str) -> dict[str, int]:
    """Each chart's counter name and how many points it draws."""
    found = re.findall(r'data-counter="([^"]*)"(.*?)</figure>', markup, flags=re.S)
    return {html.unescape(name): body.count("<circle") for name, body in found}


def visible_text(markup: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]*>", " ", markup))).strip()


# Who may open it


def test_anonymous_visitors_are_sent_to_the_login_page(backend):
    response = client_of(None).get(f"{URL}?precision=5")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/online/%3Fprecision%3D5"


def test_login_url_setting_is_followed(backend, settings):
    settings.LOGIN_URL = "/sign-in/"
    assert client_of(None).get(URL)["Location"] == "/sign-in/?next=/online/"


def test_refreshes_without_a_session_are_refused_and_count_nothing(backend, settings, r):
    """A dashboard left open after its session ended must not poll the login page forever."""
    configure(settings, COUNT_HITS=True)
    client = client_of(None)
    for _ in range(3):
        response = client.get(f"{REFRESH}?precision=60")
        assert response.status_code == 403
        assert COOKIE_NAME not in response.cookies

    assert whos_online.recording.visits.flush_hits() is True
    assert whos_online.get_counter("hits", 60) == []
    assert members(r, "guests") == []


def test_users_who_are_not_staff_get_a_page_saying_why(backend, alice, caplog):
    caplog.set_level(logging.DEBUG)
    page = client_of(alice).get(URL)
    refresh = client_of(alice).get(REFRESH)

    assert page.status_code == refresh.status_code == 403
    text = visible_text(page.content.decode())
    assert "Staff access needed" in text
    assert "You are logged in as alice, who has no staff access." in text
    assert '<a href="/">Back to the site</a>' in page.content.decode()
    assert 'href="/accounts/login/?next=/online/"' in page.content.decode()
    # Not an error: at most Django's one-line warning for a 4xx, and no traceback.
    assert all(record.levelno < logging.ERROR for record in caplog.records)
    assert all(record.exc_info is None for record in caplog.records)


def test_refreshes_without_a_session_say_to_log_in(backend):
    text = visible_text(client_of(None).get(REFRESH).content.decode())

    assert "log in with a staff account" in text


def test_an_inactive_staff_user_is_not_let_in(backend, staff):
    staff.is_active = False
    staff.save()
    # Django's ModelBackend does not load an inactive user: the session counts as anonymous.
    assert client_of(staff).get(URL).status_code in {302, 403}


def test_staff_see_it_and_it_is_never_cached(backend, staff):
    response = client_of(staff).get(URL)

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    assert "private" in response["Cache-Control"]


def test_post_is_not_allowed(backend, staff):
    assert client_of(staff).post(URL).status_code == 405


# What it shows


@pytest.mark.usefixtures("mid_utc_day")
def test_online_now_names_peak_and_visitors(backend, hiding_bob, staff, alice, bob):
    now = time.time()  # visits milliseconds apart: ordered
    whos_online.record_user(alice, now=now - 0.030)
    whos_online.record_user(bob, now=now - 0.020)
    whos_online.record_guest("198.51.100.1", now=now - 0.010)
    whos_online.record_guest("198.51.100.2", bot=True, now=now - 0.005)

    markup = client_of(staff).get(URL).content.decode()

    figures = dict(re.findall(r'data-count="(\w+)">(\d+)<', markup))
    assert figures == {
        "total": "3",
        "users": "2",
        "guests": "1",
        "bots": "1",
        "peak": "3",
        "visitors": "3",
    }
    assert "1 hidden" in visible_text(markup)
    names = re.findall(r'<ul class="wo-names">(.*?)</ul>', markup, flags=re.S)[0]
    assert "alice" in names
    assert "bob" not in names
    assert "Redis cannot be read" not in markup


def test_when_each_user_was_last_seen(backend, staff, alice, bob):
    now = time.time()
    whos_online.record_user(alice, now=now - 5)
    whos_online.record_user(bob, now=now - 300)

    text = visible_text(client_of(staff).get(URL).content.decode())

    assert "alice just now" in text
    assert "bob 5 minutes ago" in text


def test_opening_the_page_records_the_staff_user_but_refreshing_does_not(
    backend, r, staff, redis_calls: RedisCalls
):
    client = client_of(staff)

    response = client.get(REFRESH)
    trips = [trip[0] for trip in redis_calls.trips]
    assert trips == ["EVALSHA", "ZRANGEBYLEX", "HMGET", "EVALSHA", "ZRANGE"]
    assert members(r, "users") == []
    assert COOKIE_NAME not in response.cookies

    response = client.get(URL)
    assert members(r, "users") == [str(staff.pk)]
    assert COOKIE_NAME in response.cookies


def test_the_page_links_back_to_the_site_and_asks_for_no_favicon(backend, staff):
    page = client_of(staff).get(URL).content.decode()

    assert re.search(r'<header class="wo-header">.*<a class="wo-back" href="/">', page, re.S)
    assert '<link rel="icon" href="/static/whos_online/favicon.svg" type="image/svg+xml">' in page
    assert finders.find("whos_online/favicon.svg")


def test_the_refresh_is_the_body_of_the_page(backend, staff):
    client = client_of(staff)

    page = client.get(URL).content.decode()
    body = client.get(REFRESH).content.decode()

    assert "<html" in page
    assert "<html" not in body
    assert '<section class="wo-cards"' in body
    assert 'data-whos-online-dashboard="/online/refresh/?precision=60"' in page
    assert 'data-whos-online-refresh="30"' in page
    assert "dashboard.js" in page
    assert "dashboard.css" in page
    # No inline script and no resource from elsewhere: a strict CSP and no network suffice.
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == []
    assert re.findall(r'(?:src|href)="(?:https?:)?//', page) == []


def test_names_and_counter_names_are_escaped(backend, staff):
    hostile = get_user_model().objects.create_user(HOSTILE)
    whos_online.record_user(hostile)
    whos_online.update_counter(HOSTILE, 3)

    markup = client_of(staff).get(URL).content.decode()

    assert "<img" not in markup
    assert "<script" not in markup.replace('<script src="/static/whos_online/dashboard.js"', "")
    assert HOSTILE in visible_text(markup)
    assert HOSTILE in charts_in(markup)


# Charts


def test_charts_of_the_online_counts_hits_and_other_counters(backend, settings, staff):
    configure(settings, COUNT_HITS=True)
    now = time.time()
    for minute in range(5):
        whos_online.record_guest(f"198.51.100.{minute}", now=now - 60 * minute)
        whos_online.update_counter("signups", minute + 1, now=now - 60 * minute)
        whos_online.update_counter("hits", 10, now=now - 60 * minute)

    markup = client_of(staff).get(URL).content.decode()

    drawn = charts_in(markup)
    assert list(drawn) == ["online:users", "online:guests", "online:bots", "hits", "signups"]
    # Gauges draw the slices that have a sample (every recorded visit samples all three);
    # counters that add up draw every slice, a zero where nothing was added.
    assert drawn["online:guests"] == drawn["online:users"] == drawn["online:bots"] == 5
    assert drawn["hits"] == drawn["signups"] == 120
    assert "Guests online" in markup
    assert "15 in all" in visible_text(markup)
    assert "50 in all" in visible_text(markup)
    assert "highest 5" in visible_text(markup)
    assert "No samples yet" not in markup


def test_a_chart_without_samples_says_so(backend, staff):
    markup = client_of(staff).get(URL).content.decode()

    assert charts_in(markup) == {"online:users": 0, "online:guests": 0, "online:bots": 0}
    assert markup.count("No samples yet") == 3


def test_hits_are_charted_only_when_counted_or_kept(backend, settings, staff):
    assert "hits" not in charts_in(client_of(staff).get(URL).content.decode())

    whos_online.update_counter("hits")
    assert "hits" in charts_in(client_of(staff).get(URL).content.decode())


def test_other_precisions_chart_their_own_slices(backend, staff):
    whos_online.update_counter("signups", 2)

    markup = client_of(staff).get(f"{URL}?precision=5").content.decode()

    assert 'aria-current="page">5 s<' in markup
    assert "one point per 5 s" in markup
    assert charts_in(markup)["signups"] == 120
    assert re.search(r'class="time-label"[^>]*>\d\d:\d\d:\d\d<', markup)
    assert 'data-whos-online-dashboard="/online/refresh/?precision=5"' in markup


@pytest.mark.parametrize("value", ["7", "abc", "", "-60", "60.0", "\u0666\u0660", "1e3"])
def test_a_precision_not_configured_is_a_bad_request(backend, staff, value):
    for url in (URL, REFRESH):
        response = client_of(staff).get(url, {"precision": value})
        assert response.status_code == 400
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert b"1, 5, 60, 300, 3600, 18000, 86400" in response.content


@pytest.mark.parametrize("prefix", ["a-", "z-"])
def test_too_many_counters_are_counted_not_drawn(backend, staff, prefix):
    """Whether the site's own counters sort before the online counters or after them."""
    whos_online.record_guest("198.51.100.1")  # the online counters exist, as on a real site
    for index in range(dashboard.MAX_CHARTS + 5):
        whos_online.update_counter(f"{prefix}{index:02d}")

    markup = client_of(staff).get(URL).content.decode()

    # 29 own counters and 3 online counters; 24 charts are drawn, the online ones among them.
    assert len(charts_in(markup)) == dashboard.MAX_CHARTS
    assert "8 more counters are not shown." in markup


def test_reads_are_bounded_by_the_slices_shown(backend, settings, r, staff, redis_calls):
    """A round trip per kind of read, and HMGET of the slices shown, however much the cleanup
    left behind."""
    configure(settings, COUNTER_SAMPLES=30)
    now = time.time()
    whos_online.update_counter("signups", 1, now=now)
    stale = {str(int(now) - 60 * 1000 - 60 * i): 1 for i in range(5000)}
    r.hset(counters.counter_key(get_config(), "signups", 60), mapping=stale)
    redis_calls.clear()

    markup = client_of(staff).get(REFRESH).content.decode()

    assert redis_calls.trips == [
        ["EVALSHA"],
        ["ZRANGEBYLEX", "ZLEXCOUNT", "ZMSCORE"],
        ["HMGET"] * 4,
        ["EVALSHA"],  # the rooms most recently active, with who is in each
        ["ZRANGE"] * 4,  # the longest-unseen member of each set: is the cleanup running?
    ]
    assert charts_in(markup)["signups"] == 30


CLEANUP_LATE = "the cleanup command has not run since then"


def test_people_gone_for_several_windows_show_that_the_cleanup_is_not_running(backend, staff):
    window = get_config().window
    now = time.time()
    whos_online.record_guest("198.51.100.1", now=now - dashboard.OVERDUE_WINDOWS * window - 60)

    text = visible_text(client_of(staff).get(URL).content.decode())

    assert CLEANUP_LATE in text
    assert "People last seen 31 minutes ago are still in the online sets" in text
    [warning] = checks.check_cleanup_runs()
    assert warning.id == "whos_online.W005"
    assert "People last seen 31\xa0minutes ago" in warning.msg

    assert whos_online.prune() == 1
    assert CLEANUP_LATE not in visible_text(client_of(staff).get(URL).content.decode())
    assert checks.check_cleanup_runs() == []


def test_people_gone_for_less_than_that_are_no_sign_of_a_missing_cleanup(backend, staff):
    window = get_config().window
    now = time.time()
    whos_online.record_guest("198.51.100.1", now=now - dashboard.OVERDUE_WINDOWS * window + 60)

    assert CLEANUP_LATE not in visible_text(client_of(staff).get(URL).content.decode())
    assert checks.check_cleanup_runs() == []


def test_the_cleanup_check_says_nothing_while_redis_is_down(redis_down):
    assert checks.check_cleanup_runs() == []


def test_the_cleanup_check_runs_only_on_deploy_checks():
    from django.core.checks import registry

    def names(include_deployment_checks: bool) -> set[str]:
        found = registry.registry.get_checks(include_deployment_checks=include_deployment_checks)
        return {getattr(check, "__name__", "") for check in found}

    assert "check_cleanup_runs" in names(include_deployment_checks=True)
    assert "check_cleanup_runs" not in names(include_deployment_checks=False)


def test_fails_open_while_redis_is_down(redis_down, staff):
    response = client_of(staff).get(URL)

    assert response.status_code == 200
    markup = response.content.decode()
    assert "Redis cannot be read right now" in markup
    assert list(charts_in(markup)) == ["online:users", "online:guests", "online:bots"]
    assert markup.count("No samples yet") == 3


# Pure helpers


def test_counter_names_of_one_precision(backend, r, settings):
    configure(settings, COUNTER_PRECISIONS=[6, 60, 600])
    for name in ("b", "a:b", "c"):
        whos_online.update_counter(name)

    assert counters.names(r, get_config(), 60, limit=10) == (["a:b", "b", "c"], 3, 0)
    assert counters.names(r, get_config(), 60, limit=2) == (["a:b", "b"], 3, 0)
    assert counters.names(r, get_config(), 6, limit=10) == (["a:b", "b", "c"], 3, 0)
    assert counters.names(r, get_config(), 60, limit=1, among=["c", "d", "b"]) == (["a:b"], 3, 2)
    assert counters.names(r, get_config(), 1, limit=10) == ([], 0, 0)


@pytest.mark.parametrize(
    ("precisions", "expected"),
    [([1, 5, 60, 300], 60), ([1, 5, 300], 300), ([1, 5], 5), ([86400], 86400)],
)
def test_default_precision(settings, precisions, expected):
    configure(settings, COUNTER_PRECISIONS=precisions)
    assert dashboard.default_precision(get_config()) == expected


@pytest.mark.parametrize(
    ("seconds", "label"),
    [
        (1, "1 s"),
        (5, "5 s"),
        (90, "90 s"),
        (60, "1 min"),
        (300, "5 min"),
        (3600, "1 h"),
        (18000, "5 h"),
        (86400, "1 day"),
        (172800, "2 days"),
    ],
)
def test_precision_labels(seconds, label):
    assert dashboard.precision_label(seconds) == label


def test_slice_starts_end_with_the_current_slice():
    assert dashboard.slice_starts(1000.5, 60, 3) == [840, 900, 960]


@pytest.mark.parametrize(
    ("precision", "label"),
    [(1, "10:05:07"), (60, "10:05"), (3600, "4 Jan 10:05"), (86400, "4 Jan 2100")],
)
def test_time_labels_follow_the_precision_and_time_zone(settings, precision, label):
    settings.TIME_ZONE = "Europe/Paris"
    # 2100-01-04 09:05:07 UTC is 10:05:07 in Paris.
    assert dashboard.time_label(precision)(4_102_736_707) == label


# The busiest rooms


def test_the_busiest_rooms_now_fullest_first(backend, staff):
    for address in ("192.0.2.1", "192.0.2.2"):
        whos_online.record_guest(address, room="topic:2")
    whos_online.record_guest("192.0.2.3", room="topic:1")
    whos_online.record_guest("192.0.2.3", bot=True, room=HOSTILE)
    whos_online.record_guest("192.0.2.4", room="gone")
    whos_online.record_guest("192.0.2.4")  # left that room: it is not shown

    shown = dashboard.collect(60, now=time.time()).rooms
    assert [(room.name, room.counts.total, room.counts.bots) for room in shown] == [
        ("topic:2", 2, 0),
        ("topic:1", 1, 0),
        (HOSTILE, 0, 1),
    ]
    markup = client_of(staff).get("/online/refresh/").content.decode()
    assert "Busiest rooms now" in markup
    assert html.escape(HOSTILE) in markup
    assert '<tr data-room="topic:2"><th scope="row" dir="auto">topic:2</th><td>2</td>' in markup


def test_the_busiest_rooms_are_read_in_bounded_steps(backend, settings, staff, redis_calls):
    configure(settings, SHARDS=3)
    for number in range(dashboard.ROOMS_READ * 2):
        whos_online.record_guest(f"198.51.100.{number}", room=f"room:{number}")
    redis_calls.clear()

    shown = dashboard.collect(60, now=time.time()).rooms

    assert len(shown) == dashboard.ROOMS_SHOWN
    # One script per shard, in one round trip, each reading at most ROOMS_READ rooms.
    assert ["EVALSHA"] * 3 in redis_calls.trips
