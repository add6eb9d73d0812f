"""When a process's writes are made: the thread that writes its queue at the deadlines it is
given, and the tries of a stopping process's writes through a stall of Redis (``write_until``).

Started with the first deadline, in the process that asks, and stopped at exit or when the
settings change; a failed flush waits out the back-off, whatever the pages queue meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Final

from whos_online.backend import connection
from whos_online.config import process

if TYPE_CHECKING:
    from collections.abc import Callable

    from whos_online.config.settings import Config


#: Longest a caller of ``stop`` waits for a flush the thread has started.
STOP_WAIT: Final = 2.0


class FlushThread:
    """Calls ``flush`` at the deadlines ``schedule`` gives; ``flush`` returns whether it failed,
    in which case it is called again once the back-off (``back_off``) has passed."""

    def __init__(self, flush: Callable[[], bool]) -> None:
        self._flush = flush
        self._wake = threading.Condition()
        #: When (monotonic) the thread flushes next; None when nothing waits.
        self.deadline: float | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        #: Until when (monotonic) the thread leaves Redis alone after a flush failed, or was
        #: held back by a breaker: the pages that queue visits meanwhile do not bring it forward.
        self._retry_at = float("-inf")

    def schedule(self, delay: float) -> None:
        """Flush at most ``delay`` seconds from now; after a failed flush, no earlier than its
        back-off."""
        deadline = max(time.monotonic() + delay, self._retry_at)
        current = self.deadline
        if current is not None and current <= deadline and self._thread is not None:
            return  # the common case, without the lock
        with self._wake:
            if self.deadline is None or deadline < self.deadline:
                self.deadline = deadline
                self._wake.notify()
            if self._thread is None or not self._thread.is_alive():
                self._thread = process.start_thread(self._run, name="whos_online flusher")

    def is_current(self) -> bool:
        """Whether the caller runs on this thread."""
        return self._thread is threading.current_thread()

    def back_off(self, seconds: float) -> None:
        """Leave Redis alone for ``seconds``: a flush failed, or a breaker held it back."""
        self._retry_at = time.monotonic() + seconds

    def recovered(self) -> None:
        """A flush succeeded: the next deadline is the one asked for."""
        self._retry_at = float("-inf")

    def stop(self) -> None:
        """Stop the thread, letting a flush it has started finish (a little while)."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_WAIT)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and (
                    self.deadline is None or self.deadline > time.monotonic()
                ):
                    timeout = None if self.deadline is None else self.deadline - time.monotonic()
                    self._wake.wait(timeout)
                if self._stopping:
                    return
                self.deadline = None
            if self._flush():
                self.schedule(0)  # once the back-off has passed


logger = logging.getLogger("whos_online")

#: Seconds between two tries of a stopping process's write: a stall of Redis ends within this
#: of being over, and a Redis that stays down is asked about five times a second, at most one
#: try under way at a time (each flush holds the flusher's lock).
RETRY_PAUSE: Final = 0.2


def deadline(config: Config) -> float:
    """Until when (monotonic) the writes of this stop are tried again: ``STOP_TIMEOUT`` after it
    began (from now, for a process that has neither been asked to stop nor begun to exit)."""
    began = process.stop_began()
    return (time.monotonic() if began is None else began) + config.stop_timeout


def write_until(
    attempt: Callable[[], frozenset[str]],
    until: float,
    retrying: Callable[[float], None] = lambda until: None,
) -> frozenset[str]:
    """Make ``attempt`` (a write, which returns the tags of the shards it failed on) until it
    fails on none, or ``until`` (monotonic) has passed, every ``RETRY_PAUSE``, past the
    breakers; ``retrying(until)`` is told before each pause. Once ``until`` has passed, one
    try, as any write makes it: the breakers have their say. Returns the last try's failures."""
    if time.monotonic() >= until:
        return attempt()
    with connection.past_breakers():
        while True:
            failed = attempt()
            left = until - time.monotonic()
            if not failed or left <= 0:
                return failed
            retrying(until)
            time.sleep(min(RETRY_PAUSE, left))


def report_lost(config: Config, visits: int, page_hits: int, jobs: int) -> None:
    """Say in one line what a stopping process could not write, once its writes gave up."""
    logger.warning(
        "whos_online could not write to Redis within STOP_TIMEOUT (%g s) of the process's stop "
        "and gives up: %d visits, %d page hits and %d writes of logouts it holds are not written.",
        config.stop_timeout,
        visits,
        page_hits,
        jobs,
    )
