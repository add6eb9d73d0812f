"""Recording from an ASGI site without leaving the event loop: redis-py's asyncio clients.

Under ASGI the middleware records with these clients, so that a recorded visit costs the event
loop one awaited round trip instead of a trip through ``sync_to_async``, whose default executor
is one thread for the whole process: every recorded visit of the site would queue for it.

The clients mirror ``whos_online.connection``'s: the same target, the same 0.25 s timeouts and no
retries, and the same circuit breakers (``breakers.breaker`` and ``breakers.refusals``, which
the sync and async paths share, so an outage seen by one stops the other). An asyncio client
belongs to the event loop it was made in, so there is one per loop.

A deployment this module cannot make an asyncio client for gets ``None`` from
``request_client()``, and the middleware records in a worker thread as before: a Sentinel-managed
alias (whose failover handling, ``connection.MasterWatch``, is synchronous) and a django-redis
pool of a kind this module does not know.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import redis
import redis.asyncio
from django.dispatch import receiver
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError
from redis.retry import Retry

from whos_online import breakers, connection, keyspace
from whos_online.conf import Config, config_changed, get_config
from whos_online.store.scripts import sha1_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from whos_online.store.scripts import ScriptCall

T = TypeVar("T")

AsyncClient: TypeAlias = "redis.asyncio.Redis | AsyncRedisCluster"

#: Connection settings copied from a django-redis pool: where the server is and how to log in.
#: Everything else in a sync pool's kwargs (its parser, its maintenance handlers) is sync-only.
_COPIED: frozenset[str] = frozenset(
    {"host", "port", "db", "username", "password", "client_name", "path"}
)

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AsyncClient | None]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def request_client() -> AsyncClient | None:
    """The running loop's client for the configured Redis, or None where there is none."""
    config = get_config()
    loop = asyncio.get_running_loop()
    with _lock:
        per_loop = _clients.setdefault(loop, {})
        if config.redis_target not in per_loop:
            per_loop[config.redis_target] = _make_client(config)
        return per_loop[config.redis_target]


def _make_client(config: Config) -> AsyncClient | None:
    timeout = connection.REQUEST_TIMEOUT
    overrides: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
    }
    if config.redis_url and config.redis_cluster:
        return AsyncRedisCluster.from_url(config.redis_url, **overrides)
    if config.redis_url:
        return redis.asyncio.Redis.from_url(config.redis_url, **overrides)

    from django_redis import get_redis_connection

    pool = getattr(get_redis_connection(config.redis_alias, write=True), "connection_pool", None)
    if type(pool) is not redis.ConnectionPool:  # Sentinel, blocking or custom: no asyncio twin
        return None
    connection_class = _async_connection_class(pool.connection_class)
    if connection_class is None:
        return None
    kwargs = {name: value for name, value in pool.connection_kwargs.items() if name in _COPIED}
    if issubclass(pool.connection_class, redis.SSLConnection):
        kwargs.update(
            (name, value)
            for name, value in pool.connection_kwargs.items()
            if name.startswith("ssl_")
        )
    return redis.asyncio.Redis(
        connection_pool=redis.asyncio.ConnectionPool(
            connection_class=connection_class,
            max_connections=pool.max_connections,
            **kwargs,
            **overrides,
        )
    )


def _async_connection_class(sync_class: type) -> type | None:
    """The asyncio connection class that does what ``sync_class`` does, if there is one."""
    for sync, asynchronous in (
        (redis.SSLConnection, redis.asyncio.SSLConnection),
        (redis.UnixDomainSocketConnection, redis.asyncio.UnixDomainSocketConnection),
    ):
        if issubclass(sync_class, sync):
            return asynchronous
    if sync_class is redis.Connection:
        return redis.asyncio.Connection
    try:
        import fakeredis
        import fakeredis.aioredis
    except ImportError:  # pragma: no cover - fakeredis is a test dependency
        return None
    if issubclass(sync_class, fakeredis.FakeRedisConnection):
        # The tests' stand-in for Redis: the same fake server, reached from asyncio.
        return fakeredis.aioredis.FakeAsyncRedisConnection
    return None


async def call(
    default: T,
    client: AsyncClient,
    operation: Callable[[AsyncClient, Config], Awaitable[T]],
    *,
    shard: keyspace.Shard | None = None,
    writes: bool = False,
) -> T:
    """``connection.call`` for ``client``: ``default`` if Redis fails or a breaker is open.

    A call whose connection turns out to be closed (a Redis restarted since it was opened) is
    made once more, on a new connection, after ``drop_idle`` (see there)."""
    config = get_config()
    attempt = breakers.Attempt(config, shard, writes=writes)
    if not attempt.allowed:
        return default
    try:
        try:
            result = await operation(client, config)
        except redis.exceptions.ConnectionError:
            if not await drop_idle(client):
                raise
            result = await operation(client, config)
    except connection.REDIS_ERRORS as error:
        attempt.failed(error)
        return default
    attempt.succeeded()
    return result


async def drop_idle(client: AsyncClient) -> bool:
    """Close every idle connection of ``client``'s pool, so that the next calls open new ones;
    False for a client without a pool of its own (a cluster's handles its nodes itself).

    A restarted Redis leaves the pool holding connections to the process that is gone.
    redis-py's sync pool notices such a connection when it hands it out and opens a new one;
    its asyncio pool does not (redis-py 8.1 skips the check while maintenance notifications
    are on, their default with RESP3), and hands them out one by one: each call that gets one
    fails, opens the breaker anew, and stops recording for ``FAILURE_BACKOFF`` seconds. After
    one of them fails, the others are as dead, so all go at once, and the failed call is made
    again on a new connection. Sending it again is safe even where the first one reached
    Redis: what a visit writes (set members, maxima, numbered hit batches) comes to the same
    when written twice. A Redis that is really down refuses the new connection at once,
    and the call fails as it would have.
    """
    if not isinstance(client, redis.asyncio.Redis):
        return False
    await client.connection_pool.disconnect(inuse_connections=False)
    return True


async def run(client: AsyncClient, calls: Sequence[ScriptCall]) -> list[Any]:
    """``store.scripts.run`` with an asyncio client: each call one awaited EVALSHA (a recorded
    visit is one call), or EVAL on a server that lacks the script (see ``store.scripts._run_one``).
    """
    replies = []
    for call in calls:
        sha = sha1_of(call.source)
        try:
            reply = await client.evalsha(sha, len(call.keys), *call.keys, *call.args)
        except NoScriptError:
            reply = await client.eval(call.source, len(call.keys), *call.keys, *call.args)
        replies.append(reply)
    return replies


@receiver(config_changed, dispatch_uid="whos_online.aio.reset")
def reset(**kwargs: object) -> None:
    """Forget every loop's clients (settings changed); their connections close with them."""
    with _lock:
        _clients.clear()
