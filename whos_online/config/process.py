"""State of one process: made the first time a process asks for it, in that process.

The queue of visits, its flushing thread, the buffer of page hits and the Redis clients hold
locks, threads and sockets that belong to the process that made them. A process forked from
another (a gunicorn worker, a ``multiprocessing`` child, a fork of a fork) must not use its
parent's: a lock another thread held at the fork stays held for ever, the thread did not come
along, and the parent writes what it queued itself.

Nothing is made at import time or in a fork hook: under gunicorn's gevent and eventlet workers
with ``--preload``, the app is imported in the arbiter, before the worker patches ``threading``,
and a lock made then is an OS lock, on which one greenlet waiting for another blocks the whole
worker. Made at first use, in the worker, it is the patched kind. A fork is noticed by the
process id, which costs one ``getpid`` per look-up, and is made safe without a lock: two
threads that race to make the first value each make one, and the first stored wins.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")


class PerProcess(Generic[T]):
    """One ``T`` per process, from ``make()``; ``started(value)`` runs once for each value made,
    in the process that made it (to register what the process does with it as it exits)."""

    def __init__(self, make: Callable[[], T], started: Callable[[T], object] | None = None):
        self._make = make
        self._started = started
        self._values: dict[int, T] = {}

    def get(self) -> T:
        pid = os.getpid()
        value = self._values.get(pid)
        if value is not None:
            return value
        made = self._make()
        # dict.setdefault is atomic: of two threads racing here, both get the first one stored.
        value = self._values.setdefault(pid, made)
        if value is made:
            for other in [key for key in self._values if key != pid]:
                self._values.pop(other, None)  # a parent's, copied by the fork
            if self._started is not None:
                self._started(value)
        return value

    def peek(self) -> T | None:
        """This process's value if it made one, without making it."""
        return self._values.get(os.getpid())

    def replace(self) -> T | None:
        """Drop this process's value (the next ``get`` makes a new one); returns it."""
        return self._values.pop(os.getpid(), None)
