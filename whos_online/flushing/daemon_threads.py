"""The threads whos_online starts in a site's process, which must never take a stop signal.

A process-directed signal goes to any one of the process's threads that does not block it. Python
runs its handlers on the main thread only: when the kernel hands SIGTERM or SIGINT to another
thread, the main thread learns of it when it next runs Python code, and one that is waiting in C
meanwhile does not: a ``multiprocessing`` pool's worker waiting for a task on its queue's lock
then never runs the SIGTERM handler (``stopping``), does not end, and ``Pool.terminate`` (the
exit of ``with Pool()``) waits for it for ever. Without a Python handler the default action ends
the process whichever thread takes the signal, so the hang is ours to prevent: every thread
whos_online starts blocks the signals that stop a process, and the kernel hands them to a thread
that will act on them.

Under gevent and eventlet, a "thread" is a greenlet on the main thread; blocking a signal there
would block it for the whole process, so their threads are left as they are.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable

#: What tells a process to stop: a server, ``multiprocessing``, a shell's Ctrl-C.
STOP_SIGNALS: Final = frozenset({signal.SIGTERM, signal.SIGINT})


def start(target: Callable[[], object], *, name: str) -> threading.Thread:
    """Start a daemon thread running ``target`` with the stop signals blocked (see the module's
    docstring). They are blocked in the caller around ``start``, which the thread inherits, so
    that no signal reaches it before it could block them itself; the caller's own mask is put
    back at once, and a signal that came meanwhile is delivered then."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    if not _can_mask():
        thread.start()
        return thread
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return thread


def green_threads() -> bool:
    """Whether gevent or eventlet has patched ``threading``: a thread is then a greenlet, and a
    signal handler may run in their hub, where waiting for a thread raises."""
    gevent_monkey: Any = sys.modules.get("gevent.monkey")
    if gevent_monkey is not None and gevent_monkey.is_module_patched("threading"):
        return True
    eventlet_patcher: Any = sys.modules.get("eventlet.patcher")
    return eventlet_patcher is not None and bool(eventlet_patcher.is_monkey_patched("thread"))


def _can_mask() -> bool:
    # pthread_sigmask is POSIX's (not on Windows, where no signal goes to a thread anyway).
    return hasattr(signal, "pthread_sigmask") and not green_threads()
