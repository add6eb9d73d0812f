from __future__ import annotations

import contextlib
import signal
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError
from django.utils.text import get_text_list
from redis.exceptions import LockError

from whos_online import api
from whos_online.backend import keyspace
from whos_online.backend.clients import REDIS_ERRORS, admin_client
from whos_online.config.settings import Config, get_config
from whos_online.store import cleanup, counters, snapshot
from whos_online.store.cleanup import count_stale

if TYPE_CHECKING:
    from argparse import ArgumentParser
    from collections.abc import Callable, Iterator
    from types import FrameType

    from redis.lock import Lock

    from whos_online.backend.clients import Client

#: Seconds the cleanup lock lives unless the run extends it, which it does between steps: a run
#: that dies without releasing it (SIGKILL, a lost machine) holds it this long at most.
LOCK_TIMEOUT = 10
#: Seconds between two extensions of the lock.
LOCK_EXTEND_EVERY = 2
#: The signals that stop the command cleanly, between two steps.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(Exception):
    """Raised between two steps once a stop signal has arrived."""


LABELS = {"users": "user", "hidden": "hidden user", "guests": "guest", "bots": "bot"}


class Command(BaseCommand):
    help = (
        "Remove people last seen before WHOS_ONLINE['WINDOW'] from Redis and drop counter samples "
        "beyond COUNTER_SAMPLES. Run it from cron every minute."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Report what would be removed, and remove nothing.",
        )
        parser.add_argument(
            "--every",
            type=float,
            metavar="SECONDS",
            help="Keep running and clean up every SECONDS seconds, instead of once (for when "
            "cron is not available). Redis errors are reported and retried next time.",
        )
        parser.add_argument(
            "--reset-peak",
            action="store_true",
            help="Forget the all-time peak of people online, and do nothing else. The next "
            "recorded visit starts a new peak.",
        )

    def handle(
        self,
        *args: str,
        dry_run: bool,
        every: float | None,
        reset_peak: bool,
        verbosity: int,
        **options: Any,
    ) -> None:
        self.verbosity = verbosity
        if reset_peak:
            self.reset_peak(dry_run=dry_run)
            return
        if every is not None and every <= 0:
            raise CommandError("--every takes a positive number of seconds.")
        self.stopping = threading.Event()
        self.stopped_by = ""
        midway = False
        with self.stop_signals():
            try:
                if every is None:
                    self.run_once(dry_run=dry_run)
                else:
                    self.run_every(every, dry_run=dry_run)
            except Stopped:
                midway = True
        if midway:
            self.log(
                f"Stopped by {self.stopped_by} before the run ended: the lines above say what it "
                "removed; the next run removes the rest.",
                level=1,
            )
        elif self.stopping.is_set():
            self.log(f"Stopped by {self.stopped_by}.", level=1)

    @contextlib.contextmanager
    def stop_signals(self) -> Iterator[None]:
        """While the block runs, SIGTERM and SIGINT ask the command to stop between two steps:
        what a chunk removed is reported (``users_went_offline``) and the lock released before
        it exits, with status 0. Signal handlers can only be set from the main thread; elsewhere
        (``call_command`` from a thread) the signals keep their handlers."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def stop(signum: int, frame: FrameType | None) -> None:
            self.stopped_by = signal.Signals(signum).name
            self.stopping.set()

        previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def run_every(self, every: float, *, dry_run: bool) -> None:
        self.log(f"Cleaning up every {every:g} s; stop with Ctrl-C or SIGTERM.", level=1)
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self.run_once(dry_run=dry_run)
            except CommandError as error:
                self.stderr.write(str(error))
            self.pause(max(every - (time.monotonic() - started), 0))

    def pause(self, seconds: float) -> None:
        """Wait between two runs; a stop signal ends the wait at once."""
        self.stopping.wait(seconds)

    def run_once(self, *, dry_run: bool, now: float | None = None) -> None:
        config = get_config()
        now = time.time() if now is None else now
        client = admin_client()
        try:
            if dry_run:
                self.report(count_stale(client, config, now=now), now, "Would remove")
                people, emptied = cleanup.count_rooms(client, config, now=now)
                self.report_rooms(people, emptied, dry_run=True)
                self.clean_counters(client, config, now=now, dry_run=True)
                return
            lock = client.lock(
                keyspace.key(config, "cleanup-lock"), timeout=LOCK_TIMEOUT, blocking=False
            )
            if not lock.acquire():
                self.stderr.write(
                    "Another whos_online_cleanup holds the lock; this run did nothing."
                )
                return
            between = self.between_chunks(lock)
            try:
                # Each step's line is written when it ends, or when a stop signal ends it midway:
                # what it removed so far is in the log either way.
                removed: dict[str, int] = {}
                with self.reporting(lambda: self.report(removed, now, "Removed")):
                    reported = api.reporter(api.prune)
                    cleanup.prune_with(
                        client,
                        config,
                        now=now,
                        on_gone=reported,
                        between_chunks=between,
                        into=removed,
                    )
                left: dict[str, int] = {}
                with self.reporting(lambda: self.report_old_layouts(left, now)):
                    cleanup.prune_old_layouts(
                        client, config, now=now, between_chunks=between, into=left
                    )
                rooms = cleanup.RoomsPruned()
                with self.reporting(
                    lambda: self.report_rooms(rooms.people, rooms.emptied, dry_run=False)
                ):
                    cleanup.prune_rooms(client, config, now=now, between_chunks=between, into=rooms)
                found = cleanup.sample_counts(client, config, now=now)
                if found is not None:
                    users = _plural(found.visible + found.hidden, "user")
                    self.log(
                        f"Sampled {users}, {_plural(found.guests, 'guest')} and "
                        f"{_plural(found.bots, 'bot')} online over "
                        f"{_plural(config.shards, 'shard')}.",
                        level=2,
                    )
                between()
                self.clean_counters(client, config, now=now, dry_run=False, between=between)
            finally:
                try:
                    lock.release()
                except LockError:
                    # It expired during a very long run; another run may own it now.
                    self.log("The cleanup lock had expired before the run ended.", level=1)
        except REDIS_ERRORS as error:
            msg = f"Cannot clean up: Redis at {config.redis_target} failed: {error}"
            raise CommandError(msg) from error

    def between_chunks(self, lock: Lock) -> Callable[[], None]:
        """What runs after each step (a chunk of members, a page of rooms or of counters, each
        a few milliseconds of Redis time): stop if a signal asked to, else keep the lock alive.

        The lock is extended by the clock, not by what the steps removed: a walk over thousands
        of empty rooms removes no one for seconds, and a lock left to expire meanwhile would let
        a second run start alongside and fail this one at its next extension."""
        extended = time.monotonic()

        def between() -> None:
            nonlocal extended
            if self.stopping.is_set():
                raise Stopped
            if time.monotonic() - extended >= LOCK_EXTEND_EVERY:
                lock.extend(LOCK_TIMEOUT, replace_ttl=True)
                extended = time.monotonic()

        return between

    def clean_counters(
        self,
        client: Client,
        config: Config,
        *,
        now: float,
        dry_run: bool,
        between: Callable[[], None] | None = None,
    ) -> None:
        """Clean the precisions that are due: each every max(precision, 60) seconds."""
        due = counters.cleaning_due(client, config, now=now)
        cleaned = counters.Cleaned()
        with self.reporting(lambda: self.report_counters(due, cleaned, dry_run=dry_run)):
            counters.clean(
                client,
                config,
                now=now,
                precisions=due,
                dry_run=dry_run,
                between_pages=between,
                into=cleaned,
            )
            if not dry_run:
                counters.mark_cleaned(client, config, due, now)

    def report_counters(self, due: list[int], cleaned: counters.Cleaned, *, dry_run: bool) -> None:
        if not due:
            line = "No counter precision was due for cleaning."
        else:
            verb = "Would remove" if dry_run else "Removed"
            where = get_text_list([f"{precision} s" for precision in due], "and")
            removed = cleaned.samples - cleaned.dropped_samples
            line = f"{verb} {_plural(removed, 'counter sample')} at precisions {where}."
        if cleaned.counters_dropped:
            verb = "Would drop" if dry_run else "Dropped"
            line += (
                f" {verb} {_plural(cleaned.counters_dropped, 'counter')} "
                f"({_plural(cleaned.dropped_samples, 'sample')}) of precisions no longer in "
                "COUNTER_PRECISIONS."
            )
        self.log(self.style.SUCCESS(line), level=1)

    def reset_peak(self, *, dry_run: bool) -> None:
        config = get_config()
        client = admin_client()
        try:
            people, at = snapshot.read_peak(client, config)
            if not dry_run:
                snapshot.reset_peak(client, config)
        except REDIS_ERRORS as error:
            msg = f"Cannot reset the peak: Redis at {config.redis_target} failed: {error}"
            raise CommandError(msg) from error
        was = (
            f"{people} on {datetime.fromtimestamp(at, tz=timezone.utc):%Y-%m-%d %H:%M} UTC"
            if people and at is not None
            else "none recorded"
        )
        verb = "Would reset" if dry_run else "Reset"
        self.log(self.style.SUCCESS(f"{verb} the peak of people online (was {was})."), level=1)

    def report(self, counts: dict[str, int], now: float, verb: str) -> None:
        cutoff = datetime.fromtimestamp(now - get_config().window, tz=timezone.utc)
        parts = [
            f"{count} {LABELS[kind]}{'' if count == 1 else 's'}"
            for kind, count in counts.items()
            if count
        ]
        what = get_text_list(parts, "and") if parts else "nobody"
        line = f"{verb} {what} last seen before {cutoff:%Y-%m-%d %H:%M:%S} UTC."
        self.log(self.style.SUCCESS(line), level=1)

    def report_old_layouts(self, left: dict[str, int], now: float) -> None:
        """The line of the members left in layouts of another ``SHARDS``, when there were any."""
        if any(left.values()):
            self.report(left, now, "Removed from layouts of another SHARDS")

    def report_rooms(self, people: int, emptied: int, *, dry_run: bool) -> None:
        """The rooms' line: the people gone for over the window taken out of rooms, and the rooms
        deleted because nobody was left in them (whenever they emptied)."""
        who = _plural(people, "person", "people") if people else "nobody"
        rooms = _plural(emptied, "room") if emptied else "no room"
        if dry_run:
            line = f"Rooms: would take {who} out, and delete {rooms} that would have nobody left."
        else:
            line = f"Rooms: took {who} out, and deleted {rooms} that had nobody left."
        self.log(self.style.SUCCESS(line), level=1)

    @contextlib.contextmanager
    def reporting(self, report: Callable[[], object]) -> Iterator[None]:
        """Run ``report`` once the step in the block has ended, or a stop signal has ended it
        midway (``Stopped``): the log then says what the step removed, all of it or so far."""
        try:
            yield
        except Stopped:
            report()
            raise
        report()

    def log(self, msg: str, level: int = 2) -> None:
        if self.verbosity >= level:
            self.stdout.write(msg)


def _plural(count: int, noun: str, nouns: str = "") -> str:
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"
