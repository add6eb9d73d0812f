"""The thread that writes a process's queue: it sleeps until the earliest deadline it was given,
flushes, and after a flush that failed waits out the back-off, whatever the pages queue
meanwhile.

Started with the first deadline, in the process that asks (a forked child starts its own, since
the parent's thread did not come along; see ``config.process``), and stopped at exit or when
the settings change (tests).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Final

from whos_online.config import process

if TYPE_CHECKING:
    from collections.abc import Callable

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
