"""Writes a process makes with its next flush rather than in a request: a logout's.

A logout takes its user off the online list at once, but its request should not wait on Redis
any more than a recorded visit does. When the logout's visitor goes on as a guest, the guest's
visit carries the user's removal in the queue (``recording``). What does not fit an entry of a
batch (a logout with no guest to record, the layouts of another ``SHARDS`` that the site left)
is handed to the flusher as a job: its thread runs the jobs at the start of its next flush, in
the order they came and before the queue, which holds what came after them (a login in the same
millisecond as the logout then stands). Those that failed, and what followed them, wait for the
next flush. A read of the process runs them first, so that its next page does not show the user
who left.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from whos_online.backend import connection

if TYPE_CHECKING:
    from collections.abc import Callable

    from whos_online.backend import keyspace
    from whos_online.backend.connection import Client
    from whos_online.config.settings import Config

logger = logging.getLogger("whos_online")

#: Jobs a process holds at most while Redis cannot be written; beyond, the newest are dropped
#: (a logout then ends when the window does).
MOST_WAITING: Final = 10_000


@dataclass(frozen=True)
class Job:
    """A write to make with the next flush, behind the breaker of ``shard`` (None for the base
    shard's)."""

    write: Callable[[Client, Config], object]
    shard: keyspace.Shard | None = None

    @property
    def tag(self) -> str:
        return "" if self.shard is None else self.shard.tag


class FlushJobs:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[Job] = []
        self._dropping = False

    def add(self, job: Job) -> bool:
        """Hold ``job`` for the next flush; False when too many wait already (it is dropped)."""
        with self._lock:
            if len(self._waiting) >= MOST_WAITING:
                if not self._dropping:
                    self._dropping = True
                    logger.warning(
                        "whos_online holds %d logouts that Redis has not taken; further ones "
                        "are dropped (their users stay listed until the window ends)",
                        MOST_WAITING,
                    )
                return False
            self._waiting.append(job)
            return True

    def run(self) -> frozenset[str]:
        """Run the jobs held, in order; those from the first that fails on are kept, ahead of
        any added meanwhile. Returns the tag of the shard that failed (none if all ran)."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for index, job in enumerate(waiting):
            if not connection.call(False, _done(job), shard=job.shard, writes=True):
                with self._lock:
                    self._waiting[:0] = waiting[index:]
                return frozenset({job.tag})
        self._dropping = False
        return frozenset()

    def __len__(self) -> int:
        return len(self._waiting)


def _done(job: Job) -> Callable[[Client, Config], bool]:
    def write(client: Client, config: Config) -> bool:
        job.write(client, config)
        return True

    return write
