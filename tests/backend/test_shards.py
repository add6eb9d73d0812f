"""SHARDS: the people online split over several hash tags, on one Redis (fakeredis and real).

The same behaviour on a real Redis Cluster is in tests/backend/test_cluster.py.
"""

from __future__ import annotations

import time
from collections import Counter
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.core.management import call_command
from redis.crc import REDIS_CLUSTER_HASH_SLOTS

import whos_online
from tests.support.helpers import configure, guest, render, text, widget_text
from whos_online.backend import keyspace
from whos_online.config.settings import get_config
from whos_online.store import snapshot

NOW = 1_900_000_000.0
SHARDS = 4


@pytest.fixture
def sharded(settings, backend) -> None:
    configure(settings, SHARDS=SHARDS)


def make_users(count: int) -> list[AbstractUser]:
    model = get_user_model()
    users = [model.objects.create_user(f"user{number:02d}") for number in range(count)]
    assert all(isinstance(user, AbstractUser) for user in users)
    return users  # type: ignore [return-value]


def tags_holding(r, kind: str) -> set[str]:
    """The hash tags of the non-empty sets of ``kind``."""
    return {text(key).split("}")[0][1:] for key in r.scan_iter(match=f"*:{kind}")}


# The layout


def test_one_shard_keeps_the_base_tag():
    assert keyspace.shard_tags("whos_online", 1) == ("whos_online",)


@pytest.mark.parametrize("count", [2, 3, 4, 6, 12, 128])
def test_shard_zero_shares_the_base_slot_and_every_tag_is_its_own(count):
    tags = keyspace.shard_tags("whos_online", count)
    assert len(set(tags)) == count
    assert len({keyspace.slot(tag) for tag in tags}) == count
    assert keyspace.slot(tags[0]) == keyspace.slot("whos_online")
    assert all(tag.startswith(f"whos_online:{index}/{count}") for index, tag in enumerate(tags))


@pytest.mark.parametrize(("count", "masters"), [(3, 3), (6, 3), (12, 3), (8, 4), (16, 8)])
def test_shards_spread_over_masters_that_own_equal_ranges(count, masters):
    """As ``redis-cli --cluster create`` assigns slots: each master gets count/masters ± 1."""
    width = REDIS_CLUSTER_HASH_SLOTS / masters
    owners = Counter(
        int(keyspace.slot(tag) // width) for tag in keyspace.shard_tags("whos_online", count)
    )
    assert len(owners) == masters
    assert all(abs(held - count / masters) <= 1 for held in owners.values()), owners


def test_a_person_keeps_their_shard_and_people_spread_evenly(settings):
    configure(settings, SHARDS=SHARDS)
    config = get_config()
    people = [f"u:{pk}" for pk in range(2000)]
    first = [keyspace.shard_of(config, person).index for person in people]
    configure(settings, SHARDS=SHARDS, WINDOW=300)  # a new Config, the same layout
    assert [keyspace.shard_of(get_config(), person).index for person in people] == first
    assert all(400 <= held <= 600 for held in Counter(first).values()), Counter(first)


# Recording and reading


def test_people_are_spread_and_counted_exactly(sharded, r, db):
    users = make_users(12)
    for number, user in enumerate(users):
        whos_online.record_user(user, now=NOW + number)
    for number in range(20):
        whos_online.record_guest(f"198.51.100.{number}", now=NOW)
    whos_online.record_guest("198.51.100.200", bot=True, now=NOW)

    assert len(tags_holding(r, "users")) > 1
    assert len(tags_holding(r, "guests")) > 1
    assert not r.exists("{whos_online}:users", "{whos_online}:guests")
    assert whos_online.online_counts() == (12, 20, 1, 32)


def test_the_newest_names_come_from_every_shard(sharded, r, db):
    users = make_users(12)
    for number, user in enumerate(users):
        whos_online.record_user(user, now=time.time() - 100 + number)
    listed = whos_online.online_users(limit=5)
    assert [user.name for user in listed] == [f"user{n:02d}" for n in (11, 10, 9, 8, 7)]
    everyone = whos_online.online_users()
    assert [user.pk for user in everyone] == [user.pk for user in reversed(users)]
    assert len({keyspace.user_shard(get_config(), str(user.pk)) for user in users}) > 1


def test_a_recorded_visit_is_one_round_trip_to_its_shard(sharded, redis_calls, db):
    user = make_users(1)[0]
    redis_calls.clear()
    whos_online.record_user(user)
    whos_online.record_guest("198.51.100.7")
    assert redis_calls.trips == [["EVALSHA"], ["EVALSHA"]]


def test_a_render_reads_every_shard_in_one_round_trip(sharded, redis_calls, db):
    for number, user in enumerate(make_users(3)):
        whos_online.record_user(user, now=time.time() - number)
    whos_online.record_guest("198.51.100.7")
    render("{% load whos_online %}{% whos_online %}")  # loads the script
    redis_calls.clear()

    markup = render("{% load whos_online %}{% whos_online %}")

    assert redis_calls.trips == [["EVALSHA"] * SHARDS]
    assert widget_text(markup) == "Who's online: user00, user01, user02 and 1 guest"


def test_the_day_s_visitors_add_up_over_the_shards(sharded, r, db, mid_utc_day):
    for number in range(40):
        whos_online.record_guest(f"198.51.100.{number}")
    assert len({text(key) for key in r.scan_iter(match="*:visitors:*")}) > 1
    assert whos_online.unique_visitors() == 40


def test_a_login_moves_the_guest_out_of_their_own_shard(sharded, r, client, alice):
    client.get("/plain/")
    member = guest("203.0.113.7")
    assert whos_online.online_counts().guests == 1

    client.get(f"/login/{alice.username}/")

    assert whos_online.online_counts() == (1, 0, 0, 1)
    assert not any(r.zscore(key, member) for key in r.scan_iter(match="*:guests"))


def test_forget_user_erases_the_user_in_their_shard(sharded, r, alice):
    whos_online.record_user(alice)
    assert any(r.exists(key) for key in r.scan_iter(match=f"*:user:{alice.pk}"))
    assert whos_online.forget_user(alice) is True
    assert list(r.scan_iter(match=f"*:user:{alice.pk}")) == []
    assert whos_online.last_seen(alice) is None


def test_prune_empties_every_shard(sharded, r, offline_ids, db):
    users = make_users(8)
    for user in users:
        whos_online.record_user(user, now=NOW)
    for number in range(10):
        whos_online.record_guest(f"198.51.100.{number}", now=NOW)

    assert whos_online.prune(now=NOW + 601) == 18

    assert list(r.scan_iter(match="*:users")) == []
    assert list(r.scan_iter(match="*:guests")) == []
    assert sorted(pk for ids in offline_ids for pk in ids) == sorted(u.pk for u in users)


# Site-wide numbers


def cleanup(*args: str) -> str:
    out = StringIO()
    call_command("whos_online_cleanup", *args, stdout=out, verbosity=2)
    return out.getvalue()


def test_visits_leave_the_peak_and_counters_to_the_cleanup(sharded, r, db):
    for user in make_users(3):
        whos_online.record_user(user)
    whos_online.record_guest("198.51.100.7")
    assert whos_online.peak() == (0, None)
    assert whos_online.get_counter("online:users", 60) == []

    output = cleanup()

    assert "Sampled 3 users, 1 guest and 0 bots online over 4 shards." in output
    assert whos_online.peak().people == 4
    assert [count for _, count in whos_online.get_counter("online:users", 60)] == [3]
    assert [count for _, count in whos_online.get_counter("online:guests", 1)] == [1]


def test_changing_shards_counts_nobody_twice_and_cleanup_removes_the_old_layout(
    settings, backend, r, alice, bob
):
    now = time.time()
    whos_online.record_user(alice, now=now - 700)  # stale by the next cleanup
    whos_online.record_user(bob, now=now)
    assert whos_online.online_counts().users == 1

    configure(settings, SHARDS=SHARDS)
    assert whos_online.online_counts().users == 0  # until their throttle cookie runs out
    whos_online.record_user(bob, now=now)
    assert whos_online.online_counts().users == 1

    output = cleanup()
    assert "Removed from layouts of another SHARDS 1 user" in output
    assert r.zrange("{whos_online}:users", 0, -1) == [str(bob.pk).encode()]
    assert {text(each) for each in r.smembers("{whos_online}:layouts")} == {"1", "4"}

    r.zadd("{whos_online}:users", {str(bob.pk): now - 700})  # bob goes stale in the old layout
    cleanup()
    assert not r.exists("{whos_online}:users")
    assert {text(each) for each in r.smembers("{whos_online}:layouts")} == {"4"}

    configure(settings, SHARDS=1)  # and back, once the four shards have emptied
    for key in r.scan_iter(match="*/4*:users"):
        r.zadd(key, {str(bob.pk): now - 700})
    cleanup()
    assert not r.exists("{whos_online}:layouts")
    assert list(r.scan_iter(match="*/4*:users")) == []


def test_rooms_of_an_old_layout_are_emptied_before_it_is_forgotten(settings, backend, r, alice):
    now = time.time()
    whos_online.record_user(alice, now=now - 700, room="topic:1")  # stale by the cleanup
    configure(settings, SHARDS=SHARDS)
    whos_online.record_user(alice, now=now, room="topic:1")
    assert whos_online.online_counts(room="topic:1").users == 1

    cleanup()

    assert list(r.scan_iter(match="{whos_online}:room*")) == []  # the old layout's rooms
    assert {text(each) for each in r.smembers("{whos_online}:layouts")} == {"4"}
    assert whos_online.online_counts(room="topic:1").users == 1


def test_forget_user_reaches_the_layouts_the_cleanup_has_seen(settings, backend, r, alice):
    whos_online.record_user(alice)
    configure(settings, SHARDS=SHARDS)
    cleanup()  # registers both layouts
    whos_online.record_user(alice)
    assert len(list(r.scan_iter(match=f"*:user:{alice.pk}"))) == 2

    whos_online.forget_user(alice)

    assert list(r.scan_iter(match=f"*:user:{alice.pk}")) == []


def test_the_newest_names_all_in_one_shard_are_read_in_full(sharded, redis_calls, db):
    """Each shard is asked for about twice its share of the names; a shard that may hold more of
    the newest is asked again, so the list is the newest of all whatever the spread."""
    config = get_config()
    users = make_users(80)
    shard_of = {user.pk: keyspace.user_shard(config, str(user.pk)) for user in users}
    crowded = Counter(shard_of.values()).most_common(1)[0][0]
    in_crowded = [user for user in users if shard_of[user.pk] == crowded]
    elsewhere = [user for user in users if shard_of[user.pk] != crowded][:6]
    assert len(in_crowded) >= 8
    now = time.time()
    for number, user in enumerate(elsewhere):
        whos_online.record_user(user, now=now - 300 + number)  # older
    for number, user in enumerate(in_crowded):
        whos_online.record_user(user, now=now - 100 + number)  # the newest, in one shard
    assert snapshot.shard_limit(8, SHARDS) == 6
    redis_calls.clear()

    listed = whos_online.online_users(limit=8)

    assert [user.pk for user in listed] == [user.pk for user in reversed(in_crowded)][:8]
    assert redis_calls.trips == [["EVALSHA"] * SHARDS, ["EVALSHA"]]


def test_names_spread_over_the_shards_take_one_round_trip(sharded, redis_calls, db):
    now = time.time()
    for number, user in enumerate(make_users(40)):
        whos_online.record_user(user, now=now - 100 + number)
    redis_calls.clear()
    assert len(whos_online.online_users(limit=8)) == 8
    assert redis_calls.trips == [["EVALSHA"] * SHARDS]
