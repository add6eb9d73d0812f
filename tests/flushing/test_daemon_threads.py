"""The threads whos_online starts block SIGTERM and SIGINT (``config.process``), so that a
stop signal reaches a thread that acts on it.

Without that, the kernel may hand SIGTERM to the flushing thread of a ``multiprocessing`` pool's
worker whose main thread waits for a task in C: the worker's handler never runs, the worker never
ends, and ``with Pool()`` waits for it for ever (``tests/flushing/test_children.py`` caught it
about once in 30 runs). Which thread the kernel picks cannot be chosen from a test, so these look
at each thread's signal mask instead.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from tests.support.helpers import configure
from whos_online.config import process
from whos_online.flushing import flusher as flushing
from whos_online.flushing import stopping
from whos_online.flushing.schedule import FlushThread
from whos_online.recording import visits as recording

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "pthread_sigmask"), reason="POSIX threads' signal masks"
)

STOPS: set[int] = {signal.SIGTERM, signal.SIGINT}


def blocked_here() -> set[int]:
    """The signals the calling thread blocks (blocking none more, to read the mask)."""
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def mask_of() -> set[int]:
    """The mask of a thread ``process.start`` starts."""
    seen: list[set[int]] = []
    process.start_thread(lambda: seen.append(blocked_here()), name="probe").join(5)
    return seen[0]


def test_a_started_thread_blocks_the_stop_signals_and_its_caller_keeps_its_mask():
    before = blocked_here()

    assert mask_of() >= STOPS
    assert blocked_here() == before
    assert not STOPS & before  # the main thread takes them, as the test process always did


def test_the_flushing_thread_blocks_the_stop_signals():
    seen: list[set[int]] = []
    done = threading.Event()

    def flush() -> bool:
        seen.append(blocked_here())
        done.set()
        return False

    thread = FlushThread(flush)
    thread.schedule(0)
    assert done.wait(5)
    thread.stop()

    assert seen[0] >= STOPS


def test_the_handler_s_exit_write_blocks_the_stop_signals(settings, monkeypatch):
    configure(settings, FLUSH_INTERVAL=10)
    flushing.current().put(recording.member_visit("guests", "m", time.time()))
    seen: list[set[int]] = []
    monkeypatch.setattr(flushing.Flusher, "flush", lambda self: seen.append(blocked_here()))

    stopping.WriteThenHandOn(lambda signum, frame: None)(signal.SIGTERM, None)

    assert seen
    assert seen[0] >= STOPS


@pytest.mark.parametrize(
    ("module", "patched"),
    [
        ("gevent.monkey", SimpleNamespace(is_module_patched=lambda name: name == "threading")),
        ("eventlet.patcher", SimpleNamespace(is_monkey_patched=lambda name: name == "thread")),
    ],
)
def test_under_green_threads_nothing_is_blocked(monkeypatch, module, patched):
    """A green thread runs on the main thread: blocking there would block the whole process."""
    monkeypatch.setitem(sys.modules, module, patched)

    assert not STOPS & mask_of()
