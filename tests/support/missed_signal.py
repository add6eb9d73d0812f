"""A script whose ``multiprocessing`` child gets SIGTERM in the state a pool's worker meets now
and then at ``Pool.terminate``: Python has noted the signal, and the main thread was already
waiting in C, which the signal did not interrupt, so that it never runs the handler by itself.
``python tests/support/missed_signal.py METHOD``, with the repository on ``PYTHONPATH`` and the
settings module and ``REDIS_URL`` in the environment (``tests/flushing/test_stopping.py`` runs
it).

The child serves a page to a new guest (its visit and page hit are queued: the site's
``FLUSH_INTERVAL`` is long), then waits for ever on a lock, as a pool's worker waits for a task;
a thread of its own, which does not block SIGTERM, sends the signal to itself once the main
thread waits. The script prints the child's exit code (or ``hung`` after 30 s, and kills it),
and the guests and page hits Redis then holds.

Django is set up at import, so that spawn and forkserver children, which run this file again as
``__mp_main__``, are set up too.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, cast

import django

if TYPE_CHECKING:
    from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext

    Context = ForkContext | ForkServerContext | SpawnContext

django.setup()

#: How long the parent waits for its child to end.
WAIT = 30


def main_thread_state() -> str:
    """The main thread's state as Linux has it (``S``: waiting)."""
    with open(f"/proc/self/task/{threading.main_thread().native_id}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def signal_while_the_main_thread_waits() -> None:
    # Sent to this thread, which does not block it: Python notes the signal here, and the main
    # thread, already waiting in C, is not interrupted; as when a signal lands on the main thread
    # just before it blocks.
    while main_thread_state() != "S":
        time.sleep(0.01)
    time.sleep(0.2)
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)


def child() -> None:
    from django.test import Client

    assert Client(HTTP_X_FORWARDED_FOR="198.18.0.1").get("/").status_code == 200
    held = threading.Lock()
    held.acquire()
    threading.Thread(target=signal_while_the_main_thread_waits, daemon=True).start()
    held.acquire()  # for ever, as a pool's worker waits for a task on its queue's lock


def main(method: str) -> None:
    import whos_online
    from whos_online.backend.clients import admin_client

    admin_client().flushdb()
    context = cast("Context", multiprocessing.get_context(method))
    if method == "forkserver":
        context.set_forkserver_preload(["tests.support.missed_signal"])
    process = context.Process(target=child)
    process.start()
    process.join(WAIT)
    if process.is_alive():
        process.kill()
        process.join()
        print("hung", flush=True)
    else:
        print(process.exitcode, flush=True)
    hits = sum(count for _, count in whos_online.get_counter("hits", 86400))
    print(whos_online.online_counts().guests, hits, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
