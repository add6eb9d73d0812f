"""Page hits, counted in the process and written to Redis in batches, each exactly once.

Counting a hit must not cost a throttled request its Redis-free path, so hits go into a buffer of
counts per second, which the process's flusher writes with the visits it queued
(``whos_online.flushing.flusher``): within ``FLUSH_INTERVAL`` of the site's settings, or, when that
is 0 (each recorded request writing its own visit, the buffer riding along), within ``LONGEST_WAIT``
seconds of a throttled request. A process that exits normally writes what it holds, and one that is
killed loses what it held (see ``flushing``).

Counts are kept per second so that each hit lands in the slice it happened in at every precision,
however late it is written.

A write that times out may still have been carried out by Redis. So what is taken from the buffer
becomes a *batch* with a number: the process's token and a sequence number. The script that adds
a batch remembers, per process token, the highest number it added, and skips a batch it has
added already. A batch whose write failed is kept as it is and sent again, with its number,
before anything newer: hits counted meanwhile wait in the buffer. So a batch is added once,
whether its first write was lost on the way there or on the way back.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from typing import Final

from django.dispatch import receiver

from whos_online.config.process import PerProcess
from whos_online.config.settings import config_changed

#: The counter page hits are kept in.
COUNTER_NAME: Final = "hits"

#: Longest a hit waits in the buffer while Redis is reachable, with ``FLUSH_INTERVAL`` 0.
LONGEST_WAIT: Final = 1.0

#: Distinct seconds kept while Redis cannot be written; older ones are folded into the oldest kept
#: second, so that an outage of any length keeps the total exact and the memory bounded.
MAX_BUFFERED_SECONDS: Final = 3600


@dataclass
class Batch:
    """Hits on their way to Redis: ``token`` and ``number`` name the batch, once and for all."""

    token: str
    number: int
    counts: dict[int, int]

    def total(self) -> int:
        return sum(self.counts.values())


class HitBuffer:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[int, int] = {}
        #: This process's name for its batches; a forked child gets a buffer, and a token, of
        #: its own (see ``buffer``).
        self.token = secrets.token_hex(8)
        self._numbered = 0
        #: The batch sent last, until it is known to be added.
        self._pending: Batch | None = None
        self._in_flight = False

    def add(self, now: float, count: int = 1) -> None:
        second = int(now)
        with self._lock:
            self._counts[second] = self._counts.get(second, 0) + count

    def take(self) -> Batch | None:
        """The batch to write now: the one whose write failed, else what the buffer holds; None
        when there is nothing, or when another thread is writing a batch (one at a time, so
        that a batch that failed is never overtaken by a newer one). Hand it to ``settle``."""
        with self._lock:
            if self._in_flight:
                return None
            if self._pending is None:
                if not self._counts:
                    return None
                self._numbered += 1
                self._pending = Batch(self.token, self._numbered, self._counts)
                self._counts = {}
            self._in_flight = True
            return self._pending

    def settle(self, batch: Batch, *, added: bool) -> None:
        """Say how the write of ``batch`` (from ``take``) went: added (or found added already)
        by Redis, or failed, in which case it is sent again, as it is, next time."""
        with self._lock:
            self._in_flight = False
            if added:
                if self._pending is batch:
                    self._pending = None
                return
            _fold(batch.counts)
            _fold(self._counts)

    @property
    def numbered(self) -> int:
        """How many batches this process has made so far."""
        return self._numbered

    def total(self) -> int:
        with self._lock:
            pending = self._pending.total() if self._pending is not None else 0
            return pending + sum(self._counts.values())

    def holds(self) -> bool:
        """Whether the buffer holds hits, counted or on their way, or a thread is changing it
        now, read without the lock: for a signal handler, which may have stopped its holder."""
        return bool(self._counts) or self._pending is not None or self._lock.locked()


def _fold(counts: dict[int, int]) -> None:
    """Keep at most MAX_BUFFERED_SECONDS seconds, adding the older ones to the oldest kept."""
    if len(counts) > MAX_BUFFERED_SECONDS:
        seconds = sorted(counts)
        cut = len(seconds) - MAX_BUFFERED_SECONDS
        folded = sum(counts.pop(second) for second in seconds[:cut])
        counts[seconds[cut]] += folded


_buffers: Final = PerProcess(HitBuffer)


def buffer() -> HitBuffer:
    """This process's buffer, made at its first use here: a forked child counts its own hits,
    with a token of its own, while the parent writes those it counted (``config.process``)."""
    return _buffers.get()


def held() -> HitBuffer | None:
    """This process's buffer if it made one, without making it."""
    return _buffers.peek()


@receiver(config_changed, dispatch_uid="whos_online.flushing.hits.reset")
def reset(**kwargs: object) -> None:
    """Drop buffered hits (for tests)."""
    _buffers.replace()
