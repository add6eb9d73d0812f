"""Page hits, counted in the process and written to Redis in batches.

Counting a hit must not cost a throttled request its Redis-free path, so hits go into a buffer of
counts per second. The buffer rides along with the next recorded visit (the same round trip), and
otherwise a timer writes it at most ``FLUSH_INTERVAL`` seconds after it stopped being empty. A
process that exits writes what it holds (``atexit``); a crash loses at most that last second.

Counts are kept per second so that each hit lands in the slice it happened in at every precision,
however late it is written.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

#: The counter page hits are kept in.
COUNTER_NAME: Final = "hits"

#: Longest a hit waits in the buffer while Redis is reachable.
FLUSH_INTERVAL: Final = 1.0

#: Distinct seconds kept while Redis cannot be written; older ones are folded into the oldest kept
#: second, so that an outage of any length keeps the total exact and the memory bounded.
MAX_BUFFERED_SECONDS: Final = 3600


class HitBuffer:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[int, int] = {}

    def add(self, now: float, count: int = 1) -> None:
        second = int(now)
        with self._lock:
            self._counts[second] = self._counts.get(second, 0) + count

    def take(self) -> dict[int, int]:
        """Empty the buffer, returning what it held; give it back if the write fails."""
        with self._lock:
            taken, self._counts = self._counts, {}
        return taken

    def give_back(self, counts: Mapping[int, int]) -> None:
        with self._lock:
            for second, count in counts.items():
                self._counts[second] = self._counts.get(second, 0) + count
            if len(self._counts) > MAX_BUFFERED_SECONDS:
                seconds = sorted(self._counts)
                cut = len(seconds) - MAX_BUFFERED_SECONDS
                folded = sum(self._counts.pop(second) for second in seconds[:cut])
                self._counts[seconds[cut]] += folded

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())


class FlushTimer:
    """Runs a flush ``FLUSH_INTERVAL`` seconds after it is asked to, at most one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: The timer still to fire, if any; cleared when it fires, so that a new one can start.
        self._timer: threading.Timer | None = None
        #: The last timer started, kept after it fires so that ``join`` can wait for its flush.
        self._last: threading.Timer | None = None

    @property
    def pending(self) -> bool:
        return self._timer is not None

    def schedule(self, flush: Callable[[], object], delay: float = FLUSH_INTERVAL) -> None:
        if self.pending:
            return  # Checked again under the lock; this read spares the common case the lock.
        with self._lock:
            if self._timer is not None:
                return
            timer = threading.Timer(delay, self._fire, args=(flush,))
            timer.daemon = True
            self._timer = self._last = timer
            timer.start()

    def _fire(self, flush: Callable[[], object]) -> None:
        with self._lock:
            self._timer = None
        flush()

    def cancel(self) -> None:
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def join(self, timeout: float | None = None) -> None:
        """Wait for a scheduled flush to finish (for tests and shutdown)."""
        timer = self._last
        if timer is not None:
            timer.join(timeout)


buffer = HitBuffer()
timer = FlushTimer()


def reset() -> None:
    """Drop buffered hits and any pending flush (for tests)."""
    timer.cancel()
    _start_afresh()


def _start_afresh() -> None:
    # After a fork, only this rebinding is safe: the parent's locks may be held by threads that
    # did not come along. The child's copy of the parent's hits is dropped, since the parent
    # writes them itself, and so is the timer, whose thread did not survive the fork.
    global buffer, timer  # noqa: PLW0603
    buffer = HitBuffer()
    timer = FlushTimer()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_start_afresh)
