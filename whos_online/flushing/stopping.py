"""Writing what a process holds as it stops, however it stops short of being killed.

A SIGTERM's default action, uvicorn's SIGTERM raised again and a pool's ``terminate`` all skip
``atexit``, so ``apps.ready`` installs a handler that writes what the process holds and hands the
signal on. docs/how-it-works.md tells how, and docs/deployment.md what each server does.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.util
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Final

from whos_online.backend import clients
from whos_online.config import process
from whos_online.flushing import flusher

if TYPE_CHECKING:
    from types import FrameType


def flush_at_exit() -> None:
    """Write what the process holds as it exits (see ``flusher.Flusher.close``), then close its
    Redis clients while the interpreter is still whole (``clients.release``)."""
    flusher.write_at_exit()
    clients.release()


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
    MissedSignalWatch.start()  # in a child of multiprocessing only: see ``_needed``


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
    in a thread of its own, which the handler waits for (``wait_for``): mostly it is done at
    once; through a stall of Redis, it goes on until ``STOP_TIMEOUT`` after the signal; if the
    main thread held a lock, it is done once the handler has returned and the lock is let go. A
    process that holds nothing, nor is writing, starts no thread."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        #: The process (by id) in which the handler has run, so that a fork does not inherit it.
        self._ran_in: int | None = None

    @property
    def ends_the_process(self) -> bool:
        """Whether the handler ends the process by the default action (no server's to hand on
        to)."""
        return not callable(self.previous)

    def has_run(self) -> bool:
        """Whether the handler has run in this process."""
        return self._ran_in == os.getpid()

    def __call__(self, signum: int, frame: FrameType | None) -> Any:
        final = self.ends_the_process
        if final and self.has_run():
            # Sent again while the handler runs (``MissedSignalWatch``, or a second stop): the
            # run under way writes, then ends the process.
            return None
        self._ran_in = os.getpid()
        process.stop_soon()
        process.announce_stop()  # the live streams end, and refuse new ones
        if final and process.is_exiting():
            # Caught writing as it exits (a pool's worker that ended just as the pool was
            # terminated): ending now would cut that write off, and the process ends after it.
            return None
        if flusher.holds_anything() and not process.green_threads():
            made = flusher.current()
            write = made.close if final else made.flush
            writer = process.start_thread(write, name="whos_online exit flush")
            wait_for(writer, made)
        if not final:
            return self.previous(signum, frame)
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
        return None


def wait_for(writer: threading.Thread, made: flusher.Flusher) -> None:
    """Wait for the handler's ``writer``: ``flusher.EXIT_WAIT`` at first, and then, if it is
    trying again through a stall (``write_until``), until its stop's deadline (and a try under way
    then). What the signal interrupted on this thread may hold a lock the write needs, which
    would hold it up until the handler returns: a write that has tried once and failed was not
    held up, and will not be on its next tries, which need the same locks."""
    writer.join(flusher.EXIT_WAIT)
    until = made.retrying_until
    if until is not None and writer.is_alive():
        writer.join(max(0.0, until - time.monotonic()) + flusher.EXIT_WAIT)


#: How long the watch waits for the handler to start after a signal, before (and between) its
#: sending the signal again to the main thread; and for how long, at most, it does so.
KNOCK_EVERY: Final = 0.1
KNOCK_FOR: Final = 2.0


class MissedSignalWatch:
    """The pipe that Python writes each handled signal's number to, and the thread that reads it
    and has the main thread run the SIGTERM handler it missed (see the module's docstring): one
    per ``multiprocessing`` child whose handler goes over the default action."""

    _current: MissedSignalWatch | None = None

    def __init__(self, main_thread: int) -> None:
        self.pid = os.getpid()
        self.main_thread = main_thread
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)  # set_wakeup_fd requires it

    @classmethod
    def start(cls) -> None:
        """Watch from now on, if this process needs it and is not watched yet; from the main
        thread (``set_wakeup_fd``)."""
        if (cls._current is not None and cls._current.pid == os.getpid()) or not cls._needed():
            return
        watch = cls(threading.main_thread().ident or 0)
        try:
            previous = signal.set_wakeup_fd(watch.write_fd, warn_on_full_buffer=False)
        except ValueError:  # not the main thread of the main interpreter
            watch.close()
            return
        if previous != -1:  # an event loop's: it wakes on its own signals; leave it so
            signal.set_wakeup_fd(previous)
            watch.close()
            return
        cls._current = watch
        process.start_thread(watch.run, name="whos_online signal watch")

    @staticmethod
    def _needed() -> bool:
        """A child of ``multiprocessing``, whose parent ends it with SIGTERM (a pool's
        ``terminate``) and waits for it to end, and whose handler ends it (no server's). A
        spawn child may set Django up before it knows its parent, as it imports the parent's
        main module: multiprocessing marks the process as ``_inheriting`` meanwhile (and reads
        that mark itself, in ``spawn``)."""
        handler = signal.getsignal(signal.SIGTERM)
        child = multiprocessing.parent_process() is not None or bool(
            getattr(multiprocessing.current_process(), "_inheriting", False)
        )
        return (
            child
            and isinstance(handler, WriteThenHandOn)
            and handler.ends_the_process
            and hasattr(signal, "pthread_kill")  # POSIX
            and not process.green_threads()
        )

    @classmethod
    def after_fork(cls) -> None:
        """In a forked child: the parent's pipe is the parent's, and its thread did not come
        along; let go of the pipe (the child's signals would wake the parent's thread), then
        watch with one of the child's own if it needs one. A child of ``multiprocessing`` is
        known as one a moment later, as it starts (``register_after_fork``), where this runs
        again."""
        inherited = cls._current
        if inherited is not None and inherited.pid != os.getpid():
            cls._current = None
            try:
                found = signal.set_wakeup_fd(-1)
                if found != inherited.write_fd:
                    signal.set_wakeup_fd(found)  # not ours any more: put it back
            except ValueError:  # forked from a subinterpreter's thread: nothing to undo here
                return
            inherited.close()
        cls.start()

    def run(self) -> None:
        while True:
            try:
                numbers = os.read(self.read_fd, 64)
            except OSError:  # closed
                return
            if not numbers or (signal.SIGTERM in numbers and not self.knock()):
                return

    def knock(self) -> bool:
        """Until the handler has run, send SIGTERM again to the main thread now and then: a
        wait in C there ends with EINTR, after which Python runs the handler. False when the
        main thread did not run it in ``KNOCK_FOR`` seconds: it is busy in C, not waiting, and
        runs the handler once it is back in Python; the watch ends there, rather than answer
        the signals it sent itself for ever."""
        give_up_at = time.monotonic() + KNOCK_FOR
        while time.monotonic() < give_up_at:
            time.sleep(KNOCK_EVERY)
            handler = signal.getsignal(signal.SIGTERM)
            if not isinstance(handler, WriteThenHandOn) or handler.has_run():
                return True  # run, or a server's handler now in place, whose signal this was
            signal.pthread_kill(self.main_thread, signal.SIGTERM)
        return False

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=MissedSignalWatch.after_fork)


def _after_multiprocessing_fork(_: object) -> None:
    MissedSignalWatch.after_fork()


# A forked child of multiprocessing (fork, forkserver) runs these as it starts, once it knows its
# parent; a spawned one starts the watch as it sets Django up (``MissedSignalWatch._needed``).
multiprocessing.util.register_after_fork(MissedSignalWatch, _after_multiprocessing_fork)
