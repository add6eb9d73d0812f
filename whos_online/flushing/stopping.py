"""Writing what a process holds as it stops.

A process that exits normally writes what it holds at ``atexit``, and a process that
multiprocessing started in its finalizers (``apps`` and ``flusher`` register both). Some never
get there, because SIGTERM ends them by its default action: a ``multiprocessing`` pool's workers,
which ``Pool.terminate`` (and so ``with Pool()``) stops that way; uvicorn's processes, which
re-raise the SIGTERM they caught once their graceful shutdown is over, after putting back the
handler they found; a script or a ``runserver`` told to stop. So ``apps.ready`` installs a SIGTERM
handler, on the main thread, over the one it finds, whatever the server, and whether or not the
process records anything: at the signal it writes what the process holds, has every visit and
page hit written at once from then on (``lifecycle.stop_soon``), and hands the signal on to the
handler it replaced, or to the default action.

Where it is installed matters: uvicorn loads the site before it takes the signals when it runs
one process, so the handler runs once, at the end, when uvicorn raises the signal again; its
``--workers`` and ``--reload`` processes load the site inside, so the handler runs at the signal,
before uvicorn's, and the requests the server finishes afterwards write their own visits and hits.
(The first live stream of a one-process uvicorn installs the handler again, over uvicorn's, so
that the signal ends the streams before uvicorn waits for them: ``reading.subscription``.)
A fork inherits the handler (a ``multiprocessing`` child, a fork of a fork); spawn and forkserver
children install their own when they set Django up.

Left alone: SIGINT, which Python turns into ``KeyboardInterrupt``: the process then unwinds and
``atexit`` writes, and a shell or a command that catches it goes on as it would without us
(uvicorn raises it again with the handler it found, Python's, in each of its processes). A SIGTERM
that is ignored, or handled by code Python does not see, is left so too. gunicorn's workers, which
leave through ``sys.exit`` (``atexit`` writes), keep their own handler: gunicorn sets it so that
the signal does not interrupt a request's system calls, and under its gevent and eventlet
workers a handler must not wait. Under gevent or eventlet elsewhere, the handler writes nothing
itself (it may run in their hub, where waiting is an error) and only has each later visit written
at once.

The handler writes from a thread of its own: it runs on the main thread (an ASGI server's event
loop), which the signal may have caught inside the queue's lock or the page hits'. The threads
whos_online starts block SIGTERM (``daemon_threads``), so that the signal goes to a thread that
acts on it, never to one that would leave the main thread waiting in C without knowing.

A process that is killed (SIGKILL, a crash) loses what it held: at most the last
``FLUSH_INTERVAL`` of visits and page hits, or what an outage kept queued.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

from whos_online.backend import connection
from whos_online.flushing import daemon_threads, flusher, lifecycle

if TYPE_CHECKING:
    from types import FrameType


def flush_at_exit() -> None:
    """Write what the process holds as it exits (see ``flusher.Flusher.close``), then close its
    Redis clients while the interpreter is still whole (``connection.release``)."""
    flusher.write_at_exit()
    connection.release()


def install_signal_handler() -> None:
    """Write what the process holds at SIGTERM, before the handler found here runs (see the
    module's docstring); from the main thread, once."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal would refuse: only the main thread may set handlers
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None or previous == signal.SIG_IGN or isinstance(previous, WriteThenHandOn):
        return
    if _is_gunicorn_worker(previous):
        return
    try:
        signal.signal(signal.SIGTERM, WriteThenHandOn(previous))
    except ValueError:  # a subinterpreter (mod_wsgi): signals belong to the main one
        return


def _is_gunicorn_worker(handler: Any) -> bool:
    """Whether ``handler`` is a gunicorn worker's (its ``handle_exit``): the site is loaded in
    the worker after gunicorn has set its handlers."""
    return str(getattr(handler, "__module__", "")).startswith("gunicorn.")


class WriteThenHandOn:
    """A SIGTERM handler that writes what the process holds, has every later visit and page hit
    written at once, and hands the signal on to ``previous``: the server's handler, or the
    default action, which ends the process at once (its own write then also forgets the key
    of its page hits' batches, as an exit does).

    A handler runs on the main thread, between two of its steps; under an ASGI server that is
    the event loop, which may be inside the queue's lock or the page hits' (queueing a visit,
    counting a hit), and would wait on itself for ever if it wrote from here. So the write runs
    in a thread of its own, which the handler waits for at most ``flusher.EXIT_WAIT`` seconds:
    mostly it is done by then; if the main thread held a lock, it is done once the handler has
    returned and the lock is let go. A process that holds nothing, nor is writing, starts no
    thread."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous

    def __call__(self, signum: int, frame: FrameType | None) -> Any:
        lifecycle.stop_soon()
        lifecycle.announce_stop()  # the live streams end, and refuse new ones
        final = not callable(self.previous)  # the default action: the process ends now
        if final and lifecycle.is_exiting():
            # Caught writing as it exits (a pool's worker that ended just as the pool was
            # terminated): ending now would cut that write off, and the process ends after it.
            return None
        if flusher.holds_anything() and not daemon_threads.green_threads():
            made = flusher.current()
            write = made.close if final else made.flush
            writer = daemon_threads.start(write, name="whos_online exit flush")
            writer.join(flusher.EXIT_WAIT)
        if not final:
            return self.previous(signum, frame)
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
        return None
