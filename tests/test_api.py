from __future__ import annotations

import logging
import re
import time
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.contrib.auth.signals import user_logged_out

import whos_online
from tests.support.helpers import client_of, configure, log_in_quietly
from whos_online import api
from whos_online.api import OnlineCounts, OnlineUser
from whos_online.backend.clients import admin_client
from whos_online.config.settings import get_config
from whos_online.reading import snapshots
from whos_online.recording import guests
from whos_online.recording.throttle import recent
from whos_online.store import epochs
from whos_online.store.users import MAX_DISPLAY_NAME_LENGTH

if TYPE_CHECKING:
    from django.test import Client

WINDOW = 600


def _recent_second() -> float:
    """A whole second just before now: stored scores (millisecond text) keep it exactly."""
    return float(int(time.time()) - 10)


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc)


def _set(r, name: str) -> list[tuple[str, float]]:
    return [(member.decode(), score) for member, score in r.zrange(name, 0, -1, withscores=True)]


@pytest.fixture
def carol(db) -> User:
    return User.objects.create_user("carol", password="pw")


# record_user() and online_users()


def test_record_user_lists_the_user(backend, alice):
    now = _recent_second()

    assert whos_online.record_user(alice, now=now) is True

    users = whos_online.online_users()
    assert users == [OnlineUser(pk=alice.pk, name="alice", url="", last_seen=_utc(now))]
    assert type(users[0].pk) is int
    assert users[0].last_seen.tzinfo is timezone.utc
    assert str(users[0]) == "alice"


def test_record_user_stores_the_display_hash(backend, r, alice):
    now = _recent_second()
    whos_online.record_user(alice, now=now)

    assert _set(r, "{whos_online}:users") == [(str(alice.pk), now)]
    assert r.hgetall(f"{{whos_online}}:user:{alice.pk}") == {
        b"name": b"alice",
        b"url": b"",
        b"seen": f"{now:.3f}".encode(),
    }


def test_record_user_accepts_an_aware_datetime(backend, alice):
    when = datetime.fromtimestamp(_recent_second(), tz=ZoneInfo("Europe/Paris"))

    whos_online.record_user(alice, now=when)

    (user,) = whos_online.online_users()
    assert user.last_seen == when
    assert user.last_seen.tzinfo is timezone.utc


def test_online_users_are_newest_first(backend, alice, bob, carol):
    now = _recent_second()
    whos_online.record_user(alice, now=now - 30)
    whos_online.record_user(carol, now=now - 20)
    whos_online.record_user(bob, now=now - 10)

    assert [(u.name, u.last_seen) for u in whos_online.online_users()] == [
        ("bob", _utc(now - 10)),
        ("carol", _utc(now - 20)),
        ("alice", _utc(now - 30)),
    ]

    whos_online.record_user(alice, now=now)
    assert [u.name for u in whos_online.online_users()] == ["alice", "bob", "carol"]


@pytest.mark.parametrize(
    ("limit", "names"),
    [(None, ["bob", "carol", "alice"]), (2, ["bob", "carol"]), (1, ["bob"]), (0, [])],
)
@pytest.mark.usefixtures("backend")
def test_online_users_limit(alice, bob, carol, limit, names):
    now = _recent_second()
    whos_online.record_user(alice, now=now - 30)
    whos_online.record_user(carol, now=now - 20)
    whos_online.record_user(bob, now=now - 10)

    assert [u.name for u in whos_online.online_users(limit=limit)] == names


def test_online_users_leaves_out_users_past_the_window(backend, alice, bob):
    whos_online.record_user(alice, now=time.time() - WINDOW - 1)
    whos_online.record_user(bob)

    assert [u.name for u in whos_online.online_users()] == ["bob"]
    assert whos_online.online_counts() == OnlineCounts(users=1, guests=0, bots=0, total=1)


def test_online_users_url_comes_from_get_absolute_url(backend, alice, monkeypatch):
    monkeypatch.setattr(User, "get_absolute_url", lambda self: f"/people/{self.pk}/", raising=False)

    whos_online.record_user(alice)

    assert [u.url for u in whos_online.online_users()] == [f"/people/{alice.pk}/"]


def test_display_name_setting(backend, settings, alice):
    configure(settings, DISPLAY_NAME=lambda user: f"{user.first_name} {user.last_name}")
    alice.first_name, alice.last_name = "Alice", "Liddell"

    whos_online.record_user(alice)

    assert [u.name for u in whos_online.online_users()] == ["Alice Liddell"]


@pytest.mark.parametrize(
    "name",
    [
        '<script>alert("x")</script>',
        "<b>bold</b> & 'quoted' \"twice\"",
        "Zoë 👩\u200d💻 ✨ 名前",
        "مرحبا بالعالم",
        "\u202eevil\u202c name",
        "\u2067\u05e9\u05dc\u05d5\u05dd\u2069 \u202bנ\u202c",  # closed isolates and embeddings
        "e\u0301\u0302\u0303\u0304 Vie\u0323\u0302t",  # four combining marks are kept
        "é" * 150,
        "🦄" * 150,
    ],
)
def test_any_name_round_trips_exactly(backend, r, alice, name):
    """Any text that cannot disturb the page around it is kept as it is."""
    alice.username = name

    whos_online.record_user(alice)

    assert [u.name for u in whos_online.online_users()] == [name]
    assert r.hget(f"{{whos_online}}:user:{alice.pk}", "name") == name.encode()


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        pytest.param("tab\tnew\nline\x00nul\x1b[31m", "tab new linenul[31m", id="controls"),
        pytest.param("evil\u202e name", "evil name", id="override-never-closed"),
        pytest.param("\u2067isolate", "isolate", id="isolate-never-closed"),
        pytest.param("a\u202cb\u2069c", "abc", id="closers-of-nothing"),
        pytest.param("\u202b\u2066x\u202c\u2069", "\u2066x\u2069", id="crossed-pairs"),
        pytest.param("Z" + "\u0336" * 100 + "algo", "Z" + "\u0336" * 4 + "algo", id="100-marks"),
        pytest.param("a\u20dd\u20dd\u20dd\u20dd\u20dd", "a" + "\u20dd" * 4, id="enclosing-marks"),
    ],
)
def test_names_lose_what_would_disturb_the_page(backend, r, alice, name, kept):
    alice.username = name

    whos_online.record_user(alice)

    assert [u.name for u in whos_online.online_users()] == [kept]
    assert r.hget(f"{{whos_online}}:user:{alice.pk}", "name") == kept.encode()


@pytest.mark.parametrize("name", ["x" * 1000, "🦄" * 1000, "ab" * 500])
def test_long_name_is_cut_to_max_name_length(backend, r, alice, name):
    alice.username = name

    whos_online.record_user(alice)

    assert [u.name for u in whos_online.online_users()] == [name[:MAX_DISPLAY_NAME_LENGTH]]
    assert r.hget(f"{{whos_online}}:user:{alice.pk}", "name") == name[:150].encode()


# online_counts()


def test_online_counts(backend, hiding_bob, alice, bob):
    whos_online.record_user(alice)
    whos_online.record_user(bob)
    whos_online.record_guest("192.0.2.1")
    whos_online.record_guest("2001:db8::1")
    whos_online.record_guest("192.0.2.9", bot=True)

    assert whos_online.online_counts() == OnlineCounts(users=2, guests=2, bots=1, total=4)
    assert [u.name for u in whos_online.online_users()] == ["alice"]


def test_online_counts_when_nobody_is_online(backend):
    assert whos_online.online_counts() == OnlineCounts(users=0, guests=0, bots=0, total=0)
    assert whos_online.online_users() == []


def test_hidden_user_moves_between_sets_when_hide_user_changes(backend, settings, r, bob):
    whos_online.record_user(bob)
    assert r.zscore("{whos_online}:users", str(bob.pk)) is not None

    configure(settings, HIDE_USER="tests.support.helpers.hide_bob")
    whos_online.record_user(bob)

    assert r.zscore("{whos_online}:users", str(bob.pk)) is None
    assert r.zscore("{whos_online}:hidden", str(bob.pk)) is not None
    assert whos_online.online_counts() == OnlineCounts(users=1, guests=0, bots=0, total=1)
    assert whos_online.online_users() == []
    assert whos_online.is_online(bob) is True


def _invisible(user: User) -> bool:
    return user.first_name == "invisible"


@pytest.mark.parametrize("becomes_hidden", [True, False])
def test_record_user_applies_a_change_of_what_hide_user_reads_at_once(
    backend, settings, r, bob, becomes_hidden
):
    """What HIDE_USER reads changes with the settings unchanged: bob's throttled pages leave
    him where he was until THROTTLE runs out, and ``record_user`` moves him at once."""
    configure(settings, HIDE_USER=_invisible, THROTTLE=120)
    bob.first_name = "" if becomes_hidden else "invisible"
    bob.save()
    browser = client_of(bob)
    assert browser.get("/plain/").status_code == 200  # recorded; the cookie throttles the next
    before, after = ("users", "hidden") if becomes_hidden else ("hidden", "users")
    assert r.zscore(f"{{whos_online}}:{before}", str(bob.pk)) is not None

    bob.first_name = "invisible" if becomes_hidden else ""
    bob.save()
    browser.get("/plain/")
    assert r.zscore(f"{{whos_online}}:{before}", str(bob.pk)) is not None  # throttled

    assert whos_online.record_user(bob) is True

    assert r.zscore(f"{{whos_online}}:{before}", str(bob.pk)) is None
    assert r.zscore(f"{{whos_online}}:{after}", str(bob.pk)) is not None
    named = [user.name for user in whos_online.online_users()]
    assert named == ([] if becomes_hidden else ["bob"])
    assert whos_online.online_counts().users == 1
    browser.get("/plain/")  # throttled still: it does not undo the move
    assert r.zscore(f"{{whos_online}}:{after}", str(bob.pk)) is not None


# is_online() and last_seen()


def test_is_online_within_the_window(backend, alice):
    whos_online.record_user(alice, now=time.time() - WINDOW + 60)

    assert whos_online.is_online(alice) is True


def test_is_online_false_after_the_window_but_last_seen_survives(backend, alice):
    when = float(int(time.time()) - WINDOW - 1)
    whos_online.record_user(alice, now=when)

    assert whos_online.is_online(alice) is False
    assert whos_online.last_seen(alice) == _utc(when)


def test_is_online_follows_the_window_setting(backend, settings, alice):
    configure(settings, WINDOW=60, THROTTLE=0)

    whos_online.record_user(alice, now=time.time() - 61)
    assert whos_online.is_online(alice) is False

    whos_online.record_user(alice, now=time.time() - 30)
    assert whos_online.is_online(alice) is True


def test_hidden_user_is_online(backend, hiding_bob, bob):
    whos_online.record_user(bob)

    assert whos_online.is_online(bob) is True
    assert whos_online.last_seen(bob) is not None


def test_last_seen_is_an_aware_utc_datetime(backend, alice):
    now = _recent_second()
    whos_online.record_user(alice, now=now)

    seen = whos_online.last_seen(alice)

    assert seen == _utc(now)
    assert seen is not None
    assert seen.tzinfo is timezone.utc


def test_logout_takes_user_off_the_list_and_last_seen_survives(backend, r, alice):
    now = _recent_second()
    whos_online.record_user(alice, now=now)

    user_logged_out.send(sender=User, request=None, user=alice)

    assert whos_online.is_online(alice) is False
    assert whos_online.online_users() == []
    assert whos_online.online_counts() == OnlineCounts(0, 0, 0, 0)
    assert whos_online.last_seen(alice) == _utc(now)
    assert r.zcard("{whos_online}:users") == 0


def test_never_seen_user(backend, alice):
    assert whos_online.is_online(alice) is False
    assert whos_online.last_seen(alice) is None


def test_anonymous_user(backend, r):
    anonymous = AnonymousUser()

    assert whos_online.is_online(anonymous) is False
    assert whos_online.last_seen(anonymous) is None
    with pytest.raises(ValueError, match=r"record_user\(\) needs an authenticated user"):
        whos_online.record_user(anonymous)
    assert r.keys("*") == []


# record_guest()


@pytest.mark.parametrize(
    ("ip", "stored"),
    [
        ("192.0.2.1", "192.0.2.1"),
        (" 192.0.2.1 ", "192.0.2.1"),
        ("192.0.2.1:8080", "192.0.2.1"),
        ("2001:DB8:0:0::1", "2001:db8::1"),
        ("[2001:db8::2]:443", "2001:db8::2"),
        ("fe80::1%eth0", "fe80::1"),
        ("::ffff:192.0.2.1", "192.0.2.1"),
    ],
)
def test_record_guest_by_ip(backend, settings, r, ip, stored):
    # The whole address, to see how it was read (networks: test_identity.test_guest_network).
    configure(settings, GUEST_IDENTITY="ip", GUEST_IPV6_PREFIX=128)
    now = _recent_second()

    assert whos_online.record_guest(ip, now=now) is True

    assert _set(r, "{whos_online}:guests") == [(stored, now)]
    assert r.exists("{whos_online}:bots") == 0
    assert whos_online.online_counts() == OnlineCounts(users=0, guests=1, bots=0, total=1)


def test_record_guest_stores_a_pseudonym_not_the_ip(backend, r):
    now = _recent_second()

    whos_online.record_guest("192.0.2.1", now=now)
    whos_online.record_guest("::ffff:192.0.2.1", now=now)
    whos_online.record_guest("2001:db8::1", now=now)

    config = get_config()
    assert sorted(_set(r, "{whos_online}:guests")) == sorted(
        [
            (guests.guest_id("192.0.2.1", config, now), now),
            (guests.guest_id("2001:db8::1", config, now), now),
        ]
    )
    stored = b"".join(r.zrange("{whos_online}:guests", 0, -1))
    assert b"192.0.2.1" not in stored
    assert b"2001:db8" not in stored


def test_the_package_exports_exactly_the_api():
    """``whos_online`` lists the names lazily, without importing the API (and Django) itself."""
    assert whos_online.__all__ == api.__all__
    assert all(getattr(whos_online, name) is getattr(api, name) for name in api.__all__)


def test_a_redis_that_lost_its_scripts_still_records(backend, r, alice, redis_calls):
    """After a restart or SCRIPT FLUSH the server knows no script: the visit is sent with EVAL,
    which also loads the script, and the next one is an EVALSHA again."""
    assert whos_online.record_guest("192.0.2.1") is True
    r.script_flush()
    redis_calls.clear()

    assert whos_online.record_guest("192.0.2.2") is True
    assert whos_online.record_user(alice) is True

    assert [trip[0] for trip in redis_calls.trips] == ["EVALSHA", "EVAL", "EVALSHA"]
    assert whos_online.online_counts() == OnlineCounts(users=1, guests=2, bots=0, total=3)


def test_record_guest_as_bot(backend, r):
    now = _recent_second()

    assert whos_online.record_guest("2001:db8::7", bot=True, now=now) is True

    assert r.exists("{whos_online}:guests") == 0
    assert _set(r, "{whos_online}:bots") == [
        (guests.guest_id("2001:db8::7", get_config(), now), now)
    ]
    assert whos_online.online_counts() == OnlineCounts(users=0, guests=0, bots=1, total=0)


@pytest.mark.parametrize(
    "ip",
    [
        "",
        "   ",
        "not-an-ip",
        "999.1.1.1",
        "192.0.2",
        "2001:db8::g",
        "1" * 100,
        "192.0.2.1, 10.0.0.1",
    ],
)
def test_record_guest_rejects_an_invalid_ip(ip):
    with pytest.raises(ValueError, match="record_guest\\(\\) needs an IPv4 or IPv6 address"):
        whos_online.record_guest(ip)
    assert admin_client().keys("*") == []


# forget_user()


AGGREGATE_KEY = re.compile(
    r"\{whos_online\}:(peak|counters|counter:\d+:online:\w+|visitors:[\d-]+|epoch)"
)


@pytest.mark.parametrize("hidden", [False, True])
def test_forget_user_erases_everything(backend, settings, r, alice, hidden):
    if hidden:
        configure(settings, HIDE_USER=lambda user: True)
    whos_online.record_user(alice)
    assert r.exists(f"{{whos_online}}:user:{alice.pk}") == 1

    assert whos_online.forget_user(alice) is True

    # What stays are aggregates: counts per time slice, the peak, and the day's visitor estimate,
    # which holds keyed hashes that cannot be read back; the shard's epoch, a random word; and
    # for a day, the time of the erasure, so that a visit on its way writes nothing back.
    gone = f"{{whos_online}}:gone:{alice.pk}"
    left = sorted(key.decode() for key in r.keys("*") if key.decode() != gone)
    assert all(AGGREGATE_KEY.fullmatch(key) for key in left), left
    assert 0 < r.ttl(gone) <= 86400
    assert whos_online.last_seen(alice) is None
    assert whos_online.is_online(alice) is False
    assert whos_online.online_counts() == OnlineCounts(0, 0, 0, 0)


@pytest.mark.parametrize("as_text", [False, True])
def test_forget_user_by_bare_pk(backend, r, alice, bob, as_text):
    whos_online.record_user(alice)
    whos_online.record_user(bob)

    assert whos_online.forget_user(str(alice.pk) if as_text else alice.pk) is True

    assert r.exists(f"{{whos_online}}:user:{alice.pk}") == 0
    assert r.zscore("{whos_online}:users", str(alice.pk)) is None
    assert whos_online.last_seen(alice) is None
    assert [u.name for u in whos_online.online_users()] == ["bob"]
    assert r.exists(f"{{whos_online}}:user:{bob.pk}") == 1


def test_forget_user_never_seen(backend, r, alice):
    assert whos_online.forget_user(alice) is True
    assert r.keys("*") == [f"{{whos_online}}:gone:{alice.pk}".encode()]


def test_forget_user_drops_the_in_process_memory(backend, settings, alice):
    configure(settings, THROTTLE=120)
    now = time.time()
    whos_online.record_user(alice, now=now)
    assert recent().seen_recently(f"u:{alice.pk}", now, epochs.generation()) is True

    whos_online.forget_user(alice)

    assert recent().seen_recently(f"u:{alice.pk}", now, epochs.generation()) is False


# prune()


@pytest.mark.usefixtures("hiding_bob")
def test_prune_removes_exactly_the_stale_members(r, alice, bob, carol):
    now = _recent_second()
    stale = now - WINDOW - 1
    whos_online.record_user(alice, now=stale)
    whos_online.record_user(bob, now=stale)  # hidden
    whos_online.record_user(carol, now=now)
    for ip in ("192.0.2.1", "192.0.2.2"):
        whos_online.record_guest(ip, now=stale)
    whos_online.record_guest("192.0.2.3", now=now)
    whos_online.record_guest("198.51.100.1", bot=True, now=stale)
    whos_online.record_guest("198.51.100.2", bot=True, now=now)

    assert whos_online.prune(now=now) == 5

    config = get_config()
    assert _set(r, "{whos_online}:users") == [(str(carol.pk), now)]
    assert r.exists("{whos_online}:hidden") == 0
    assert _set(r, "{whos_online}:guests") == [(guests.guest_id("192.0.2.3", config, now), now)]
    assert _set(r, "{whos_online}:bots") == [(guests.guest_id("198.51.100.2", config, now), now)]
    # Pruning ends the visit, not the memory of it.
    assert whos_online.last_seen(alice) == _utc(stale)
    assert whos_online.last_seen(bob) == _utc(stale)
    assert whos_online.prune(now=now) == 0


def test_prune_accepts_an_aware_datetime(backend, alice):
    now = _recent_second()
    whos_online.record_user(alice, now=now - WINDOW - 1)

    assert whos_online.prune(now=_utc(now)) == 1
    assert whos_online.prune(now=_utc(now)) == 0


def test_prune_boundary_agrees_with_online_counts(backend, monkeypatch, alice, bob):
    now = _recent_second()
    # Seen exactly WINDOW seconds ago: still online, so the cleanup keeps it.
    whos_online.record_user(alice, now=now - WINDOW)
    whos_online.record_guest("192.0.2.1", now=now - WINDOW)
    # A millisecond earlier (the stored precision): gone.
    whos_online.record_user(bob, now=now - WINDOW - 0.001)
    whos_online.record_guest("192.0.2.2", now=now - WINDOW - 0.001)
    monkeypatch.setattr(api, "time", SimpleNamespace(time=lambda: now))
    monkeypatch.setattr(
        snapshots, "time", SimpleNamespace(time=lambda: now, monotonic=time.monotonic)
    )

    counted = whos_online.online_counts()
    assert counted == OnlineCounts(users=1, guests=1, bots=0, total=2)
    assert whos_online.is_online(alice) is True
    assert whos_online.is_online(bob) is False

    assert whos_online.prune(now=now) == 2

    assert whos_online.online_counts() == counted
    assert [u.name for u in whos_online.online_users()] == ["alice"]


def test_prune_writes_what_the_process_queued_first(backend, settings, alice, offline_ids):
    """Alice was seen long ago, and has just opened a page, whose visit the process queued:
    the prune finds her online, and says nothing of her going."""
    configure(settings, FLUSH_INTERVAL=10)  # the thread would wait 10 s
    now = _recent_second()
    whos_online.record_user(alice, now=now - WINDOW - 100)  # written at once
    browser = client_of()
    log_in_quietly(browser, alice)
    browser.get("/plain/")  # queued

    assert whos_online.prune(now=now + 1) == 0

    assert offline_ids == []
    assert whos_online.is_online(alice) is True


def test_prune_nothing(backend, alice):
    whos_online.record_user(alice)

    assert whos_online.prune() == 0
    assert whos_online.is_online(alice) is True


def test_prune_drops_the_in_process_memory(backend, settings):
    configure(settings, THROTTLE=120)
    stale = _recent_second() - WINDOW - 1
    whos_online.record_guest("192.0.2.1", now=stale)
    member = guests.guest_id("192.0.2.1", get_config(), stale)
    assert recent().seen_recently(f"guests:{member}", stale, epochs.generation()) is True

    whos_online.prune()

    assert recent().seen_recently(f"guests:{member}", stale, epochs.generation()) is False


# Last-seen lifetime and keys


@pytest.mark.parametrize(("days", "seconds"), [(None, 90 * 86400), (2, 2 * 86400)])
def test_last_seen_hash_lives_last_seen_days_after_the_day_of_the_last_visit(
    settings, r, alice, days, seconds
):
    if days is not None:
        configure(settings, LAST_SEEN_DAYS=days)
    key = f"{{whos_online}}:user:{alice.pk}"
    day = 86400
    # Late in a UTC day: the HASH lives to the end of that day, then LAST_SEEN_DAYS more.
    late = (time.time() // day) * day + day - 60

    whos_online.record_user(alice, now=late - 3600)
    expires = time.time() + r.ttl(key)
    assert abs(expires - ((late // day + 1) * day + seconds)) <= 2

    # A later visit of the same day leaves the expiry alone; the next day's moves it a day on.
    r.expire(key, 1000)
    whos_online.record_user(alice, now=late)
    assert r.ttl(key) == 1000
    whos_online.record_user(alice, now=late + 120)
    expires = time.time() + r.ttl(key)
    assert abs(expires - ((late // day + 2) * day + seconds)) <= 2

    # A HASH that Redis evicted is made anew with its expiry, whatever the day.
    r.delete(key)
    whos_online.record_user(alice, now=late + 180)
    assert r.ttl(key) > 0


def _write_everything(client: Client, alice: User) -> User:
    """Use every writing path: the API, the middleware, a login and a prune."""
    bob = User.objects.create_user("bob")
    now = _recent_second()
    whos_online.record_user(alice, now=now)
    whos_online.record_user(bob, now=now - WINDOW - 1)
    whos_online.record_guest("192.0.2.1", now=now)
    whos_online.record_guest("192.0.2.2", bot=True, now=now)
    client.get("/plain/", REMOTE_ADDR="198.51.100.1")
    client.force_login(alice)
    client.get("/")
    whos_online.prune(now=now)
    return bob


@pytest.mark.parametrize("prefix", [None, "site1"])
def test_every_key_sits_under_the_prefix(settings, r, client, alice, prefix):
    if prefix is not None:
        configure(settings, KEY_PREFIX=prefix)
    tag = f"{{{prefix or 'whos_online'}}}:"

    bob = _write_everything(client, alice)

    keys = sorted(key.decode() for key in r.keys("*"))
    assert [key for key in keys if not key.startswith(tag)] == []
    assert set(keys) >= {
        f"{tag}users",
        f"{tag}guests",
        f"{tag}bots",
        f"{tag}user:{alice.pk}",
        f"{tag}user:{bob.pk}",
    }


# Failing open


def test_api_fails_open_while_redis_is_down(redis_down, caplog, alice):
    caplog.set_level(logging.INFO, logger="whos_online")

    assert whos_online.online_users() == []
    assert whos_online.online_users(limit=5) == []
    assert whos_online.online_counts() == (0, 0, 0, 0)
    assert whos_online.is_online(alice) is False
    assert whos_online.last_seen(alice) is None
    assert whos_online.record_user(alice) is False
    assert whos_online.record_guest("192.0.2.1") is False
    assert whos_online.record_guest("192.0.2.1", bot=True) is False
    assert whos_online.prune() == 0
    assert whos_online.forget_user(alice) is False
    assert whos_online.forget_user(alice.pk) is False

    # One warning for the outage, not one per call.
    assert [(record.levelname, record.name) for record in caplog.records] == [
        ("WARNING", "whos_online")
    ]
    assert redis_down in caplog.records[0].getMessage()


def test_failed_write_is_not_remembered_as_recorded(redis_down, settings, alice):
    configure(settings, THROTTLE=120)
    now = time.time()

    assert whos_online.record_user(alice, now=now) is False

    assert recent().seen_recently(f"u:{alice.pk}", now, epochs.generation()) is False


def test_shows_names_to_applies_show_names_to(settings, alice, staff):
    """For an endpoint of the site's own API, which authenticated its caller itself."""
    assert whos_online.shows_names_to(staff)
    assert not whos_online.shows_names_to(alice)
    assert not whos_online.shows_names_to(AnonymousUser())

    configure(settings, SHOW_NAMES_TO="authenticated")
    assert whos_online.shows_names_to(alice)
    assert not whos_online.shows_names_to(AnonymousUser())

    configure(settings, SHOW_NAMES_TO="everyone")
    assert whos_online.shows_names_to(AnonymousUser())
