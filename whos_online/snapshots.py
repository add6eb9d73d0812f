"""The snapshot a process read last, shown again for ``SNAPSHOT_MAX_AGE`` seconds.

With ``{% whos_online %}`` on every page, reading Redis for every render makes the read path the
limit of one Redis long before recording is. Keeping the last snapshot for a couple of seconds
makes the read load grow with the number of processes instead of the number of page views.

The person who was just recorded still sees the list with themselves in it on their next page,
whichever process serves it: when they were not online before, their throttle cookie says so and
in which second they were recorded, the middleware notes it on the request, and a kept snapshot
read before that second is not used for them. Someone online already is in the kept snapshot's
counts anyway, so recording them again (most recorded visits) costs no read.

Dropping the kept snapshot whenever a process records a visit would do the same for that process
only, and at scale, where every process records visits all the time, it would make nearly every
render read Redis again. A logout or an erasure this process handles does drop it, so that the
person gone is not shown to the next pages it serves.

Only the template tags and the JSON view use it; the Python API and the dashboard read afresh.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Final

from whos_online.store import Snapshot

if TYPE_CHECKING:
    from django.http import HttpRequest

#: The attribute on which the middleware notes when a throttled browser was recorded.
RECORDED_AT: Final = "_whos_online_recorded_at"
#: The attribute on which the template tags keep the snapshot of the page they render.
ON_REQUEST: Final = "_whos_online_snapshot"


def note_recorded(request: HttpRequest, second: int) -> None:
    setattr(request, RECORDED_AT, second)


def recorded_at(request: HttpRequest | None) -> int | None:
    """The Unix second in which the browser making ``request`` was last recorded, if known."""
    second = getattr(request, RECORDED_AT, None)
    return second if isinstance(second, int) else None


def of_request(request: HttpRequest | None) -> Snapshot | None:
    """The snapshot an earlier tag of the same page (or the widget view) read, if any."""
    kept = getattr(request, ON_REQUEST, None)
    return kept if isinstance(kept, Snapshot) else None


def keep_on_request(request: HttpRequest, found: Snapshot) -> None:
    """Let every tag rendered for ``request`` show ``found`` instead of reading Redis again."""
    setattr(request, ON_REQUEST, found)


class SnapshotCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: When the kept snapshot was read (monotonic, for its age; Unix time, to compare with
        #: when a browser was recorded), and the snapshot.
        self._kept: tuple[float, float, Snapshot] | None = None

    def get(
        self, limit: int | None, max_age: float, *, fresh_after: int | None = None
    ) -> Snapshot | None:
        """The kept snapshot, cut to ``limit`` names, if it is younger than ``max_age`` seconds,
        was read with at least ``limit`` names, and was read in or after the second
        ``fresh_after`` (when the viewer was recorded: the cookie knows no finer time, and a read
        later in that same second must count, or every page of that second would read again);
        None otherwise."""
        kept = self._kept
        if kept is None or max_age <= 0:
            return None
        read_at, read_at_unix, found = kept
        if time.monotonic() - read_at >= max_age or not found.answers(limit):
            return None
        if fresh_after is not None and read_at_unix < fresh_after:
            return None
        return found.cut(limit)

    def put(self, found: Snapshot) -> None:
        with self._lock:
            self._kept = (time.monotonic(), time.time(), found)

    def invalidate(self) -> None:
        with self._lock:
            self._kept = None


cache = SnapshotCache()


def reset() -> None:
    cache.invalidate()
