from __future__ import annotations

import os
import re
import signal
import time
from io import StringIO
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.management import CommandError, call_command, execute_from_command_line
from redis.lock import Lock

import whos_online
from tests.support.helpers import configure, flood_rooms
from whos_online import api
from whos_online.management.commands import whos_online_cleanup
from whos_online.signals import users_went_offline
from whos_online.store import cleanup, counters

WINDOW = 600
LOCK = "{whos_online}:cleanup-lock"
#: The cutoff as the command prints it.
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\."
#: The counters line of a first run on an empty Redis: every precision is due, nothing to remove.
FIRST_CLEAN = (
    "Removed 0 counter samples at precisions 1 s, 5 s, 60 s, 300 s, 3600 s, 18000 s and 86400 s.\n"
)
NOTHING_DUE = "No counter precision was due for cleaning."
#: The rooms line of a run that found no room to clean.
NO_ROOMS = "Rooms: took nobody out, and deleted no room that had nobody left.\n"


def run(*args: str, **options: Any) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("whos_online_cleanup", *args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def stale() -> float:
    return time.time() - WINDOW - 100


def members(r, kind: str, prefix: str = "whos_online") -> list[str]:
    return sorted(member.decode() for member in r.zrange(f"{{{prefix}}}:{kind}", 0, -1))


@pytest.fixture
def some_stale(r) -> None:
    """One stale user and two stale guests, next to one fresh user and one fresh guest."""
    old, now = stale(), time.time()
    r.zadd("{whos_online}:users", {"1": old, "2": now})
    r.zadd("{whos_online}:guests", {"g1": old, "g2": old, "g3": now})


def test_removes_stale_members_and_reports(backend, r, some_stale):
    out, err = run()

    assert re.fullmatch(
        rf"Removed 1 user and 2 guests last seen before {WHEN}\n{NO_ROOMS}{FIRST_CLEAN}", out
    )
    assert err == ""
    assert members(r, "users") == ["2"]
    assert members(r, "guests") == ["g3"]


def test_report_names_every_kind_and_the_exact_cutoff(backend, r, monkeypatch):
    now = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
    monkeypatch.setattr(
        whos_online_cleanup,
        "time",
        SimpleNamespace(time=lambda: now, monotonic=time.monotonic, sleep=time.sleep),
    )
    old = now - WINDOW - 1
    r.zadd("{whos_online}:users", {"1": old, "2": now - 10})
    r.zadd("{whos_online}:hidden", {"3": old, "4": old})
    r.zadd("{whos_online}:guests", {"g1": old, "g2": old, "g3": old, "g4": now - WINDOW})
    r.zadd("{whos_online}:bots", {"b1": old})

    out, _ = run()

    assert out == (
        "Removed 1 user, 2 hidden users, 3 guests and 1 bot last seen before "
        "2027-01-15 07:50:00 UTC.\n" + NO_ROOMS + FIRST_CLEAN
    )
    assert members(r, "users") == ["2"]
    assert r.exists("{whos_online}:hidden", "{whos_online}:bots") == 0
    # Seen exactly WINDOW seconds ago is still online.
    assert members(r, "guests") == ["g4"]


def test_nothing_stale(backend, r):
    r.zadd("{whos_online}:guests", {"g1": time.time()})

    out, err = run()

    assert re.fullmatch(rf"Removed nobody last seen before {WHEN}\n{NO_ROOMS}{FIRST_CLEAN}", out)
    assert err == ""
    assert members(r, "guests") == ["g1"]


def test_dry_run_removes_nothing(backend, r, some_stale):
    out, err = run("--dry-run")

    assert re.fullmatch(
        rf"Would remove 1 user and 2 guests last seen before {WHEN}\n"
        "Rooms: would take nobody out, and delete no room that would have nobody left.\n"
        + FIRST_CLEAN.replace("Removed", "Would remove"),
        out,
    )
    assert err == ""
    assert members(r, "users") == ["1", "2"]
    assert members(r, "guests") == ["g1", "g2", "g3"]


def room_keys(r) -> dict[bytes, bytes]:
    """The rooms' keys, with their values as DUMP serializes them."""
    return {key: r.dump(key) for key in r.scan_iter(match="{whos_online}:room*")}


def test_the_rooms_line_says_who_was_taken_out_and_which_rooms_went(backend, r):
    now = time.time()
    whos_online.record_guest("192.0.2.1", room="topic:1", now=now - WINDOW - 5)
    whos_online.record_guest("192.0.2.2", room="topic:2", now=now - WINDOW - 5)
    whos_online.record_guest("192.0.2.3", room="topic:2", now=now - 5)
    whos_online.record_guest("192.0.2.4", room="topic:3", now=now - 5)
    whos_online.record_guest("192.0.2.4", now=now - 4)  # out of topic:3, which has nobody now
    before = room_keys(r)

    dry, _ = run("--dry-run")

    # topic:1 and topic:3 have nobody left; topic:2 keeps its fresh guest. The guest who left
    # topic:3 is still a member there, out of its count, with the mark that they left it.
    expected = "Rooms: would take 3 people out, and delete 2 rooms that would have nobody left."
    assert f"\n{expected}\n" in dry
    assert room_keys(r) == before

    out, _ = run()

    assert "\nRooms: took 3 people out, and deleted 2 rooms that had nobody left.\n" in out
    assert r.hlen("{whos_online}:rooms:where") == 1  # the fresh guest of topic:2, no mark left
    assert [room.decode() for room in r.zrange("{whos_online}:rooms", 0, -1)] == ["topic:2"]
    assert f"\n{NO_ROOMS}" in run()[0]


def test_the_rooms_line_in_the_singular(backend, r):
    now = time.time()
    whos_online.record_guest("192.0.2.1", room="topic:1", now=now - WINDOW - 5)

    out, _ = run()

    assert "\nRooms: took 1 person out, and deleted 1 room that had nobody left.\n" in out


def test_verbosity_0_prints_nothing(backend, r, some_stale):
    out, err = run(verbosity=0)

    assert (out, err) == ("", "")
    assert members(r, "users") == ["2"]
    assert members(r, "guests") == ["g3"]


def test_signal_names_the_users_who_went_offline(backend, r, offline_ids):
    r.zadd("{whos_online}:users", {"42": stale(), "7": time.time()})
    r.zadd("{whos_online}:hidden", {"43": stale()})

    run()

    assert offline_ids == [[42], [43]]


def test_a_held_lock_stops_the_run(backend, r, some_stale):
    lock = r.lock(LOCK, timeout=60)
    assert lock.acquire(blocking=False)
    try:
        out, err = run()
        assert r.get(LOCK) == lock.local.token
    finally:
        lock.release()

    assert out == ""
    assert err == "Another whos_online_cleanup holds the lock; this run did nothing.\n"
    assert members(r, "users") == ["1", "2"]
    assert members(r, "guests") == ["g1", "g2", "g3"]


def test_the_lock_is_held_while_pruning_and_released_after(backend, r, offline_ids):
    held: list[int] = []
    users_went_offline.connect(
        lambda sender, **kwargs: held.append(r.exists(LOCK)),
        weak=False,
        dispatch_uid="tests.commands.lock_held",
    )
    r.zadd("{whos_online}:users", {"1": stale()})
    try:
        run()
    finally:
        users_went_offline.disconnect(dispatch_uid="tests.commands.lock_held")

    assert held == [1]
    assert r.exists(LOCK) == 0


def test_lock_and_keys_follow_the_prefix(backend, settings, r):
    configure(settings, KEY_PREFIX="site1")
    r.zadd("{site1}:guests", {"g1": stale(), "g2": time.time()})
    r.zadd("{whos_online}:guests", {"other": stale()})
    lock = r.lock("{site1}:cleanup-lock", timeout=60)
    assert lock.acquire(blocking=False)
    try:
        _, err = run()
    finally:
        lock.release()
    assert err == "Another whos_online_cleanup holds the lock; this run did nothing.\n"

    out, _ = run()

    assert out.startswith("Removed 1 guest last seen before ")
    assert members(r, "guests", prefix="site1") == ["g2"]
    assert members(r, "guests") == ["other"]


def test_prunes_in_chunks(backend, r, monkeypatch, redis_calls, offline_ids):
    monkeypatch.setattr(cleanup, "PRUNE_CHUNK_SIZE", 3)
    run()  # loads the scripts into a fresh server
    r.zadd("{whos_online}:guests", {f"g{i}": stale() for i in range(10)} | {"fresh": time.time()})
    r.zadd("{whos_online}:users", {str(pk): stale() for pk in range(1, 8)})
    redis_calls.clear()

    out, _ = run()

    assert re.fullmatch(
        rf"Removed 7 users and 10 guests last seen before {WHEN}\n{NO_ROOMS}{NOTHING_DUE}\n", out
    )
    assert members(r, "guests") == ["fresh"]
    assert r.exists("{whos_online}:users") == 0
    # Chunks of at most 3: users 3+3+1, hidden 0, guests 3+3+3+1, bots 0; the one page of the
    # index of rooms; and the lock's release.
    assert redis_calls.trips.count(["EVALSHA"]) == 3 + 1 + 4 + 1 + 1 + 1
    assert [len(ids) for ids in offline_ids] == [3, 3, 1]
    assert sorted(pk for ids in offline_ids for pk in ids) == list(range(1, 8))


def test_prunes_thousands(backend, r):
    old, now = stale(), time.time()
    fresh = {f"fresh{i}": now for i in range(10)}
    r.zadd("{whos_online}:guests", {f"g{i}": old for i in range(5000)} | fresh)

    out, _ = run()

    assert re.fullmatch(
        rf"Removed 5000 guests last seen before {WHEN}\n{NO_ROOMS}{FIRST_CLEAN}", out
    )
    assert members(r, "guests") == sorted(fresh)


@pytest.mark.parametrize("every", ["0", "-5"])
def test_every_needs_a_positive_number(backend, every):
    with pytest.raises(CommandError, match=r"^--every takes a positive number of seconds\.$"):
        run("--every", every)


def _stop_on_second_sleep(monkeypatch) -> list[float]:
    """Ctrl-C (a real SIGINT to this process) during the second pause between runs."""
    sleeps: list[float] = []

    def pause(command: Any, seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(whos_online_cleanup.Command, "pause", pause)
    return sleeps


def test_every_runs_until_interrupted(backend, r, monkeypatch):
    r.zadd("{whos_online}:guests", {"g1": stale(), "g2": time.time()})
    sleeps = _stop_on_second_sleep(monkeypatch)

    out, err = run("--every", "5")

    lines = out.splitlines()
    assert len(lines) == 8
    assert lines[0] == "Cleaning up every 5 s; stop with Ctrl-C or SIGTERM."
    # Each round says what it did to the people online, to the rooms, and to the counters.
    assert re.fullmatch(rf"Removed 1 guest last seen before {WHEN}", lines[1])
    assert lines[2] == NO_ROOMS.rstrip("\n")
    assert lines[3] == FIRST_CLEAN.rstrip("\n")
    assert re.fullmatch(rf"Removed nobody last seen before {WHEN}", lines[4])
    assert lines[5] == NO_ROOMS.rstrip("\n")
    assert lines[6] == NOTHING_DUE
    assert lines[7] == "Stopped by SIGINT."
    assert err == ""
    assert len(sleeps) == 2
    assert all(0 <= seconds <= 5 for seconds in sleeps)
    assert members(r, "guests") == ["g2"]


def test_redis_down_is_a_command_error(redis_down):
    with pytest.raises(CommandError) as excinfo:
        run()

    message = str(excinfo.value)
    assert message.startswith(f"Cannot clean up: Redis at {redis_down} failed: ")
    assert excinfo.value.returncode == 1


def test_redis_down_dry_run_is_a_command_error(redis_down):
    with pytest.raises(CommandError, match=r"^Cannot clean up: Redis at redis://127\.0\.0\.1"):
        run("--dry-run")


def test_redis_down_exits_non_zero(redis_down, capsys):
    with pytest.raises(SystemExit) as excinfo:
        execute_from_command_line(["manage.py", "whos_online_cleanup"])

    assert excinfo.value.code == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"CommandError: Cannot clean up: Redis at {redis_down} failed: ")


def test_every_reports_redis_errors_and_keeps_going(redis_down, monkeypatch):
    sleeps = _stop_on_second_sleep(monkeypatch)

    out, err = run("--every", "5")

    assert out == "Cleaning up every 5 s; stop with Ctrl-C or SIGTERM.\nStopped by SIGINT.\n"
    lines = err.splitlines()
    assert len(lines) == 2
    assert all(
        line.startswith(f"Cannot clean up: Redis at {redis_down} failed: ") for line in lines
    )
    assert len(sleeps) == 2


# Stopping: SIGTERM or SIGINT end the command between two chunks, cleanly.


def stopped_midway(signal_name: str) -> str:
    return (
        f"Stopped by {signal_name} before the run ended: the lines above say what it removed; "
        "the next run removes the rest."
    )


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_the_run_between_chunks_reporting_every_removed_user(
    backend, r, monkeypatch, offline_ids, stop
):
    monkeypatch.setattr(cleanup, "PRUNE_CHUNK_SIZE", 3)
    r.zadd("{whos_online}:users", {str(pk): stale() for pk in range(1, 11)})
    lock_ttls: list[int] = []

    def signal_during_the_first_chunk(sender: object, **kwargs: Any) -> None:
        lock_ttls.append(r.pttl(LOCK))
        if len(lock_ttls) == 1:
            os.kill(os.getpid(), stop)

    users_went_offline.connect(
        signal_during_the_first_chunk, weak=False, dispatch_uid="tests.commands.stop"
    )
    try:
        out, err = run("--every", "3600")  # a daemon: stops without waiting an hour
    finally:
        users_went_offline.disconnect(dispatch_uid="tests.commands.stop")

    # What the run removed before it stopped is in the log, and that it stopped midway.
    assert re.fullmatch(rf"Removed 3 users last seen before {WHEN}", out.splitlines()[1])
    assert out.splitlines()[2:] == [stopped_midway(stop.name)]
    assert err == ""
    reported = sorted(pk for ids in offline_ids for pk in ids)
    left = {int(pk) for pk in members(r, "users")}
    assert reported == [1, 2, 3]  # the chunk that was under way, and no other
    assert left == set(range(4, 11))  # nothing removed without being reported
    assert r.exists(LOCK) == 0
    # A run that died instead would leave the lock for at most LOCK_TIMEOUT seconds.
    assert 0 < lock_ttls[0] <= whos_online_cleanup.LOCK_TIMEOUT * 1000


def samples_at_1_and_5_s(r) -> int:
    return sum(len(r.hkeys(key)) for key in r.scan_iter("{whos_online}:counter:[15]:*"))


def test_a_stop_signal_while_cleaning_counters_says_how_many_samples_went(backend, r, monkeypatch):
    monkeypatch.setattr(counters, "CLEAN_PAGE_SIZE", 2)
    for number in range(6):
        api.update_counter(f"n{number}", now=time.time() - 1000)  # stale at 1 s and 5 s
    stale = samples_at_1_and_5_s(r)
    delete = counters._delete

    def signal_at_the_first_removal(*args: Any, **kwargs: Any) -> int:
        removed = delete(*args, **kwargs)
        if removed:
            os.kill(os.getpid(), signal.SIGTERM)  # heard once the page under way is cleaned
        return removed

    monkeypatch.setattr(counters, "_delete", signal_at_the_first_removal)

    out, err = run()

    assert err == ""
    removed = stale - samples_at_1_and_5_s(r)
    assert 0 < removed < stale  # a page of counters cleaned, not all of them
    assert out.splitlines()[-2:] == [
        f"Removed {removed} counter samples at precisions 1 s, 5 s, 60 s, 300 s, 3600 s, "
        "18000 s and 86400 s.",
        stopped_midway("SIGTERM"),
    ]
    assert r.exists("{whos_online}:counters-cleaned") == 0  # due again at the next run


def test_the_previous_signal_handlers_come_back(backend, r):
    before = {number: signal.getsignal(number) for number in whos_online_cleanup.STOP_SIGNALS}
    run()
    assert {number: signal.getsignal(number) for number in before} == before


@pytest.fixture
def lock_extensions(r, monkeypatch) -> list[int]:
    """The lock's remaining milliseconds at each extension, on a clock that moves
    LOCK_EXTEND_EVERY per reading: every step of the run extends the lock."""
    clock = [0.0]

    def tick() -> float:
        clock[0] += whos_online_cleanup.LOCK_EXTEND_EVERY
        return clock[0]

    monkeypatch.setattr(
        whos_online_cleanup,
        "time",
        SimpleNamespace(time=time.time, monotonic=tick, sleep=time.sleep),
    )
    extensions: list[int] = []
    extend = Lock.extend

    def counted(lock: Lock, additional_time: float, replace_ttl: bool = False) -> bool:
        extensions.append(r.pttl(LOCK))
        return extend(lock, additional_time, replace_ttl=replace_ttl)

    monkeypatch.setattr(Lock, "extend", counted)
    return extensions


def test_the_lock_is_extended_between_chunks(backend, r, monkeypatch, lock_extensions):
    monkeypatch.setattr(cleanup, "PRUNE_CHUNK_SIZE", 2)
    r.zadd("{whos_online}:users", {str(pk): stale() for pk in range(1, 7)})

    run()

    # Users 2+2+2+0, then the other sets and the step before the counters.
    assert len(lock_extensions) >= 4
    assert all(0 < ttl <= whos_online_cleanup.LOCK_TIMEOUT * 1000 for ttl in lock_extensions)
    assert r.exists(LOCK) == 0


def test_the_lock_is_extended_between_pages_of_counters(backend, r, monkeypatch, lock_extensions):
    monkeypatch.setattr(counters, "CLEAN_PAGE_SIZE", 2)
    for number in range(6):
        api.update_counter(f"n{number}")

    run()

    # 6 counters at 7 precisions, 2 a page: 21 pages, each extending the lock.
    assert len(lock_extensions) >= 21
    assert r.exists(LOCK) == 0


# A flood of rooms: thousands of rooms in the index with nobody left in them.

FLOOD = 3000


def flood_run_output(out: str) -> list[str]:
    """The lines of a run that met nobody stale but the flood, the counters' line last."""
    lines = out.splitlines()
    assert re.fullmatch(rf"Removed nobody last seen before {WHEN}", lines[0])
    return lines[1:]


def test_a_flood_of_empty_rooms_is_cleaned_in_one_run_with_the_counters(
    backend, r, monkeypatch, lock_extensions
):
    monkeypatch.setattr(cleanup, "ROOMS_PAGE_SIZE", 50)
    flood_rooms(r, FLOOD, at=stale())
    whos_online.record_guest("192.0.2.1", room="topic:1")
    api.update_counter("downloads", now=time.time() - 1000)  # stale at precisions 1 and 5 s

    out, err = run()

    assert err == ""
    assert flood_run_output(out) == [
        f"Rooms: took nobody out, and deleted {FLOOD} rooms that had nobody left.",
        "Removed 2 counter samples at precisions 1 s, 5 s, 60 s, 300 s, 3600 s, 18000 s and "
        "86400 s.",
    ]
    assert [room.decode() for room in r.zrange("{whos_online}:rooms", 0, -1)] == ["topic:1"]
    assert sorted(key.decode() for key in r.scan_iter(match="*room*")) == [
        "{whos_online}:room:topic:1:guests",
        "{whos_online}:rooms",
        "{whos_online}:rooms:where",
    ]
    # About FLOOD / 50 pages of rooms, each followed by an extension of the lock, which never
    # lapsed; the lock is released at the end.
    assert len(lock_extensions) >= FLOOD / 50
    assert all(0 < ttl <= whos_online_cleanup.LOCK_TIMEOUT * 1000 for ttl in lock_extensions)
    assert r.exists(LOCK) == 0


def test_a_stop_signal_ends_a_flooded_run_between_two_pages(backend, r, monkeypatch):
    monkeypatch.setattr(cleanup, "ROOMS_PAGE_SIZE", 50)
    flood_rooms(r, FLOOD, at=stale())
    pages: list[cleanup.RoomsPage] = []
    prune_page = cleanup.prune_rooms_page

    def signal_during_the_third_page(*args: Any, **kwargs: Any) -> cleanup.RoomsPage:
        pages.append(prune_page(*args, **kwargs))
        if len(pages) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return pages[-1]

    monkeypatch.setattr(cleanup, "prune_rooms_page", signal_during_the_third_page)

    out, err = run()

    assert err == ""
    # The page under way was finished, and no other begun; the counters were left for next time.
    assert len(pages) == 3
    emptied = sum(page.emptied for page in pages)
    assert flood_run_output(out) == [
        f"Rooms: took nobody out, and deleted {emptied} rooms that had nobody left.",
        stopped_midway("SIGTERM"),
    ]
    assert 0 < emptied < FLOOD
    assert r.zcard("{whos_online}:rooms") == FLOOD - emptied
    assert r.exists(LOCK) == 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["real"], indirect=True)
def test_200_000_empty_rooms_are_cleaned_in_one_run_under_a_short_lock(backend, r, monkeypatch):
    """The whole flood, at the real page size, while the lock lives 1 s unless extended: a run
    that let it lapse would fail at its next extension, with the counters not cleaned."""
    monkeypatch.setattr(whos_online_cleanup, "LOCK_TIMEOUT", 1)
    monkeypatch.setattr(whos_online_cleanup, "LOCK_EXTEND_EVERY", 0.1)
    flood_rooms(r, 200_000, at=stale())
    api.update_counter("downloads", now=time.time() - 1000)

    out, err = run()

    assert err == ""
    assert flood_run_output(out) == [
        "Rooms: took nobody out, and deleted 200000 rooms that had nobody left.",
        "Removed 2 counter samples at precisions 1 s, 5 s, 60 s, 300 s, 3600 s, 18000 s and "
        "86400 s.",
    ]
    assert list(r.scan_iter(match="*room*")) == []
    assert r.exists(LOCK) == 0
