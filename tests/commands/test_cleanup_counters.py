"""The counters part of ``whos_online_cleanup``: which precisions are due, what goes, what stays."""

from __future__ import annotations

import time
from io import StringIO
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest
import redis
from django.core.management import CommandError, call_command

from tests.support.helpers import configure
from whos_online import api
from whos_online.config.settings import get_config
from whos_online.management.commands import whos_online_cleanup
from whos_online.store import counters

if TYPE_CHECKING:
    from tests.support.helpers import RedisCalls

#: A Unix time that starts a slice at every default precision (a multiple of 432000 s).
T0 = 1_799_712_000
DAY = 86400
PRECISIONS = (1, 5, 60, 300, 3600, 18000, 86400)
CLEANED = "{whos_online}:counters-cleaned"
KNOWN = "{whos_online}:counters"
LOCK = "{whos_online}:cleanup-lock"
EVERY_PRECISION = "1 s, 5 s, 60 s, 300 s, 3600 s, 18000 s and 86400 s"
NOTHING_DUE = "No counter precision was due for cleaning."
NO_ROOMS = "Rooms: took nobody out, and deleted no room that had nobody left.\n"
NO_ROOMS_DRY = "Rooms: would take nobody out, and delete no room that would have nobody left.\n"


class Clock:
    """The command's clock; tests move it."""

    def __init__(self) -> None:
        self.now = float(T0)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(
        whos_online_cleanup,
        "time",
        SimpleNamespace(time=lambda: clock.now, monotonic=time.monotonic, sleep=time.sleep),
    )
    return clock


def run(*args: str) -> str:
    out, err = StringIO(), StringIO()
    call_command("whos_online_cleanup", *args, stdout=out, stderr=err)
    assert err.getvalue() == ""
    return out.getvalue()


def counters_line(*args: str) -> str:
    """The last line of the output, after the people's and the rooms'."""
    lines = run(*args).splitlines()
    assert len(lines) == 3
    return lines[2]


def schedule(r) -> dict[str, str]:
    stored: dict[bytes, bytes] = r.hgetall(CLEANED)
    return {field.decode(): value.decode() for field, value in stored.items()}


def known(r) -> list[str]:
    return [member.decode() for member in r.zrange(KNOWN, 0, -1)]


def dump(r) -> dict[str, object]:
    """Every key with its content, to show that nothing changed."""
    content: dict[str, object] = {}
    for raw in sorted(r.keys("*")):
        name = raw.decode()
        kind = r.type(name).decode()
        if kind == "hash":
            content[name] = r.hgetall(name)
        elif kind == "zset":
            content[name] = r.zrange(name, 0, -1, withscores=True)
        else:
            content[name] = r.dump(name)
    return content


def when(timestamp: float) -> str:
    return f"{timestamp:.3f}"


def write_samples(now: int) -> int:
    """Counters ``c`` and ``gone`` around ``now``; returns how many samples are stale at ``now``.

    With COUNTER_SAMPLES 120 a slice is stale when it starts at or before now - 120 * precision.
    """
    old = now - 121 * DAY
    assert api.update_counter("c", now=old)  # stale at all 7 precisions
    assert api.update_counter("c", now=now - 200)  # stale at precision 1 only
    assert api.update_counter("c", now=now - 120)  # stale at precision 1 only: the boundary
    assert api.update_counter("c", now=now - 119)
    assert api.update_counter("c", now=now - 10)
    assert api.update_counter("gone", 3, now=old)  # stale at all 7 precisions
    return 7 + 1 + 1 + 7


def test_first_run_cleans_every_precision_then_each_when_due(backend, r, clock):
    out = run()

    assert out == (
        "Removed nobody last seen before 2027-01-11 23:50:00 UTC.\n"
        f"{NO_ROOMS}Removed 0 counter samples at precisions {EVERY_PRECISION}.\n"
    )
    assert schedule(r) == {str(p): when(T0) for p in PRECISIONS}
    assert counters_line() == NOTHING_DUE
    assert schedule(r) == {str(p): when(T0) for p in PRECISIONS}

    # Each precision is cleaned every max(precision, 60) seconds.
    for moment, due in [
        (T0 + 59, ""),
        (T0 + 60, "1 s, 5 s and 60 s"),
        (T0 + 119, ""),
        (T0 + 300, "1 s, 5 s, 60 s and 300 s"),
        (T0 + 3599, "1 s, 5 s, 60 s and 300 s"),
        (T0 + 3600, "3600 s"),
        (T0 + 18000, "1 s, 5 s, 60 s, 300 s, 3600 s and 18000 s"),
        (T0 + 86399, "1 s, 5 s, 60 s, 300 s, 3600 s and 18000 s"),
        (T0 + 86400, "86400 s"),
    ]:
        clock.now = moment
        expected = f"Removed 0 counter samples at precisions {due}." if due else NOTHING_DUE
        assert counters_line() == expected, moment

    assert schedule(r) == {
        "1": when(T0 + 86399),
        "5": when(T0 + 86399),
        "60": when(T0 + 86399),
        "300": when(T0 + 86399),
        "3600": when(T0 + 86399),
        "18000": when(T0 + 86399),
        "86400": when(T0 + 86400),
    }


def test_removes_exactly_the_stale_samples(backend, r, clock):
    stale = write_samples(T0)
    assert "1:gone" in known(r)

    assert counters_line() == f"Removed {stale} counter samples at precisions {EVERY_PRECISION}."

    assert api.get_counter("c", 1) == [(T0 - 119, 1), (T0 - 10, 1)]
    assert api.get_counter("c", 5) == [(T0 - 200, 1), (T0 - 120, 2), (T0 - 10, 1)]
    assert api.get_counter("c", 60) == [(T0 - 240, 1), (T0 - 120, 2), (T0 - 60, 1)]
    assert api.get_counter("c", 86400) == [(T0 - DAY, 4)]
    # A counter left without samples is forgotten, key and name.
    for precision in PRECISIONS:
        assert api.get_counter("gone", precision) == []
    assert r.keys("*gone*") == []
    assert known(r) == sorted(f"{p}:c" for p in PRECISIONS)

    clock.now = T0 + 60
    assert counters_line() == "Removed 1 counter sample at precisions 1 s, 5 s and 60 s."
    assert api.get_counter("c", 1) == [(T0 - 10, 1)]


def test_precisions_not_due_keep_their_stale_samples(backend, r, clock):
    run()
    old = T0 - 121 * DAY
    assert api.update_counter("x", now=old)
    clock.now = T0 + 60

    assert counters_line() == "Removed 3 counter samples at precisions 1 s, 5 s and 60 s."
    for precision in (1, 5, 60):
        assert api.get_counter("x", precision) == []
    for precision in (300, 3600, 18000, 86400):
        assert api.get_counter("x", precision) == [(old // precision * precision, 1)]

    clock.now = T0 + 300
    assert counters_line() == "Removed 1 counter sample at precisions 1 s, 5 s, 60 s and 300 s."
    assert api.get_counter("x", 300) == []
    assert known(r) == ["18000:x", "3600:x", "86400:x"]


def test_dry_run_reports_the_same_number_and_changes_nothing(backend, r, clock):
    stale = write_samples(T0)
    before = dump(r)

    out = run("--dry-run")

    assert out == (
        "Would remove nobody last seen before 2027-01-11 23:50:00 UTC.\n"
        f"{NO_ROOMS_DRY}Would remove {stale} counter samples at precisions {EVERY_PRECISION}.\n"
    )
    assert dump(r) == before
    assert r.exists(CLEANED) == 0
    # A second dry run finds the same, and the real run after it too: nothing was marked cleaned.
    assert counters_line("--dry-run") == (
        f"Would remove {stale} counter samples at precisions {EVERY_PRECISION}."
    )
    assert counters_line() == f"Removed {stale} counter samples at precisions {EVERY_PRECISION}."
    assert dump(r) != before


def test_dry_run_when_nothing_is_due(backend, r, clock):
    run()
    clock.now = T0 + 30

    assert counters_line("--dry-run") == NOTHING_DUE
    assert schedule(r) == {str(p): when(T0) for p in PRECISIONS}


def test_precisions_no_longer_configured_are_dropped(backend, settings, r, clock):
    run()
    assert api.update_counter("a", now=T0 + 50)
    assert api.update_counter("a", 2, now=T0 + 50 - 100_000)
    configure(settings, COUNTER_PRECISIONS=[60, 1])
    clock.now = T0 + 60
    before = dump(r)
    dropped = [f"{{whos_online}}:counter:{p}:a" for p in (5, 300, 3600, 18000, 86400)]
    assert r.exists(*dropped) == 5

    # 2 stale samples (one at 1 s, one at 60 s), apart from the 10 of the 5 dropped counters.
    assert counters_line("--dry-run") == (
        "Would remove 2 counter samples at precisions 1 s and 60 s. Would drop 5 counters "
        "(10 samples) of precisions no longer in COUNTER_PRECISIONS."
    )
    assert dump(r) == before

    assert counters_line() == (
        "Removed 2 counter samples at precisions 1 s and 60 s. Dropped 5 counters "
        "(10 samples) of precisions no longer in COUNTER_PRECISIONS."
    )

    assert r.exists(*dropped) == 0
    assert known(r) == ["1:a", "60:a"]
    assert api.get_counter("a", 1) == [(T0 + 50, 1)]
    assert api.get_counter("a", 60) == [(T0, 1)]
    # The schedule forgets the precisions that are gone.
    assert schedule(r) == {"1": when(T0 + 60), "60": when(T0 + 60)}

    # Nothing due, nothing left to drop.
    assert counters_line() == NOTHING_DUE


def test_counters_are_dropped_even_when_no_precision_is_due(backend, settings, r, clock):
    run()
    assert api.update_counter("a", now=T0 + 10)
    configure(settings, COUNTER_PRECISIONS=[1, 5, 60, 300, 3600, 18000])
    clock.now = T0 + 30

    assert counters_line() == (
        "No counter precision was due for cleaning. Dropped 1 counter (1 sample) of precisions "
        "no longer in COUNTER_PRECISIONS."
    )
    assert "86400:a" not in known(r)
    assert r.exists("{whos_online}:counter:86400:a") == 0
    assert "86400" not in schedule(r)
    assert len(schedule(r)) == 6


def test_cleans_page_by_page_and_in_chunks(backend, settings, r, clock, monkeypatch):
    configure(settings, COUNTER_PRECISIONS=[1])
    monkeypatch.setattr(counters, "CLEAN_PAGE_SIZE", 2)
    monkeypatch.setattr(counters, "DELETE_CHUNK_SIZE", 3)
    names = [f"n{index}" for index in range(5)]
    for name in names:
        for second in range(7):
            api.update_counter(name, now=T0 - 1000 + second)
    for name in names[:3]:
        api.update_counter(name, now=T0 - 1)

    assert counters_line() == "Removed 35 counter samples at precisions 1 s."

    assert known(r) == ["1:n0", "1:n1", "1:n2"]
    for name in names[:3]:
        assert api.get_counter(name, 1) == [(T0 - 1, 1)]


def test_script_calls_per_chunk(
    backend, settings, r, clock, *, monkeypatch, redis_calls: RedisCalls
):
    configure(settings, COUNTER_PRECISIONS=[1])
    monkeypatch.setattr(counters, "CLEAN_PAGE_SIZE", 2)
    monkeypatch.setattr(counters, "DELETE_CHUNK_SIZE", 3)
    clock.now = T0 - 100_000
    run()  # marks the schedule and loads the lock's script into a fresh server
    for name in ("n0", "n1", "n2"):
        for second in range(7):
            api.update_counter(name, now=T0 - 1000 + second)
    for name in ("n0", "n1"):
        api.update_counter(name, now=T0 - 1)  # these two stay, and so do their names
    clock.now = T0
    redis_calls.clear()

    assert counters_line() == "Removed 21 counter samples at precisions 1 s."

    chunks = [["EVALSHA"]] * 3  # 3 + 3 + 1 stale slices
    assert redis_calls.trips == [
        ["SET"],  # the lock
        *[["EVALSHA"]] * 4,  # prune: one chunk per kind
        ["SMEMBERS"],  # the layouts of another SHARDS: none
        ["EVALSHA"],  # the rooms to prune: one page, empty
        ["HMGET"],  # which precisions are due
        ["ZRANGEBYLEX"],  # the first page of names...
        ["HKEYS", "HKEYS"],  # ...read in one trip
        *chunks,
        *chunks,
        ["ZRANGEBYLEX"],
        ["HKEYS"],
        *chunks,
        ["HKEYS"],  # mark the precisions cleaned
        ["HSET"],
        ["EVALSHA"],  # release the lock
    ]
    assert known(r) == ["1:n0", "1:n1"]


# Redis failing


@pytest.mark.parametrize(
    ("step", "dry_run"),
    [
        ("cleaning_due", False),
        ("clean", False),
        ("mark_cleaned", False),
        ("cleaning_due", True),
        ("clean", True),
    ],
)
def test_redis_failing_while_cleaning_counters_is_a_command_error(
    backend, r, clock, monkeypatch, *, step, dry_run
):
    r.zadd("{whos_online}:guests", {"stale": T0 - 700, "fresh": T0})

    def fail(*args: object, **kwargs: object) -> None:
        raise redis.exceptions.ConnectionError("Connection reset by peer")

    monkeypatch.setattr(counters, step, fail)
    out = StringIO()
    args = ["--dry-run"] if dry_run else []

    with pytest.raises(CommandError) as excinfo:
        call_command("whos_online_cleanup", *args, stdout=out, stderr=StringIO())

    target = get_config().redis_target
    assert (
        str(excinfo.value) == f"Cannot clean up: Redis at {target} failed: Connection reset by peer"
    )
    assert excinfo.value.returncode == 1
    verb, rooms = ("Would remove", NO_ROOMS_DRY) if dry_run else ("Removed", NO_ROOMS)
    assert out.getvalue() == f"{verb} 1 guest last seen before 2027-01-11 23:50:00 UTC.\n{rooms}"
    assert r.exists(LOCK) == 0
    assert r.exists(CLEANED) == 0


def test_redis_down_is_a_command_error_before_any_counter_work(redis_down, monkeypatch):
    cleaned: list[object] = []
    monkeypatch.setattr(counters, "clean", lambda *args, **kwargs: cleaned.append(args))

    with pytest.raises(CommandError, match=r"^Cannot clean up: Redis at redis://127\.0\.0\.1:"):
        run()
    assert cleaned == []


@pytest.mark.parametrize("args", [["--reset-peak"], ["--reset-peak", "--dry-run"]])
def test_reset_peak_with_redis_down_is_a_command_error(redis_down, args):
    with pytest.raises(CommandError) as excinfo:
        run(*args)

    assert str(excinfo.value).startswith(f"Cannot reset the peak: Redis at {redis_down} failed: ")
    assert excinfo.value.returncode == 1
