from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError
from django.utils.text import get_text_list
from redis.exceptions import LockError

from whos_online import api, store
from whos_online.conf import get_config
from whos_online.connection import REDIS_ERRORS, admin_client

if TYPE_CHECKING:
    from argparse import ArgumentParser

#: Seconds the cleanup lock lives if a run dies without releasing it.
LOCK_TIMEOUT = 120

LABELS = {"users": "user", "hidden": "hidden user", "guests": "guest", "bots": "bot"}


class Command(BaseCommand):
    help = "Remove people last seen before WHOS_ONLINE['WINDOW'] from Redis. Run it from cron."

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

    def handle(
        self,
        *args: str,
        dry_run: bool,
        every: float | None,
        verbosity: int,
        **options: Any,
    ) -> None:
        self.verbosity = verbosity
        if every is None:
            self.run_once(dry_run=dry_run)
            return
        if every <= 0:
            raise CommandError("--every takes a positive number of seconds.")
        self.log(f"Cleaning up every {every:g} s; stop with Ctrl-C.", level=1)
        try:
            while True:
                started = time.monotonic()
                try:
                    self.run_once(dry_run=dry_run)
                except CommandError as error:
                    self.stderr.write(str(error))
                time.sleep(max(every - (time.monotonic() - started), 0))
        except KeyboardInterrupt:
            self.log("Stopped.", level=1)

    def run_once(self, *, dry_run: bool, now: float | None = None) -> None:
        config = get_config()
        now = time.time() if now is None else now
        client = admin_client()
        try:
            if dry_run:
                self.report(store.count_stale(client, config, now=now), now, "Would remove")
                return
            lock = client.lock(
                store.key(config, "cleanup-lock"), timeout=LOCK_TIMEOUT, blocking=False
            )
            if not lock.acquire():
                self.stderr.write(
                    "Another whos_online_cleanup holds the lock; this run did nothing."
                )
                return
            try:
                removed = api.prune_with(client, config, now=now)
            finally:
                try:
                    lock.release()
                except LockError:
                    # It expired during a very long run; another run may own it now.
                    self.log("The cleanup lock had expired before the run ended.", level=1)
        except REDIS_ERRORS as error:
            msg = f"Cannot clean up: Redis at {config.redis_target} failed: {error}"
            raise CommandError(msg) from error
        self.report(removed, now, "Removed")

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

    def log(self, msg: str, level: int = 2) -> None:
        if self.verbosity >= level:
            self.stdout.write(msg)
