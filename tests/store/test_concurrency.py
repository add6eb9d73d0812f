"""Cleanups at the same time, a cleanup racing live writes, and many writers at once.

Only a real redis-server can show a race: fakeredis runs every command and script in the calling
thread under a lock of its own. So these tests use the session's redis-server, with real threads
sharing the app's clients, as a threaded WSGI server would.
"""

from __future__ import annotations

import re
import threading
import time
from io import StringIO
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

import whos_online
from tests.support.helpers import JOIN_TIMEOUT, configure, members, run_threads
from whos_online.backend.clients import admin_client
from whos_online.config.settings import get_config
from whos_online.signals import users_went_offline
from whos_online.store import cleanup
from whos_online.store.cleanup import PRUNE_CHUNK_SIZE, prune_chunk

if TYPE_CHECKING:
    from collections.abc import Callable


WINDOW = 600
LOCK = "{whos_online}:cleanup-lock"
LOCKED = "Another whos_online_cleanup holds the lock; this run did nothing.\n"

pytestmark = pytest.mark.parametrize("backend", ["real"], indirect=True)


def run_cleanup() -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("whos_online_cleanup", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def removed_counts(out: str) -> dict[str, int]:
    """How many of each kind a run's first line says it removed ("Removed 2 users and …")."""
    first = out.splitlines()[0] if out else ""
    return {kind: int(count) for count, kind in re.findall(r"(\d+) (user|guest)s?\b", first)}


def test_a_second_cleanup_reports_the_lock_and_does_nothing(r, offline_ids):
    stale, now = time.time() - WINDOW - 100, time.time()
    r.zadd("{whos_online}:users", {"1": stale, "2": stale, "3": now})
    r.zadd("{whos_online}:guests", {"g1": stale, "g2": stale, "g3": stale, "fresh": now})
    inside, release = threading.Event(), threading.Event()

    def pause_the_first_run(sender: object, **kwargs: Any) -> None:
        # The first run holds the lock here, between pruning the users and the guests.
        if threading.current_thread().name == "first":
            inside.set()
            release.wait(JOIN_TIMEOUT)

    users_went_offline.connect(pause_the_first_run, weak=False, dispatch_uid="tests.pause")
    outcome: dict[str, tuple[str, str]] = {}
    first = threading.Thread(target=lambda: outcome.update(first=run_cleanup()), name="first")
    try:
        first.start()
        assert inside.wait(JOIN_TIMEOUT)
        token = r.get(LOCK)
        assert token is not None

        others = run_threads([run_cleanup] * 4)

        # Nothing moved while the first run was paused: the others pruned no guest.
        assert set(members(r, "guests")) == {"g1", "g2", "g3", "fresh"}
        assert r.get(LOCK) == token
    finally:
        release.set()
        first.join(JOIN_TIMEOUT)
        users_went_offline.disconnect(dispatch_uid="tests.pause")

    assert others == [("", LOCKED)] * 4
    out, err = outcome["first"]
    assert err == ""
    assert removed_counts(out) == {"user": 2, "guest": 3}
    assert set(members(r, "users")) == {"3"}
    assert set(members(r, "guests")) == {"fresh"}
    assert r.exists(LOCK) == 0
    assert offline_ids == [[1, 2]]


def test_many_cleanups_at_once_remove_each_stale_member_exactly_once(r, offline_ids, monkeypatch):
    monkeypatch.setattr(cleanup, "PRUNE_CHUNK_SIZE", 50)
    stale, now = time.time() - WINDOW - 100, time.time()
    r.zadd("{whos_online}:users", {str(pk): stale for pk in range(1, 1001)})
    r.zadd("{whos_online}:users", {str(pk): now for pk in range(1001, 1101)})
    r.zadd("{whos_online}:guests", {f"g{n}": stale for n in range(3000)})
    r.zadd("{whos_online}:guests", {f"fresh{n}": now for n in range(100)})

    results = run_threads([run_cleanup] * 6)

    outputs = [out for out, _ in results]
    errors = [err for _, err in results]
    assert set(errors) <= {"", LOCKED}
    assert all((out == "") == (err == LOCKED) for out, err in zip(outputs, errors, strict=True))
    totals = {"user": 0, "guest": 0}
    for out in outputs:
        for kind, count in removed_counts(out).items():
            totals[kind] += count
    assert totals == {"user": 1000, "guest": 3000}
    removed_ids = [pk for ids in offline_ids for pk in ids]
    assert sorted(removed_ids) == list(range(1, 1001))
    assert set(members(r, "users")) == {str(pk) for pk in range(1001, 1101)}
    assert set(members(r, "guests")) == {f"fresh{n}" for n in range(100)}
    assert r.exists(LOCK) == 0


def _user(pk: int) -> User:
    # Recording needs a pk and a name, not a database row: threads stay off the test database.
    return User(pk=pk, username=f"user-{pk}-ñ✓")


class Race:
    """Writers recording fresh visits while a pruner removes stale members, chunk by chunk."""

    writers = 4
    new_per_writer = 150
    refreshed_per_writer = 100

    def __init__(self) -> None:
        self.stale_guests = [f"10.1.{n // 256}.{n % 256}" for n in range(8000)]
        self.stale_users = [str(pk) for pk in range(1, 2001)]
        refreshed = range(self.writers * self.refreshed_per_writer)
        self.refreshed_guests = {self.stale_guests[index * 7] for index in refreshed}
        self.refreshed_users = {self.stale_users[index] for index in refreshed}
        self.new_guests: set[str] = set()
        self.new_users: set[str] = set()
        self.removed: dict[str, list[str]] = {"guests": [], "users": []}
        self.total_writes = self.writers * (self.new_per_writer + self.refreshed_per_writer) * 2
        self.writes_done = 0
        self.overlapping_chunks = 0
        self._lock = threading.Lock()
        self._finished = threading.Event()
        # The race is made to happen rather than hoped for: the pruner starts once a write has
        # landed, and the writers wait half-way until it has removed a chunk.
        self._writing = threading.Event()
        self._pruned_midway = threading.Event()

    def write(self, writer: int) -> Callable[[], None]:
        def run() -> None:
            for n in range(self.new_per_writer):
                guest, pk = f"10.2.{writer}.{n}", 10_000 + writer * 1000 + n
                assert whos_online.record_guest(guest, now=time.time()) is True
                assert whos_online.record_user(_user(pk), now=time.time()) is True
                with self._lock:
                    self.new_guests.add(guest)
                    self.new_users.add(str(pk))
                    self.writes_done += 2
                self._writing.set()
            self._pruned_midway.wait(JOIN_TIMEOUT)
            for n in range(self.refreshed_per_writer):
                index = writer * self.refreshed_per_writer + n
                guest, pk = self.stale_guests[index * 7], int(self.stale_users[index])
                assert whos_online.record_guest(guest, now=time.time()) is True
                assert whos_online.record_user(_user(pk), now=time.time()) is True
                with self._lock:
                    self.writes_done += 2

        return run

    def write_all(self) -> None:
        try:
            run_threads([self.write(n) for n in range(self.writers)])
        finally:
            self._finished.set()

    def prune(self) -> None:
        """Prune with the clock of the moment, over and over, then once more to the end."""
        client, config = admin_client(), get_config()
        self._writing.wait(JOIN_TIMEOUT)
        while True:
            last_round = self._finished.is_set()
            emptied = True
            for kind in ("guests", "users"):
                chunk = prune_chunk(client, config, kind, now=time.time())
                self.removed[kind] += chunk
                emptied = emptied and len(chunk) < PRUNE_CHUNK_SIZE
                if chunk and 0 < self.writes_done < self.total_writes:
                    self.overlapping_chunks += 1
                    self._pruned_midway.set()
            if last_round and emptied:
                return


def test_cleanup_racing_live_writes_never_removes_a_fresh_member(r, settings, monkeypatch):
    # Raw addresses as members keep a refreshed guest's member the same across midnight.
    configure(settings, GUEST_IDENTITY="ip")
    monkeypatch.setattr(cleanup, "PRUNE_CHUNK_SIZE", 25)
    race = Race()
    long_ago = time.time() - WINDOW - 100
    r.zadd("{whos_online}:guests", dict.fromkeys(race.stale_guests, long_ago))
    r.zadd("{whos_online}:users", dict.fromkeys(race.stale_users, long_ago))

    run_threads([race.write_all, race.prune])

    # The race happened: chunks were removed while the writers were half-way.
    assert race.overlapping_chunks > 0
    # Only members that were stale when their chunk was read were removed, each once…
    for kind, stale in (("guests", race.stale_guests), ("users", race.stale_users)):
        assert set(race.removed[kind]) <= set(stale)
        assert len(race.removed[kind]) == len(set(race.removed[kind]))
    # …every stale member that was not seen again is gone, and every fresh one is there.
    assert set(members(r, "guests")) == race.new_guests | race.refreshed_guests
    assert set(members(r, "users")) == race.new_users | race.refreshed_users
    assert set(race.removed["guests"]) >= set(race.stale_guests) - race.refreshed_guests
    assert set(race.removed["users"]) >= set(race.stale_users) - race.refreshed_users
    counts = whos_online.online_counts()
    assert counts.users == len(race.new_users) + len(race.refreshed_users) == 1000
    assert counts.guests == len(race.new_guests) + len(race.refreshed_guests) == 1000
    cutoff = time.time() - WINDOW
    for kind in ("guests", "users"):
        assert r.zcount(f"{{whos_online}}:{kind}", "-inf", f"({cutoff}") == 0


def test_many_threads_recording_the_same_and_different_users(r):
    threads_count, shared, own, rounds = 8, 10, 25, 5
    shared_users = [_user(pk) for pk in range(1, shared + 1)]

    def visit(thread: int) -> Callable[[], None]:
        mine = [_user(1000 * (thread + 1) + n) for n in range(own)]

        def run() -> None:
            for _ in range(rounds):
                for user in [*shared_users, *mine]:
                    assert whos_online.record_user(user, now=time.time()) is True

        return run

    run_threads([visit(n) for n in range(threads_count)])

    total = shared + threads_count * own
    pks = [str(pk) for pk in range(1, shared + 1)] + [
        str(1000 * (t + 1) + n) for t in range(threads_count) for n in range(own)
    ]
    assert set(members(r, "users")) == set(pks)
    assert whos_online.online_counts() == (total, 0, 0, total)
    for pk in pks:
        record = {
            k.decode(): v.decode() for k, v in r.hgetall(f"{{whos_online}}:user:{pk}").items()
        }
        assert record == {"name": f"user-{pk}-ñ✓", "url": "", "seen": record["seen"]}
        # Score and "seen" come from one script run: whichever ran last set both.
        assert r.zscore("{whos_online}:users", pk) == float(record["seen"])
        assert r.ttl(f"{{whos_online}}:user:{pk}") > 0
    assert whos_online.peak().people == total
    assert max(count for _, count in whos_online.get_counter("online:users", 86400)) == total
