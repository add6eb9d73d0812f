"""The counters API: ``update_counter``, ``get_counter``, ``clean_counters`` and ``counters``."""

from __future__ import annotations

import math
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import whos_online
from tests.support.helpers import configure, single_redis
from tests.support.redis_server import free_port
from whos_online.backend.clients import admin_client
from whos_online.config.settings import get_config
from whos_online.store import counters

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis

    from tests.support.helpers import RedisCalls

#: A Unix time that starts a slice at every default precision (a multiple of 432000 s).
T0 = 1_799_712_000
PRECISIONS = (1, 5, 60, 300, 3600, 18000, 86400)
KNOWN = "{whos_online}:counters"
#: For tests of argument checks, which raise before any Redis call: one backend is enough.
FAKE_ONLY = pytest.mark.parametrize("backend", ["fake"], indirect=True)
DELETE_CHUNK_SIZE = counters.DELETE_CHUNK_SIZE
CLEAN_PAGE_SIZE = counters.CLEAN_PAGE_SIZE


def counter_key(name: str, precision: int, prefix: str = "whos_online") -> str:
    return f"{{{prefix}}}:counter:{precision}:{name}"


def stored(r, name: str, precision: int) -> dict[int, int]:
    raw = r.hgetall(counter_key(name, precision))
    return {int(start): int(count) for start, count in raw.items()}


def known(r, key: str = KNOWN) -> list[tuple[str, float]]:
    return [(member.decode(), score) for member, score in r.zrange(key, 0, -1, withscores=True)]


def known_members(r: redis.Redis) -> set[str]:
    return {member for member, _ in known(r)}


def all_keys(r: redis.Redis) -> set[str]:
    """The whole keyspace, walked with SCAN as an operator would."""
    return {key.decode() for key in r.scan_iter(match="*", count=1000)}


def assert_invariant(r: redis.Redis) -> set[str]:
    """Every counter HASH that exists is named in the known set, and every name has its HASH.

    Returns the members, for exact comparisons by the caller.
    """
    prefix = "{whos_online}:counter:"
    keys = all_keys(r)
    hashes = {key.removeprefix(prefix) for key in keys if key.startswith(prefix)}
    assert keys - {prefix + member for member in hashes} <= {KNOWN}
    assert hashes == known_members(r)
    assert {score for _, score in known(r)} <= {0.0}
    return hashes


def dump(r: redis.Redis) -> dict[str, object]:
    content: dict[str, object] = {}
    for name in sorted(all_keys(r)):
        if r.type(name) == b"hash":
            content[name] = r.hgetall(name)
        else:
            content[name] = r.zrange(name, 0, -1, withscores=True)
    return content


# --- update_counter: layout and cost --------------------------------------------------------------


def test_one_update_writes_every_precision_in_one_round_trip(r, redis_calls: RedisCalls):
    now = T0 + 3 * 3600 + 7 * 60 + 13.25  # 03:07:13.25 on a day that starts at T0

    assert whos_online.update_counter("signups", 3, now=now) is True

    assert redis_calls.trips == [["EVALSHA"]]
    assert {p: stored(r, "signups", p) for p in PRECISIONS} == {
        1: {T0 + 11233: 3},
        5: {T0 + 11230: 3},
        60: {T0 + 11220: 3},
        300: {T0 + 11100: 3},
        3600: {T0 + 10800: 3},
        18000: {T0: 3},
        86400: {T0: 3},
    }
    # Scores are all 0 so the set sorts by member and can be walked by name.
    assert known(r) == [
        ("18000:signups", 0.0),  # "8" sorts before ":"
        ("1:signups", 0.0),
        ("300:signups", 0.0),
        ("3600:signups", 0.0),
        ("5:signups", 0.0),
        ("60:signups", 0.0),
        ("86400:signups", 0.0),
    ]
    assert all_keys(r) == {KNOWN} | {counter_key("signups", p) for p in PRECISIONS}
    for key in all_keys(r):
        assert key.startswith("{whos_online}:")
        assert r.type(key) == (b"zset" if key == KNOWN else b"hash")


def test_updates_of_one_slice_add_up_and_each_costs_one_round_trip(r, redis_calls):
    for count in (1, 2, 4):
        assert whos_online.update_counter("c", count, now=T0 + 0.5)

    assert redis_calls.trips == [["EVALSHA"]] * 3
    assert {p: stored(r, "c", p) for p in PRECISIONS} == {p: {T0: 7} for p in PRECISIONS}
    assert len(known(r)) == len(PRECISIONS)


def test_default_count_is_one_and_now_defaults_to_the_clock(r):
    before = int(time.time())
    assert whos_online.update_counter("visits") is True
    after = int(time.time())

    ((second, count),) = whos_online.get_counter("visits", 1)
    assert before <= second <= after
    assert count == 1
    assert whos_online.get_counter("visits", 86400) == [(second // 86400 * 86400, 1)]


def test_custom_key_prefix(settings, r):
    configure(settings, KEY_PREFIX="site-2", COUNTER_PRECISIONS=[1, 60], COUNTER_SAMPLES=3)

    assert whos_online.update_counter("c", 2, now=T0 - 1000)
    assert whos_online.update_counter("c", 5, now=T0 + 61)

    assert all_keys(r) == {
        "{site-2}:counters",
        "{site-2}:counter:1:c",
        "{site-2}:counter:60:c",
    }
    assert r.hgetall("{site-2}:counter:60:c") == {
        str(T0 - 1020).encode(): b"2",
        str(T0 + 60).encode(): b"5",
    }
    assert known(r, "{site-2}:counters") == [("1:c", 0.0), ("60:c", 0.0)]
    assert whos_online.get_counter("c", 60) == [(T0 - 1020, 2), (T0 + 60, 5)]

    assert whos_online.clean_counters(now=T0 + 61) == 2
    assert r.hgetall("{site-2}:counter:1:c") == {str(T0 + 61).encode(): b"5"}
    assert r.hgetall("{site-2}:counter:60:c") == {str(T0 + 60).encode(): b"5"}
    assert known(r, "{site-2}:counters") == [("1:c", 0.0), ("60:c", 0.0)]


def test_update_accepts_an_aware_datetime(r):
    when = datetime.fromtimestamp(T0 + 61.9, tz=timezone.utc)

    assert whos_online.update_counter("c", now=when) is True

    assert whos_online.get_counter("c", 1) == [(T0 + 61, 1)]
    assert whos_online.get_counter("c", 60) == [(T0 + 60, 1)]


def test_zero_count_writes_nothing(r, redis_calls):
    # A plain HINCRBY 0 would store a 0 sample; adding nothing is not worth a round trip.
    assert whos_online.update_counter("c", 0, now=T0) is True

    assert redis_calls.trips == []
    assert all_keys(r) == set()


# --- get_counter ----------------------------------------------------------------------------------


def test_get_counter_returns_ints_oldest_first(r, redis_calls):
    for offset, count in ((7, 1), (-5, 2), (0, 3), (2, 4)):
        whos_online.update_counter("c", count, now=T0 + offset)
    redis_calls.clear()

    samples = whos_online.get_counter("c", 1)

    assert samples == [(T0 - 5, 2), (T0, 3), (T0 + 2, 4), (T0 + 7, 1)]
    assert all(type(start) is int and type(count) is int for start, count in samples)
    assert redis_calls.trips == [["HGETALL"]]
    assert whos_online.get_counter("c", 5) == [(T0 - 5, 2), (T0, 7), (T0 + 5, 1)]
    assert whos_online.get_counter("c", 60) == [(T0 - 60, 2), (T0, 8)]


def test_get_counter_of_an_unknown_counter_is_empty(r):
    whos_online.update_counter("c", now=T0)

    assert whos_online.get_counter("nobody", 1) == []
    assert whos_online.get_counter("C", 60) == []


@FAKE_ONLY
@pytest.mark.parametrize("precision", [0, 2, 10, 120, -1, 86401])
def test_get_counter_rejects_a_precision_not_configured(r, redis_calls, precision):
    with pytest.raises(ValueError, match=r"COUNTER_PRECISIONS \[1, 5, 60, 300, 3600"):
        whos_online.get_counter("c", precision)
    assert redis_calls.trips == []


def test_get_counter_follows_the_configured_precisions(settings, r):
    configure(settings, COUNTER_PRECISIONS=[60, 3600])
    whos_online.update_counter("c", now=T0 + 61)

    assert whos_online.get_counter("c", 60) == [(T0 + 60, 1)]
    assert whos_online.get_counter("c", 3600) == [(T0, 1)]
    for precision in (1, 5, 86400):
        with pytest.raises(ValueError, match=r"must be one of COUNTER_PRECISIONS \[60, 3600\]"):
            whos_online.get_counter("c", precision)


@pytest.mark.parametrize("precision", [60.0, True])
def test_get_counter_rejects_a_precision_that_is_not_an_int(r, precision):
    # 60.0 == 60 and True == 1: without the check they would read a key that never exists.
    whos_online.update_counter("c", 4, now=T0)

    with pytest.raises(TypeError, match="whole number of seconds"):
        whos_online.get_counter("c", precision)


@pytest.mark.parametrize(
    "name",
    ["a:b", "60:c", ":", "1:", "ünïcödé ☃", "emoji 🎉 name", "tab\tand\nnewline", "x" * 200],
)
def test_names_with_colons_and_unicode(r, name):
    assert whos_online.update_counter(name, 2, now=T0 - 1000) is True
    assert whos_online.update_counter("other", 1, now=T0 - 1000) is True

    assert whos_online.get_counter(name, 1) == [(T0 - 1000, 2)]
    assert whos_online.get_counter(name, 60) == [(T0 - 1020, 2)]
    assert r.hgetall(counter_key(name, 5)) == {str(T0 - 1000).encode(): b"2"}
    assert known_members(r) == {f"{p}:{n}" for p in PRECISIONS for n in (name, "other")}

    # Cleaning parses the precision from the member, whatever the name holds.
    assert whos_online.clean_counters(now=T0 - 1000 + 119) == 0
    assert whos_online.clean_counters(now=T0 - 1000 + 120) == 2
    assert whos_online.get_counter(name, 1) == []
    assert whos_online.get_counter(name, 5) == [(T0 - 1000, 2)]
    assert assert_invariant(r) == {f"{p}:{n}" for p in PRECISIONS[1:] for n in (name, "other")}


@FAKE_ONLY
@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        ("", ValueError, "1 to 200 characters, not 0"),
        ("x" * 201, ValueError, "1 to 200 characters, not 201"),
        ("lone \ud800 surrogate", ValueError, "valid Unicode text"),
        (None, TypeError, "must be a str, not NoneType"),
        (b"bytes", TypeError, "must be a str, not bytes"),
        (5, TypeError, "must be a str, not int"),
        (["c"], TypeError, "must be a str, not list"),
    ],
)
def test_bad_names_raise_before_any_round_trip(r, redis_calls, name, error, message):
    with pytest.raises(error, match=message):
        whos_online.update_counter(name, now=T0)
    with pytest.raises(error, match=message):
        whos_online.get_counter(name, 60)

    assert redis_calls.trips == []
    assert all_keys(r) == set()


@FAKE_ONLY
@pytest.mark.parametrize(
    ("count", "kind"),
    [
        (True, "bool"),
        (False, "bool"),
        (1.0, "float"),
        (0.5, "float"),
        ("1", "str"),
        (None, "NoneType"),
    ],
)
def test_bad_counts_raise_before_any_round_trip(r, redis_calls, count, kind):
    with pytest.raises(TypeError, match=f"counts in whole numbers, not {kind}"):
        whos_online.update_counter("c", count, now=T0)

    assert redis_calls.trips == []
    assert all_keys(r) == set()


@pytest.mark.parametrize("count", [2**53 + 1, 10**17, 2**63 - 1, -(2**63)])
def test_a_count_in_the_redis_integer_range_is_stored_exactly(r, count):
    assert whos_online.update_counter("c", count, now=T0) is True

    assert whos_online.get_counter("c", 1) == [(T0, count)]
    assert whos_online.update_counter("d", now=T0) is True


@pytest.mark.parametrize("count", [2**63, -(2**63) - 1, 10**30])
def test_a_count_out_of_range_is_a_value_error_and_does_not_open_the_breaker(r, count):
    with pytest.raises(ValueError, match="range"):
        whos_online.update_counter("c", count, now=T0)

    assert whos_online.update_counter("d", now=T0) is True
    assert whos_online.get_counter("d", 1) == [(T0, 1)]


# --- slice edges ----------------------------------------------------------------------------------


def test_slice_edges_one_second_around_a_boundary(r):
    # T0 starts a slice at every precision; T0 - 1 is in the previous one, T0 + 1 in the same.
    for offset in (-1, 0, 1):
        assert whos_online.update_counter("c", now=T0 + offset)

    assert whos_online.get_counter("c", 1) == [(T0 - 1, 1), (T0, 1), (T0 + 1, 1)]
    assert whos_online.get_counter("c", 5) == [(T0 - 5, 1), (T0, 2)]
    assert whos_online.get_counter("c", 60) == [(T0 - 60, 1), (T0, 2)]
    assert whos_online.get_counter("c", 86400) == [(T0 - 86400, 1), (T0, 2)]


@pytest.mark.parametrize(
    ("offset", "second", "five", "minute"),
    [
        (-0.001, T0 - 1, T0 - 5, T0 - 60),
        (0.0, T0, T0, T0),
        (0.999, T0, T0, T0),
        (4.999, T0 + 4, T0, T0),
        (5.0, T0 + 5, T0 + 5, T0),
        (59.999, T0 + 59, T0 + 55, T0),
        (60.0, T0 + 60, T0 + 60, T0 + 60),
    ],
)
def test_fractional_now_goes_to_the_slice_that_contains_it(r, offset, second, five, minute):
    whos_online.update_counter("c", now=T0 + offset)

    assert whos_online.get_counter("c", 1) == [(second, 1)]
    assert whos_online.get_counter("c", 5) == [(five, 1)]
    assert whos_online.get_counter("c", 60) == [(minute, 1)]


def test_negative_counts(r):
    whos_online.update_counter("balance", -3, now=T0)
    assert whos_online.get_counter("balance", 60) == [(T0, -3)]

    whos_online.update_counter("balance", 5, now=T0 + 1)
    whos_online.update_counter("balance", -2, now=T0 + 2)

    # A slice back at zero is a sample of 0, as in the seed; its name stays known.
    assert whos_online.get_counter("balance", 60) == [(T0, 0)]
    assert whos_online.get_counter("balance", 1) == [(T0, -3), (T0 + 1, 5), (T0 + 2, -2)]
    assert assert_invariant(r) == {f"{p}:balance" for p in PRECISIONS}

    # A negative count into a new slice of a known counter, and into a brand-new counter.
    whos_online.update_counter("balance", -1, now=T0 + 60)
    whos_online.update_counter("debt", -1, now=T0)
    assert whos_online.get_counter("balance", 60) == [(T0, 0), (T0 + 60, -1)]
    assert whos_online.get_counter("debt", 86400) == [(T0, -1)]
    assert len(assert_invariant(r)) == 2 * len(PRECISIONS)


# --- cleaning: the newest COUNTER_SAMPLES slices --------------------------------------------------


@pytest.mark.parametrize("precision", [1, 5, 60])
def test_clean_keeps_exactly_the_newest_samples(settings, r, precision):
    configure(settings, COUNTER_PRECISIONS=[precision], COUNTER_SAMPLES=3)
    start = T0  # a slice start: S
    p = precision
    for index in range(-4, 3):  # S - 4p … S + 2p, two slices in the future
        whos_online.update_counter("c", index + 10, now=start + index * p)

    def slices() -> list[int]:
        return [first for first, _ in whos_online.get_counter("c", p)]

    # At S - 1 the current slice is S - p: keep S - 3p, S - 2p, S - p (and the future).
    assert whos_online.clean_counters(now=start - 1) == 1
    assert slices() == [start + k * p for k in (-3, -2, -1, 0, 1, 2)]
    # Exactly on the slice start: S - 3p goes, S - 2p, S - p and S stay.
    assert whos_online.clean_counters(now=start) == 1
    assert slices() == [start + k * p for k in (-2, -1, 0, 1, 2)]
    # The last second of the slice changes nothing.
    assert whos_online.clean_counters(now=start + p - 1) == 0
    assert whos_online.clean_counters(now=start + p - 0.001) == 0
    assert slices() == [start + k * p for k in (-2, -1, 0, 1, 2)]
    # The next slice's start drops one more; the counts of the survivors are untouched.
    assert whos_online.clean_counters(now=start + p) == 1
    assert whos_online.get_counter("c", p) == [
        (start - p, 9),
        (start, 10),
        (start + p, 11),
        (start + 2 * p, 12),
    ]
    assert known(r) == [(f"{p}:c", 0.0)]


def test_clean_returns_the_samples_removed_over_every_counter_and_precision(settings, r):
    configure(settings, COUNTER_PRECISIONS=[1, 5, 60], COUNTER_SAMPLES=3)
    for offset in range(-20, 1):  # one update a second for 21 seconds
        whos_online.update_counter("a", now=T0 + offset)
    whos_online.update_counter("b", 7, now=T0 - 500)

    # At T0: 1 s keeps T0-2..T0 (18 of 21 go), 5 s keeps T0-10..T0 (T0-20 and T0-15 go),
    # 60 s keeps T0-120..T0 (nothing goes); "b" loses its one slice at each precision.
    assert whos_online.clean_counters(now=T0) == 18 + 2 + 0 + 3

    assert whos_online.get_counter("a", 1) == [(T0 - 2, 1), (T0 - 1, 1), (T0, 1)]
    assert whos_online.get_counter("a", 5) == [(T0 - 10, 5), (T0 - 5, 5), (T0, 1)]
    assert whos_online.get_counter("a", 60) == [(T0 - 60, 20), (T0, 1)]
    for precision in (1, 5, 60):
        assert whos_online.get_counter("b", precision) == []
    assert assert_invariant(r) == {"1:a", "5:a", "60:a"}
    assert whos_online.clean_counters(now=T0) == 0


def test_clean_keeps_future_slices(settings, r):
    configure(settings, COUNTER_PRECISIONS=[1, 60], COUNTER_SAMPLES=3)
    whos_online.update_counter("c", now=T0 + 3600)
    before = dump(r)

    assert whos_online.clean_counters(now=T0) == 0

    assert dump(r) == before


def test_clean_with_the_clock_keeps_what_was_just_written(r):
    whos_online.update_counter("c")

    assert whos_online.clean_counters() == 0
    assert len(whos_online.get_counter("c", 1)) == 1
    assert assert_invariant(r) == {f"{p}:c" for p in PRECISIONS}


def test_clean_accepts_an_aware_datetime(settings, r):
    configure(settings, COUNTER_PRECISIONS=[60], COUNTER_SAMPLES=3)
    whos_online.update_counter("c", now=T0 - 180)

    assert whos_online.clean_counters(now=datetime.fromtimestamp(T0 - 1, tz=timezone.utc)) == 0
    assert whos_online.clean_counters(now=datetime.fromtimestamp(T0, tz=timezone.utc)) == 1
    assert all_keys(r) == set()


def test_clean_forgets_a_name_whose_hash_is_gone(settings, r):
    configure(settings, COUNTER_PRECISIONS=[60], COUNTER_SAMPLES=3)
    whos_online.update_counter("c", now=T0)
    r.delete(counter_key("c", 60))  # an operator's DEL, or a lost key

    assert whos_online.clean_counters(now=T0) == 0

    assert all_keys(r) == set()


def test_clean_of_nothing(r, redis_calls):
    assert whos_online.clean_counters(now=T0) == 0
    assert redis_calls.trips == [["ZRANGEBYLEX"]]


# --- precisions changed in settings ---------------------------------------------------------------


def test_clean_drops_counters_of_a_precision_no_longer_configured(settings, r):
    configure(settings, COUNTER_PRECISIONS=[1, 60], COUNTER_SAMPLES=3)
    for offset in (-2, -1, 0):
        whos_online.update_counter("c", now=T0 + offset)
    whos_online.update_counter("d", 4, now=T0)
    assert assert_invariant(r) == {"1:c", "60:c", "1:d", "60:d"}

    configure(settings, COUNTER_PRECISIONS=[60, 3600], COUNTER_SAMPLES=3)
    # Nothing is stale at 60 s; the 1-second counters go whole, their 3 + 1 samples counted.
    assert whos_online.clean_counters(now=T0) == 4

    assert assert_invariant(r) == {"60:c", "60:d"}
    assert all_keys(r) == {KNOWN, counter_key("c", 60), counter_key("d", 60)}
    assert whos_online.get_counter("c", 60) == [(T0 - 60, 2), (T0, 1)]
    assert whos_online.get_counter("d", 60) == [(T0, 4)]
    assert stored(r, "c", 1) == {}
    assert whos_online.clean_counters(now=T0) == 0


def test_a_late_writer_with_the_old_precisions_re_creates_what_was_dropped(
    settings, r, monkeypatch
):
    configure(settings, COUNTER_PRECISIONS=[1, 60], COUNTER_SAMPLES=3)
    whos_online.update_counter("c", now=T0)
    old_config = get_config()
    configure(settings, COUNTER_PRECISIONS=[60], COUNTER_SAMPLES=3)
    drop = counters._drop

    def drop_then_write(client, config, name_member, size, *, dry_run):
        removed = drop(client, config, name_member, size, dry_run=dry_run)
        assert counter_key("c", 1) not in all_keys(r)
        assert known_members(r) == {"60:c"}
        # A process still running with the old settings writes right after the drop.
        counters.add(client, old_config, {("c", T0 + 1): 5})
        return removed

    monkeypatch.setattr(counters, "_drop", drop_then_write)

    assert whos_online.clean_counters(now=T0 + 1) == 1

    assert stored(r, "c", 1) == {T0 + 1: 5}
    assert stored(r, "c", 60) == {T0: 6}
    assert assert_invariant(r) == {"1:c", "60:c"}
    monkeypatch.setattr(counters, "_drop", drop)
    assert whos_online.clean_counters(now=T0 + 1) == 1
    assert assert_invariant(r) == {"60:c"}


# --- cleaning racing with updates -----------------------------------------------------------------


@pytest.fixture
def two_precisions(settings) -> None:
    configure(settings, COUNTER_PRECISIONS=[1, 60], COUNTER_SAMPLES=3)


def patch_delete(monkeypatch, before: Callable[[str], None], after: Callable[[str], None]) -> None:
    delete = counters._delete

    def racing_delete(client, config, name_member, stale, *, dry_run):
        before(name_member)
        removed = delete(client, config, name_member, stale, dry_run=dry_run)
        after(name_member)
        return removed

    monkeypatch.setattr(counters, "_delete", racing_delete)


def test_an_update_between_the_read_and_the_delete_is_kept(two_precisions, r, monkeypatch):
    whos_online.update_counter("c", now=T0 - 1000)  # every slice stale at T0
    landed: list[bool] = []

    def update_once(name_member: str) -> None:
        if name_member == "1:c" and not landed:
            # The cleaner has read the stale slices of both HASHes and would empty them.
            landed.append(whos_online.update_counter("c", 7, now=T0))

    patch_delete(monkeypatch, before=update_once, after=lambda name_member: None)

    assert whos_online.clean_counters(now=T0) == 2

    assert landed == [True]
    assert whos_online.get_counter("c", 1) == [(T0, 7)]
    assert whos_online.get_counter("c", 60) == [(T0, 7)]
    assert assert_invariant(r) == {"1:c", "60:c"}


def test_an_update_right_after_the_counter_was_forgotten_re_creates_it(
    two_precisions, r, monkeypatch
):
    whos_online.update_counter("c", now=T0 - 1000)
    seen_after_delete: list[tuple[dict[int, int], set[str]]] = []

    def update_once(name_member: str) -> None:
        if name_member == "1:c" and not seen_after_delete:
            seen_after_delete.append((stored(r, "c", 1), known_members(r)))
            assert whos_online.update_counter("c", 7, now=T0)

    patch_delete(monkeypatch, before=lambda name_member: None, after=update_once)

    assert whos_online.clean_counters(now=T0) == 2

    # The first delete emptied the 1-second HASH and forgot its name, then the update came.
    assert seen_after_delete == [({}, {"60:c"})]
    assert whos_online.get_counter("c", 1) == [(T0, 7)]
    assert whos_online.get_counter("c", 60) == [(T0, 7)]
    assert assert_invariant(r) == {"1:c", "60:c"}


def test_a_stale_update_between_the_read_and_the_delete_leaves_no_orphan(
    two_precisions, r, monkeypatch
):
    whos_online.update_counter("c", now=T0 - 1000)
    landed: list[bool] = []

    def update_stale(name_member: str) -> None:
        if name_member == "1:c" and not landed:
            # A late write into the very slices about to be deleted, and into a new stale one.
            landed.append(whos_online.update_counter("c", now=T0 - 1000))
            landed.append(whos_online.update_counter("c", now=T0 - 2000))

    patch_delete(monkeypatch, before=update_stale, after=lambda name_member: None)

    assert whos_online.clean_counters(now=T0) == 2

    # The slices read as stale go, the one written after the read stays, still named.
    assert whos_online.get_counter("c", 1) == [(T0 - 2000, 1)]
    assert whos_online.get_counter("c", 60) == [(T0 - 2040, 1)]
    assert assert_invariant(r) == {"1:c", "60:c"}
    patch_delete(monkeypatch, before=lambda name_member: None, after=lambda name_member: None)
    assert whos_online.clean_counters(now=T0) == 2
    assert all_keys(r) == set()


def test_threads_updating_and_cleaning_keep_the_invariant(backend, two_precisions, r):
    if backend == "fake":
        pytest.skip("real threads against a real server")
    names = [f"c{index}" for index in range(6)]
    cleaning = threading.Event()
    done = threading.Event()
    failures: list[str] = []
    passes: list[int] = []

    def write() -> None:
        try:
            cleaning.wait(timeout=10)
            for index in range(360):
                # Stale at both precisions when cleaned at T0: cleaning empties these HASHes.
                if not whos_online.update_counter(names[index % 6], now=T0 - 1000 - index):
                    failures.append(f"stale update {index}")
            for name in names:
                if not whos_online.update_counter(name, 3, now=T0):
                    failures.append(f"fresh update {name}")
        finally:
            done.set()

    def clean() -> None:
        cleaning.set()
        while not done.is_set():
            passes.append(whos_online.clean_counters(now=T0))

    threads = [threading.Thread(target=write), threading.Thread(target=clean)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert failures == []
    assert passes
    assert sum(passes) > 0
    assert assert_invariant(r) == {f"{p}:{name}" for p in (1, 60) for name in names}
    left = 0
    for name in names:
        for precision in (1, 60):
            *stale, newest = whos_online.get_counter(name, precision)
            assert newest == (T0, 3)
            assert all(start <= T0 - 180 for start, _ in stale)
            left += len(stale)

    assert whos_online.clean_counters(now=T0) == left
    assert assert_invariant(r) == {f"{p}:{name}" for p in (1, 60) for name in names}
    for name in names:
        assert whos_online.get_counter(name, 1) == [(T0, 3)]
        assert whos_online.get_counter(name, 60) == [(T0, 3)]


# --- bounded work per call ------------------------------------------------------------------------


def write_many(count: int = 6) -> int:
    """Counters c0…c5: c<i> has i + 1 stale slices at 1 s and at 60 s; odd ones a fresh one.

    Returns how many samples are stale at T0 (with COUNTER_SAMPLES 3).
    """
    stale = 0
    for index in range(count):
        for step in range(index + 1):
            whos_online.update_counter(f"c{index}", now=T0 - 180 - 60 * step)
            stale += 2
        if index % 2:
            whos_online.update_counter(f"c{index}", now=T0)
    return stale


def test_clean_works_in_bounded_pages_and_chunks(two_precisions, r, redis_calls, monkeypatch):
    assert write_many() == 42
    monkeypatch.setattr(counters, "DELETE_CHUNK_SIZE", 2)
    monkeypatch.setattr(counters, "CLEAN_PAGE_SIZE", 5)
    redis_calls.clear()

    assert whos_online.clean_counters(now=T0) == 42

    chunked_trips = list(redis_calls.trips)
    chunked = dump(r)
    # 12 names, 5 a page, walked by name: 1:c0…1:c4, then 1:c5 and 60:c0…60:c3, then the rest.
    # c<i> has i + 1 stale slices, deleted 2 at a time: 1, 1, 2, 2, 3, 3 scripts for c0…c5.
    assert chunked_trips == [
        ["ZRANGEBYLEX"],
        ["HKEYS"] * 5,
        *[["EVALSHA"]] * (1 + 1 + 2 + 2 + 3),
        ["ZRANGEBYLEX"],
        ["HKEYS"] * 5,
        *[["EVALSHA"]] * (3 + 1 + 1 + 2 + 2),
        ["ZRANGEBYLEX"],
        ["HKEYS"] * 2,
        *[["EVALSHA"]] * (3 + 3),
    ]
    # Names removed behind the cursor shifted no page: every emptied counter is gone.
    assert assert_invariant(r) == {f"{p}:c{i}" for p in (1, 60) for i in (1, 3, 5)}
    for index in (1, 3, 5):
        assert whos_online.get_counter(f"c{index}", 1) == [(T0, 1)]
        assert whos_online.get_counter(f"c{index}", 60) == [(T0, 1)]

    # The same data cleaned in one page and unbounded chunks ends the same.
    admin_client().flushdb()
    write_many()
    monkeypatch.setattr(counters, "DELETE_CHUNK_SIZE", DELETE_CHUNK_SIZE)
    monkeypatch.setattr(counters, "CLEAN_PAGE_SIZE", CLEAN_PAGE_SIZE)
    redis_calls.clear()

    assert whos_online.clean_counters(now=T0) == 42

    assert redis_calls.trips == [["ZRANGEBYLEX"], ["HKEYS"] * 12, *[["EVALSHA"]] * 12]
    assert dump(r) == chunked


def test_a_full_last_page_costs_one_more_read(two_precisions, r, redis_calls, monkeypatch):
    whos_online.update_counter("a", now=T0)
    whos_online.update_counter("b", now=T0)
    monkeypatch.setattr(counters, "CLEAN_PAGE_SIZE", 2)
    redis_calls.clear()

    assert whos_online.clean_counters(now=T0) == 0

    assert redis_calls.trips == [
        ["ZRANGEBYLEX"],
        ["HKEYS", "HKEYS"],
        ["EVALSHA"],
        ["EVALSHA"],
        ["ZRANGEBYLEX"],
        ["HKEYS", "HKEYS"],
        ["EVALSHA"],
        ["EVALSHA"],
        ["ZRANGEBYLEX"],
    ]
    assert assert_invariant(r) == {"1:a", "1:b", "60:a", "60:b"}


# --- failing open ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backoff", [0, 10])
def test_counters_fail_open_while_redis_is_down(settings, backoff):
    settings.WHOS_ONLINE = {
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "FAILURE_BACKOFF": backoff,
    }

    assert whos_online.update_counter("c", now=T0) is False
    assert whos_online.update_counter("c", 5) is False
    assert whos_online.get_counter("c", 60) == []
    assert whos_online.clean_counters(now=T0) == 0
    assert whos_online.clean_counters() == 0
    # Mistakes in the calling code are still reported while Redis is down.
    with pytest.raises(ValueError, match="COUNTER_PRECISIONS"):
        whos_online.get_counter("c", 7)
    with pytest.raises(TypeError, match="whole numbers"):
        whos_online.update_counter("c", 1.5)  # type: ignore [arg-type]


# --- property: the reference semantics -----------------------------------------------------------


class SeedModel:
    """``update_counter`` and ``clean_counters`` of "Redis in Action" 5.2, on dicts."""

    def __init__(self, precisions: tuple[int, ...], samples: int) -> None:
        self.precisions = precisions
        self.samples = samples
        self.hashes: dict[str, dict[int, int]] = {}
        self.known: set[str] = set()

    def update(self, name: str, count: int, now: float) -> None:
        for precision in self.precisions:
            member = f"{precision}:{name}"
            self.known.add(member)
            start = int(now / precision) * precision
            data = self.hashes.setdefault(member, {})
            data[start] = data.get(start, 0) + count

    def clean(self, now: float) -> int:
        removed = 0
        for member in sorted(self.known):
            precision = int(member.partition(":")[0])
            cutoff = now - self.samples * precision
            data = self.hashes.get(member, {})
            starts = sorted(data)
            # bisect_right(samples, cutoff): every slice starting at or before the cutoff.
            remove = [start for start in starts if start <= cutoff]
            for start in remove:
                del data[start]
            removed += len(remove)
            if len(remove) == len(starts):
                self.known.discard(member)
                self.hashes.pop(member, None)
        return removed


properties = hypothesis_settings(
    database=None,
    deadline=None,
    max_examples=50,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

MODEL_PRECISIONS = (1, 5, 60)
NAMES = ("a", "b:1", "ü ☃")

moments = st.builds(
    lambda seconds, fraction: T0 + seconds + fraction,
    st.integers(min_value=-400, max_value=400),
    st.sampled_from([0.0, 0.25, 0.5, 0.999]),
)
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("update"),
            st.sampled_from(NAMES),
            st.integers(min_value=-3, max_value=5).filter(bool),
            moments,
        ),
        st.tuples(st.just("clean"), st.just(""), st.just(0), moments),
    ),
    max_size=14,
)


@properties
@given(samples=st.integers(min_value=1, max_value=4), steps=operations)
def test_updates_and_cleans_match_the_seed(settings, samples, steps):
    configure(settings, COUNTER_PRECISIONS=list(MODEL_PRECISIONS), COUNTER_SAMPLES=samples)
    r = single_redis()
    r.flushdb()
    model = SeedModel(MODEL_PRECISIONS, samples)

    for kind, name, count, now in steps:
        if kind == "update":
            assert whos_online.update_counter(name, count, now=now) is True
            model.update(name, count, now)
        else:
            assert whos_online.clean_counters(now=now) == model.clean(now)
        assert assert_invariant(r) == model.known
        for member in model.known:
            precision, _, counter = member.partition(":")
            assert whos_online.get_counter(counter, int(precision)) == sorted(
                model.hashes[member].items()
            )


def test_the_model_slices_like_the_spec():
    # floor(now / p) * p for the positive times the property draws.
    model = SeedModel((1, 5, 60), 3)
    model.update("a", 1, T0 - 0.001)
    assert {member: list(data) for member, data in model.hashes.items()} == {
        "1:a": [math.floor(T0 - 0.001)],
        "5:a": [T0 - 5],
        "60:a": [T0 - 60],
    }
