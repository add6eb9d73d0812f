"""The one call that goes to Redis on the request path: with the request client, behind the
circuit breakers, failing open (``call``); on a Sentinel-managed master, asking the Sentinels which
server is the master at most once a second, and once more when a call meets a replica.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from typing import TYPE_CHECKING, Final, TypeVar

import redis
import redis.utils
from django.dispatch import receiver
from redis.exceptions import ReadOnlyError
from redis.sentinel import SentinelConnectionPool

from whos_online.backend.breakers import Attempt, breaker, refusals
from whos_online.backend.sentinels import FollowingSentinel
from whos_online.config.settings import Config, config_dropped, get_config

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from whos_online.backend.keyspace import Shard
from whos_online.backend.clients import REDIS_ERRORS, Client, release, request_client

logger = logging.getLogger("whos_online")

T = TypeVar("T")


#: Seconds between two questions to the Sentinels about which server is the master. Sentinel
#: leaves a demoted master writable for seconds after a failover, and redis-py's Sentinel pool
#: asks only when it opens a connection: without asking again, pooled connections would go on
#: writing to the old master, and those writes are lost when it turns into a replica.
MASTER_CHECK_INTERVAL: Final = 1.0


class MasterWatch:
    """Asks the Sentinels which server is the master at most once per ``MASTER_CHECK_INTERVAL``.

    When the answer changes, redis-py's Sentinel pool drops its idle connections, so the next call
    goes to the new master. A call refused by a read-only replica (the old master, once Sentinel has
    turned it) or cut off asks at once, so that the caller may try the new master. The first call
    also starts the process's listeners (``whos_online.backend.sentinels``), which learn of a
    promotion as it happens, before the Sentinels name the new master.
    """

    def __init__(self) -> None:
        self._checked: dict[int, float] = {}

    def before_call(self, client: Client, now: float | None = None) -> None:
        """Ask the Sentinels if it is time to. A Sentinel that fails to answer does not fail the
        call, which goes to the master known so far; the next question waits FAILURE_BACKOFF."""
        pool = getattr(client, "connection_pool", None)
        if not isinstance(pool, SentinelConnectionPool):
            return
        if isinstance(pool.sentinel_manager, FollowingSentinel):
            pool.sentinel_manager.listen(pool)
        if pool.master_address is None:
            return
        now = time.monotonic() if now is None else now
        if now - self._checked.get(id(pool), float("-inf")) >= MASTER_CHECK_INTERVAL:
            self._checked[id(pool)] = now
            try:
                pool.get_master_address()  # type: ignore [no-untyped-call]
            except REDIS_ERRORS:
                self._checked[id(pool)] = now + get_config().failure_backoff

    def moved_after(self, client: Client, error: BaseException) -> bool:
        """Whether ``error`` came from a master that the Sentinels no longer name."""
        pool = getattr(client, "connection_pool", None)
        if not isinstance(pool, SentinelConnectionPool):
            return False
        if not isinstance(error, (ReadOnlyError, redis.exceptions.ConnectionError)):
            return False
        before = pool.master_address
        manager = pool.sentinel_manager
        if (
            isinstance(error, ReadOnlyError)
            and isinstance(manager, FollowingSentinel)
            and manager.just_promoted(pool.service_name, before)
        ):
            return True  # the announcement overtook the promotion by a moment
        try:
            after = pool.get_master_address()  # type: ignore [no-untyped-call]
        except REDIS_ERRORS:
            return False
        self._checked[id(pool)] = time.monotonic()
        return bool(after != before)

    def reset(self) -> None:
        self._checked.clear()


masters: Final = MasterWatch()


#: Whether the calls made here (this thread, this task) go whatever the breakers say.
_past_breakers: Final = contextvars.ContextVar("whos_online_past_breakers", default=False)


@contextlib.contextmanager
def past_breakers() -> Iterator[None]:
    """Make the calls of this block (in this thread or task) whether or not a breaker is open:
    for the last writes of a process that stops (``flushing.schedule``), which a back-off longer
    than what is left of the stop would otherwise turn into none. Each call's outcome still goes
    to the breakers, so that an outage is logged once and a recovery once."""
    token = _past_breakers.set(True)
    try:
        yield
    finally:
        _past_breakers.reset(token)


def breakers_passed() -> bool:
    """Whether the calls made here go whatever the breakers say (``past_breakers``)."""
    return _past_breakers.get()


def call(
    default: T,
    operation: Callable[[Client, Config], T],
    *,
    shard: Shard | None = None,
    writes: bool = False,
) -> T:
    """Run ``operation`` with the request client, or return ``default`` if Redis fails or a
    breaker is open (see ``Attempt``; but ``past_breakers``). On a Sentinel-managed master that
    has just been replaced, the call is made once more, on the new master."""
    config = get_config()
    attempt = Attempt(config, shard, writes=writes)
    if not attempt.allowed and not _past_breakers.get():
        return default
    try:
        client = request_client()
        masters.before_call(client)
        try:
            result = operation(client, config)
        except REDIS_ERRORS as error:
            if not masters.moved_after(client, error):
                raise
            result = operation(client, config)
    except REDIS_ERRORS as error:
        attempt.failed(error)
        return default
    attempt.succeeded()
    return result


@receiver(config_dropped, dispatch_uid="whos_online.backend.connection.reset")
def reset(**kwargs: object) -> None:
    release()
    breaker.reset()
    refusals.reset()
    masters.reset()
