"""A script that starts ``multiprocessing`` children which serve pages, as a site's own script
would: ``python tests/support/pool_children.py METHOD CHILDREN PAGES``, with the repository on
``PYTHONPATH`` and the settings module and ``REDIS_URL`` in the environment
(``tests/flushing/test_children.py`` runs it).

For each way of running children (``Process``, a ``Pool`` closed and joined, and ``with
Pool()``, whose exit terminates its workers with SIGTERM), ``CHILDREN`` children each serve
``PAGES`` pages to new guests through Django's test client, then end; this process then reads
what Redis holds and prints one line per way, ``form guests hits`` (Redis is emptied before
each). The site's ``FLUSH_INTERVAL`` is long, so that only what a child writes as it ends is in
Redis.

Django is set up at import, so that spawn and forkserver children, which run this file again as
``__mp_main__``, are set up too. forkserver's server loads this module first, as a site that
forks its children from the server would have it load Django (``set_forkserver_preload``): its
children then find Django set up, and start in a moment.
"""

from __future__ import annotations

import multiprocessing
import sys
from typing import TYPE_CHECKING, cast

import django

if TYPE_CHECKING:
    from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext

    Context = ForkContext | ForkServerContext | SpawnContext

django.setup()

FORMS = ("Process", "Pool", "with-Pool")


def serve(pages: range) -> int:
    """A page to a new guest for each number of ``pages``; returns how many were answered
    with a 200."""
    from django.test import Client

    answered = 0
    for number in pages:
        client = Client(HTTP_X_FORWARDED_FOR=f"198.18.{number // 250}.{number % 250 + 1}")
        answered += client.get("/").status_code == 200
    return answered


def run(context: Context, form: str, children: int, pages: int) -> None:
    shares = [range(child * pages, (child + 1) * pages) for child in range(children)]
    if form == "Process":
        started = [context.Process(target=serve, args=(share,)) for share in shares]
        for child in started:
            child.start()
        for child in started:
            child.join(60)
        assert [child.exitcode for child in started] == [0] * children
    elif form == "Pool":
        pool = context.Pool(children)
        assert sum(pool.map(serve, shares, chunksize=1)) == children * pages
        pool.close()
        pool.join()
    else:
        with context.Pool(children) as pool:  # its exit terminates the workers: SIGTERM
            assert sum(pool.map(serve, shares, chunksize=1)) == children * pages


def main(method: str, children: int, pages: int) -> None:
    import whos_online
    from whos_online.backend.clients import admin_client

    context = cast("Context", multiprocessing.get_context(method))
    if method == "forkserver":
        context.set_forkserver_preload(["tests.support.pool_children"])
    for form in FORMS:
        admin_client().flushdb()
        run(context, form, children, pages)
        guests = whos_online.online_counts().guests
        hits = sum(count for _, count in whos_online.get_counter("hits", 86400))
        print(form, guests, hits, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
