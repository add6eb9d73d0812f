"""The user admin with ``OnlineUserAdminMixin`` (registered on an admin site of tests/urls.py)."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

import whos_online
from tests.support.helpers import configure, log_in_quietly
from whos_online import api
from whos_online.admin import OnlineUserAdminMixin
from whos_online.backend import clients, keyspace
from whos_online.config.settings import get_config
from whos_online.store import users

CHANGELIST = "/admin/auth/user/"


@pytest.fixture
def admin_browser(db) -> Client:
    boss = get_user_model().objects.create_superuser("boss", password="pw")
    browser = Client(REMOTE_ADDR="192.0.2.50")
    log_in_quietly(browser, boss)
    return browser


def cells(html: str, column: str) -> dict[str, str]:
    """Each row's cell of ``column``, by username."""
    rows = re.findall(r"<tr>(.*?)</tr>", html, flags=re.DOTALL)
    found = {}
    for row in rows:
        name = re.search(r'<th class="field-username">.*?>([^<]+)</a>', row)
        cell = re.search(rf'<td class="field-{column}[^"]*">(.*?)</td>', row, flags=re.DOTALL)
        if name and cell:
            found[name.group(1)] = cell.group(1)
    return found


def test_the_columns_show_who_is_online_and_when_each_was_last_seen(
    backend, admin_browser, alice, bob
):
    get_user_model().objects.create_user("carol")
    whos_online.record_user(alice)
    an_hour_ago = time.time() - 3600
    whos_online.record_user(bob, now=an_hour_ago)  # seen, no longer online

    response = admin_browser.get(CHANGELIST)

    assert response.status_code == 200
    html = response.content.decode()
    online = cells(html, "online_now")
    assert 'alt="True"' in online["alice"]
    assert 'alt="False"' in online["bob"]
    assert 'alt="False"' in online["carol"]
    seen = cells(html, "last_seen")
    assert str(datetime.now(tz=timezone.utc).year) in seen["alice"]
    assert str(datetime.fromtimestamp(an_hour_ago, tz=timezone.utc).year) in seen["bob"]
    assert seen["carol"] == "-"  # the admin's empty value


def test_one_redis_read_for_the_whole_page_whatever_the_number_of_rows(
    backend, admin_browser, redis_calls
):
    def trips_for_page_of(users: int) -> list[list[str]]:
        model = get_user_model()
        model.objects.bulk_create(
            [model(username=f"u{users}-{n}") for n in range(users - model.objects.count())]
        )
        for user in model.objects.all():
            whos_online.record_user(user)
        redis_calls.clear()
        assert admin_browser.get(CHANGELIST).status_code == 200
        return list(redis_calls.trips)

    few, many = trips_for_page_of(3), trips_for_page_of(60)

    assert len(few) == len(many) == 1  # the boss's own visit is throttled by their cookie
    assert many[0].count("HGET") == 60
    # A page's scores are one ZMSCORE per set: 57 more rows cost 57 more commands, the
    # HGETs of their last-seen times, and nothing else.
    assert many[0].count("ZMSCORE") == few[0].count("ZMSCORE") == 2
    assert len(many[0]) - len(few[0]) == 57


def test_a_page_reads_its_scores_with_one_command_per_set_and_shard(
    backend, settings, alice, bob, redis_calls
):
    configure(settings, SHARDS=4, HIDE_USER=lambda user: user.username == "bob")
    model = get_user_model()
    users = [alice, bob, *(model.objects.create_user(f"u{n}") for n in range(10))]
    for user in users[:-1]:  # the last one never visited
        whos_online.record_user(user)
    shards = {keyspace.user_shard(get_config(), str(user.pk)).tag for user in users}
    redis_calls.clear()

    found = api.presence(users)

    assert [found[user.pk].online for user in users] == [True] * 11 + [False]
    assert found[bob.pk].last_seen is not None  # hidden, and online all the same
    assert found[users[-1].pk].last_seen is None
    (trip,) = redis_calls.trips
    assert trip.count("ZMSCORE") == 2 * len(shards)
    assert trip.count("HGET") == len(users)
    assert len(trip) == 2 * len(shards) + len(users)


def test_an_empty_page_reads_nothing(backend, redis_calls):
    # ZMSCORE with no member is an error, not an empty reply.
    assert users.users_presence(clients.request_client(), get_config(), []) == []
    assert redis_calls.trips == []


def test_the_filter_lists_those_online_now_or_the_others(backend, admin_browser, alice, bob):
    whos_online.record_user(alice)
    whos_online.record_user(bob, now=time.time() - 3600)
    admin_browser.get(CHANGELIST)  # records the boss, after the view

    online = cells(
        admin_browser.get(CHANGELIST, {"online_now": "yes"}).content.decode(), "last_seen"
    )
    offline = cells(
        admin_browser.get(CHANGELIST, {"online_now": "no"}).content.decode(), "last_seen"
    )

    # The boss is online too: their visits to the admin are recorded.
    assert sorted(online) == ["alice", "boss"]
    assert sorted(offline) == ["bob"]


def test_last_seen_says_how_long_ago_with_the_time_in_full_as_its_title(
    backend, admin_browser, alice, bob
):
    """The changelist keeps a datetime cell and every heading on one line: the columns would
    overflow a laptop's screen (tests/test_browser.py measures it on the example site)."""
    an_hour_ago = time.time() - 3600
    whos_online.record_user(alice)
    whos_online.record_user(bob, now=an_hour_ago)

    html = admin_browser.get(CHANGELIST).content.decode()

    assert '<td class="field-last_seen">' in html  # not "field-last_seen nowrap"
    seen = cells(html, "last_seen")
    assert re.fullmatch(r'<time datetime="[^"]+" title="[^"]+">just now</time>', seen["alice"])
    found = re.fullmatch(
        r'<time datetime="([^"]+)" title="([^"]+)">1\xa0hour ago</time>', seen["bob"]
    )
    assert found, seen["bob"]
    assert abs(datetime.fromisoformat(found.group(1)).timestamp() - an_hour_ago) < 1
    assert str(datetime.fromtimestamp(an_hour_ago, tz=timezone.utc).year) in found.group(2)
    assert "whos_online/admin.css" in html


def test_hidden_users_are_online_in_the_admin(backend, settings, admin_browser, alice):
    configure(settings, HIDE_USER=lambda user: user.username == "alice")
    whos_online.record_user(alice)

    html = admin_browser.get(CHANGELIST, {"online_now": "yes"}).content.decode()

    # Staff see hidden users as they are, as {% last_seen %} shows them to staff.
    assert 'alt="True"' in cells(html, "online_now")["alice"]
    assert str(datetime.now(tz=timezone.utc).year) in cells(html, "last_seen")["alice"]


def test_the_page_renders_with_redis_down_and_nobody_online(redis_down, admin_browser, alice):
    response = admin_browser.get(CHANGELIST)
    assert response.status_code == 200
    online = cells(response.content.decode(), "online_now")
    assert set(online) == {"alice", "boss"}
    assert all('alt="False"' in cell for cell in online.values())
    assert (
        cells(admin_browser.get(CHANGELIST, {"online_now": "yes"}).content.decode(), "online_now")
        == {}
    )


def test_the_columns_and_filter_come_after_the_admins_own(rf):
    from django.contrib import admin
    from django.contrib.auth import admin as auth_admin

    class UserAdmin(OnlineUserAdminMixin, auth_admin.UserAdmin):  # type: ignore [type-arg]
        pass

    model_admin = UserAdmin(get_user_model(), admin.AdminSite())
    request = rf.get(CHANGELIST)

    base = auth_admin.UserAdmin(get_user_model(), admin.AdminSite())
    assert model_admin.get_list_display(request) == (
        *base.get_list_display(request),
        "online_now",
        "last_seen",
    )
    filters = model_admin.get_list_filter(request)
    assert filters[:-1] == tuple(base.get_list_filter(request))
    assert filters[-1].__name__ == "OnlineNowFilter"


def test_presence_is_keyed_by_primary_key(backend, alice, bob):
    whos_online.record_user(alice)

    found = api.presence([alice, bob.pk, 987654])

    assert set(found) == {alice.pk, bob.pk, 987654}
    assert found[alice.pk].online is True
    assert found[alice.pk].last_seen is not None
    assert found[bob.pk] == api.Presence(online=False, last_seen=None)
    assert api.presence([]) == {}
