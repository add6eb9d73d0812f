"""Writing what a process holds as it stops.

What the process holds is written as it exits: at ``atexit`` (and in the finalizers of a process
that multiprocessing started; ``apps`` registers both), and under an ASGI server at its first
SIGTERM or SIGINT, from which the process writes each visit at once until it exits (uvicorn ends
its processes with its own re-raised SIGTERM, which no ``atexit`` survives). The signal's
handler writes from a thread of its own: it runs on the main thread (an ASGI server's event
loop), which the signal may have caught inside the queue's lock or the page hits'. A process
that is killed (SIGKILL, a crash) loses what it held: at most the last ``FLUSH_INTERVAL`` of
visits and page hits, or what an outage kept queued.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

from whos_online.flushing import flusher

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType


def flush_at_exit() -> None:
    """Write what the process holds as it exits (see ``flusher.Flusher.close``)."""
    flusher.write_at_exit()


_signals_installed = False


def install_signal_handlers() -> None:
    """Under an ASGI server, from the main thread: write what is queued at the first SIGTERM or
    SIGINT, and every visit at once from then on, then let the server's handler stop it. Once
    per process."""
    global _signals_installed  # noqa: PLW0603 - once per process
    if _signals_installed or threading.current_thread() is not threading.main_thread():
        return
    _signals_installed = True
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, on_signal(signal.getsignal(number)))


def on_signal(previous: Any) -> Callable[[int, FrameType | None], Any]:
    """A SIGTERM or SIGINT handler that writes what the process holds, has every later visit
    written at once, and hands the signal on to ``previous`` (the server's own handler).

    A handler runs on the main thread, between two of its steps; under an ASGI server that is
    the event loop, which may be inside the queue's lock or the page hits' (queueing a visit,
    counting a hit), and would wait on itself for ever if it wrote from here. So the write runs
    in a thread of its own, which the handler waits for at most ``flusher.EXIT_WAIT`` seconds:
    mostly it is done by then; if the main thread held a lock, it is done once the handler has
    returned and the lock is let go. The flusher is ``flushing``'s when the signal comes (a
    change of settings replaces it)."""

    def handle(signum: int, frame: FrameType | None) -> Any:
        current = flusher.current()
        current.immediate = True
        writer = threading.Thread(target=current.flush, name="whos_online exit flush", daemon=True)
        writer.start()
        writer.join(flusher.EXIT_WAIT)
        if callable(previous):
            return previous(signum, frame)
        if previous != signal.SIG_IGN:  # the default action, as if nothing had been here
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        return None

    return handle
