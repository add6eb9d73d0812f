"""Writing what a stopping process holds through a short stall of Redis.

A stop is a process's last chance to write what it holds: its queued visits, its page hits, a
logout's jobs. A Redis that stalls for a few seconds just then (a failover, a slow fork for
``BGSAVE``, a ``CLIENT PAUSE``) times that write out, and the breaker then keeps every other
write from being tried for ``FAILURE_BACKOFF``, longer than the process has left: one timeout
would lose everything. So from the moment the process is asked to stop or begins to exit
(``process.stop_began``) until ``STOP_TIMEOUT`` later, a write of what it holds that fails is
tried again every ``RETRY_PAUSE``, past the breakers (``connection.past_breakers``).

Past them rather than after them: a breaker keeps an outage off the pages, by making a request
pay one timeout per back-off rather than one each; a process that stops serves no page but those
it finishes, whose writes are among these, and each try still tells the breaker how it went (one
warning per outage, one line when Redis answers again). Waiting for the breaker to allow a try
would wait ``FAILURE_BACKOFF`` (10 s by default), past the stop; resetting it would forget an
outage that the process's other threads (a read, a page finished meanwhile) should still keep
off.

The bound is the stop's, not each write's: however many writes the stop makes (the SIGTERM
handler's, those of the requests a server finishes afterwards, the exit's), they wait on Redis
until ``STOP_TIMEOUT`` after the stop began, plus the try under way then, which keeps what a
stop costs below the servers' graceful timeouts. Past it a write is tried once, as any write,
and the first that fails says in one line what the process could not write.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Final

from whos_online.backend import connection
from whos_online.config import process

if TYPE_CHECKING:
    from collections.abc import Callable

    from whos_online.config.settings import Config

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
