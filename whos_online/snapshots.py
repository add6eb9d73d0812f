"""The snapshot a process read last, shown again for ``SNAPSHOT_MAX_AGE`` seconds.

With ``{% whos_online %}`` on every page, reading Redis for every render makes the read path the
limit of one Redis long before recording is. Keeping the last snapshot for a couple of seconds
makes the read load grow with the number of processes instead of the number of page views. A
visit that this process records (or a user it removes) drops the kept snapshot, so that the
person who was just recorded sees the list with themselves in it on their next page.

Only the template tags and the JSON view use it; the Python API and the dashboard read afresh.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from whos_online.store import Snapshot


class SnapshotCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: tuple[float, Snapshot] | None = None

    def get(self, limit: int | None, max_age: float, now: float | None = None) -> Snapshot | None:
        """The kept snapshot, cut to ``limit`` names, if it is younger than ``max_age`` seconds
        and was read with at least ``limit`` names; None otherwise."""
        kept = self._kept
        if kept is None or max_age <= 0:
            return None
        read_at, found = kept
        now = time.monotonic() if now is None else now
        if now - read_at >= max_age or not found.answers(limit):
            return None
        return found.cut(limit)

    def put(self, found: Snapshot, now: float | None = None) -> None:
        with self._lock:
            self._kept = (time.monotonic() if now is None else now, found)

    def invalidate(self) -> None:
        with self._lock:
            self._kept = None


cache = SnapshotCache()


def reset() -> None:
    cache.invalidate()
