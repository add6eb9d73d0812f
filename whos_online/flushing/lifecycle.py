"""Where this process is in its life: asked to stop, or writing what it holds as it exits.

Flags by process id, so that a child forked afterwards inherits neither: the flusher reads them
on the request path (``flusher.writes_at_once``), the SIGTERM handler (``stopping``) and the
exit (``flusher.write_at_exit``) set them. The first of the two also notes when the stop began,
from which the writes of a stopping process go on trying through a stall of Redis, for
``STOP_TIMEOUT`` (``stalls``). The handler also tells those who hold connections open (the live
streams, ``live.subscription``) to end them, through ``asked_to_stop``: the parts that come
later in a visit's travel connect to it, since this one may not import them.
"""

from __future__ import annotations

import os
import time
from typing import Final

from django.dispatch import Signal

#: Sent by the SIGTERM handler (``announce_stop``), on the thread the signal runs on (an ASGI
#: server's event loop): a receiver must not wait, only have its work done soon.
asked_to_stop: Final = Signal()

#: The process (by id) that a SIGTERM has reached: from then on it writes what it records at
#: once (``stopping``). By id, so that a child forked afterwards does not inherit it.
_stopping_in: int | None = None
#: The process (by id) that is writing what it holds as it exits (``write_at_exit``).
_exiting_in: int | None = None
#: The process (by id) whose stop began, and when (monotonic): asked to stop, or exiting.
_stop_began: tuple[int, float] | None = None


def stop_soon() -> None:
    """Have this process write each visit and page hit as it comes from now on: it has been
    asked to stop, and may end without running its exit handlers (``stopping``)."""
    global _stopping_in  # noqa: PLW0603 - one flag per process
    _stopping_in = os.getpid()
    _note_stop()


def announce_stop() -> None:
    """Send ``asked_to_stop``; a receiver that fails is logged (by Django, ``django.dispatch``),
    and the others still run."""
    asked_to_stop.send_robust(sender=None)


def is_stopping() -> bool:
    """Whether this process has been asked to stop (``stop_soon``): on the throttled path, a
    look at a global but for the moments of a stop."""
    return _stopping_in is not None and _stopping_in == os.getpid()


def is_exiting() -> bool:
    """Whether this process is writing what it holds as it exits, after which it ends."""
    return _exiting_in == os.getpid()


def exiting() -> None:
    """This process is writing what it holds as it exits, after which it ends."""
    global _exiting_in  # noqa: PLW0603 - one flag per process
    _exiting_in = os.getpid()
    _note_stop()


def _note_stop() -> None:
    global _stop_began  # noqa: PLW0603 - one per process
    if stop_began() is None:
        _stop_began = (os.getpid(), time.monotonic())


def stop_began() -> float | None:
    """When (monotonic) this process was first asked to stop, or began to write as it exits;
    None while it is neither."""
    if _stop_began is None or _stop_began[0] != os.getpid():
        return None
    return _stop_began[1]


def reset() -> None:
    """Forget that the process was asked to stop, or wrote as it exited (tests do both)."""
    global _stopping_in, _exiting_in, _stop_began  # noqa: PLW0603 - one flag per process
    _stopping_in = _exiting_in = _stop_began = None
