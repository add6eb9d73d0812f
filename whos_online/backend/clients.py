"""The Redis clients whos_online makes, one of each kind per process and Redis target: the
request client, the cleanup's patient admin client, and the live streams' asyncio client.

Built here rather than taken from django-redis, so that every deployment gets short timeouts and
no retries ("Redis connections" in docs/how-it-works.md).
"""

from __future__ import annotations

import inspect
import threading
import weakref
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import redis
import redis.asyncio
import redis.utils
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection, parse_url
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import SentinelConnectionPool

from whos_online.backend.sentinels import FollowingSentinel
from whos_online.config.process import PerProcess
from whos_online.config.settings import Config, get_config

if TYPE_CHECKING:
    from collections.abc import Callable


#: A client of one Redis (plain or Sentinel-managed) or of a Redis Cluster.
Client: TypeAlias = "redis.Redis | RedisCluster"


#: Seconds to connect and to wait for a reply on the request path. A healthy Redis on the same
#: network answers in well under a millisecond; anything slower than this is treated as an outage.
REQUEST_TIMEOUT: Final = 0.25


#: The cleanup command prunes in chunks that each take milliseconds; give it room on a busy server.
ADMIN_TIMEOUT: Final = 10.0


#: Errors that mean "Redis is unavailable or refused the write"; everything else is a bug.
#: redis-py raises RedisClusterException (not a RedisError) when no node of a cluster answers.
REDIS_ERRORS: Final = (redis.exceptions.RedisError, OSError, RedisClusterException)


class _Clients:
    """The clients this process made, by Redis target and kind (request path or admin)."""

    def __init__(self) -> None:
        self.made: dict[tuple[str, bool], Client] = {}
        #: Held while a client is made, which on a cluster connects to its nodes: so it must be
        #: of the kind the process's threads are (gevent's, in a gevent worker; ``config.process``).
        self.lock = threading.Lock()


def _close_all(held: _Clients) -> None:
    for client in list(held.made.values()):
        close(client)


#: A forked process makes its own: its parent's pools, and the threads that listen to the
#: Sentinels for them, did not come along. Closed when settings change, once what uses them from
#: threads of its own (the flushing thread) has stopped (``process.reset_home``).
_clients: Final = PerProcess(_Clients, dropped=_close_all)


#: The clients of one Redis that this module made, whose commands ``execute`` sends itself.
_direct: weakref.WeakSet[redis.Redis] = weakref.WeakSet()


def _pool_wants_command_name() -> bool:
    # redis-py before 5.3 needs the command's name to hand out a connection; later versions
    # warn of its deprecation when given one.
    parameter = inspect.signature(redis.ConnectionPool.get_connection).parameters.get(
        "command_name"
    )
    return parameter is not None and parameter.default is inspect.Parameter.empty


_CONNECTION_ARGS: Final = ("EVALSHA",) if _pool_wants_command_name() else ()


def _hiredis_packer() -> Callable[[tuple[str | int | float, ...]], bytes] | None:
    # Where redis-py uses hiredis (HIREDIS_AVAILABLE), it packs every command with hiredis's
    # pack_command, encoding text as UTF-8 whatever the client's encoding, after a pass over the
    # arguments that only converts bytearrays and memoryviews, which this module never sends:
    # about 5 µs of the 7 that packing a recorded visit's 35 arguments takes. Elsewhere the
    # connection packs as usual.
    if not redis.utils.HIREDIS_AVAILABLE:
        return None
    import hiredis

    return getattr(hiredis, "pack_command", None)


_pack_command: Final = _hiredis_packer()


def execute(client: Client, *args: str | int | float) -> Any:
    """Run one command and return its reply as Redis sent it (no response callback applies).

    A client of one Redis that this module made sends it straight over a connection of its pool.
    redis-py's ``execute_command`` wraps every call in its retry policy, its observability hooks
    and its reply parsing, which cost about 15 µs of CPU per call here, as much as Redis takes to
    run a recorded visit's script, and which none of this module's calls uses: they never retry,
    and what they run are scripts, whose replies need no parsing. The connection's own error
    handling is kept: it disconnects on a timeout or a broken socket, and a Sentinel-managed one
    when its master has turned into a replica. Other clients (a cluster, a pool of a kind this
    module did not copy) run the command as usual.
    """
    if client not in _direct:
        return client.execute_command(*args)  # type: ignore [no-untyped-call]
    assert isinstance(client, redis.Redis)
    pool = client.connection_pool
    conn = pool.get_connection(*_CONNECTION_ARGS)
    try:
        if _pack_command is None:
            conn.send_command(*args)  # type: ignore [no-untyped-call]
        else:
            conn.send_packed_command([_pack_command(args)])  # type: ignore [no-untyped-call]
        return conn.read_response()
    finally:
        pool.release(conn)


def request_client() -> Client:
    return _client(get_config(), admin=False)


def admin_client() -> Client:
    return _client(get_config(), admin=True)


def is_cluster(client: Client) -> bool:
    return isinstance(client, RedisCluster)


def _client(config: Config, *, admin: bool) -> Client:
    key = (config.redis_target, admin)
    clients = _clients.get()
    client = clients.made.get(key)
    if client is None:
        with clients.lock:
            client = clients.made.get(key)
            if client is None:
                client = clients.made[key] = _make_client(config, admin=admin)
                if isinstance(client, redis.Redis) and _made_here(client):
                    _direct.add(client)
    return client


def _made_here(client: redis.Redis) -> bool:
    """Whether ``_make_client`` built ``client`` itself, with a pool of redis-py's own kind,
    rather than handing back a django-redis client it could not copy."""
    return type(client.connection_pool) in {redis.ConnectionPool, SentinelConnectionPool}


def no_retry(timeout: float) -> dict[str, Any]:
    """What every client of this module gets: its timeouts, no retries, no health checks."""
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 0,
    }


def _make_client(config: Config, *, admin: bool) -> Client:
    overrides = no_retry(ADMIN_TIMEOUT if admin else REQUEST_TIMEOUT)
    if config.redis_url and config.redis_cluster:
        # The cluster client follows MOVED and ASK replies itself; Retry(…, 0) stops it from
        # retrying a failed node, and the timeouts reach every node's connections.
        retry = overrides.pop("retry")
        if not hasattr(Retry, "get_retries"):
            # redis-py 5 retries a failed cluster call three times whatever ``retry`` says; the
            # argument that stops it warns of its deprecation from redis-py 6 on.
            overrides["cluster_error_retry_attempts"] = 0
        return RedisCluster.from_url(config.redis_url, retry=retry, **overrides)
    if config.redis_url:
        return redis.Redis.from_url(config.redis_url, **overrides)

    from django_redis import get_redis_connection

    base = get_redis_connection(config.redis_alias, write=True)
    pool = getattr(base, "connection_pool", None)
    if isinstance(pool, SentinelConnectionPool):
        return _sentinel_client(pool, overrides)
    if not isinstance(pool, redis.ConnectionPool):
        # A pool of a kind this module cannot copy: use it as the site configured it.
        return base  # type: ignore [no-any-return]
    kwargs = {**pool.connection_kwargs, **overrides}
    drop_retry_options(kwargs)
    # A BlockingConnectionPool would make a request wait for a free connection; a plain pool
    # with the same limit raises at once instead, which the breaker treats like an outage.
    new_pool = redis.ConnectionPool(
        connection_class=pool.connection_class,
        max_connections=pool.max_connections,
        **kwargs,
    )
    return redis.Redis(connection_pool=new_pool)


def drop_retry_options(kwargs: dict[str, Any]) -> None:
    # retry_on_timeout would retry despite Retry(…, 0) in older redis-py; never wanted here.
    kwargs.pop("retry_on_timeout", None)
    kwargs.pop("retry_on_error", None)


def sentinel_parts(
    pool: SentinelConnectionPool, overrides: dict[str, Any]
) -> tuple[list[tuple[str, int]], dict[str, Any], dict[str, Any]]:
    """What a client of ``pool``'s master is made from: the Sentinels' addresses, the options
    they are asked with, and those of the master's connections, each with ``overrides``."""
    manager = pool.sentinel_manager
    sentinels = [
        (
            sentinel.connection_pool.connection_kwargs.get("host", "localhost"),
            sentinel.connection_pool.connection_kwargs.get("port", 26379),
        )
        for sentinel in manager.sentinels
    ]
    sentinel_kwargs = {**(manager.sentinel_kwargs or {}), **overrides}
    drop_retry_options(sentinel_kwargs)
    connection_kwargs = {
        name: value
        for name, value in pool.connection_kwargs.items()
        if name not in {"service_name", "sentinel_manager", "is_master", "check_connection"}
    }
    connection_kwargs.update(overrides)
    drop_retry_options(connection_kwargs)
    connection_kwargs.pop("connection_class", None)
    return sentinels, sentinel_kwargs, connection_kwargs


def _sentinel_client(pool: SentinelConnectionPool, overrides: dict[str, Any]) -> redis.Redis:
    """A client of the master that ``pool``'s Sentinels name, with our timeouts and no retries.

    The Sentinels themselves are asked with the same timeouts, so that a Sentinel that does not
    answer costs a request no more than a Redis that does not.
    """
    sentinels, sentinel_kwargs, connection_kwargs = sentinel_parts(pool, overrides)
    sentinel = FollowingSentinel(
        sentinels,
        min_other_sentinels=pool.sentinel_manager.min_other_sentinels,
        sentinel_kwargs=sentinel_kwargs,
        **connection_kwargs,
    )
    client: redis.Redis = sentinel.master_for(pool.service_name)  # type: ignore [no-untyped-call]
    return client


def close(client: Client) -> None:
    """Close every connection ``client`` holds, whatever kind of client it is."""
    if isinstance(client, RedisCluster):
        client.close()
        return
    pool = client.connection_pool
    if isinstance(pool, SentinelConnectionPool) and isinstance(
        pool.sentinel_manager, FollowingSentinel
    ):
        pool.sentinel_manager.stop_listening()
    pool.disconnect()


def release() -> None:
    """Close and drop the clients this process made, so that the next call makes new ones.

    Called as the process exits, once what it held is written: a client left to the garbage
    collector is closed while the interpreter is taken down, and redis-py's ``__del__`` then
    takes its pool's lock with half the modules gone (under gevent, redis-py 5.0 prints a
    traceback for each such client).
    """
    held = _clients.replace()
    if held is not None:
        _close_all(held)


#: Seconds for the live streams' subscriber to connect, and to wait for the answer to a command
#: (a subscription, a ping): it shares its event loop with every stream of the process.
TIMEOUT: Final = 2.0
#: What a connection keeps of a synchronous pool's options.
_KEPT: Final = frozenset({"host", "port", "db", "username", "password", "path", "client_name"})


def _overrides() -> dict[str, Any]:
    return {
        "socket_timeout": TIMEOUT,
        "socket_connect_timeout": TIMEOUT,
        "retry": AsyncRetry(NoBackoff(), 0),
        "health_check_interval": 0,
    }


def subscriber(config: Config, attempt: int = 0) -> redis.asyncio.Redis:
    """A new client for a subscription; ``attempt`` counts the failures before it (on a Cluster,
    which node to try)."""
    if config.redis_url and config.redis_cluster:
        kwargs: dict[str, Any] = {**parse_url(config.redis_url), **_overrides()}
        nodes = _cluster_nodes(kwargs["host"], kwargs["port"])
        kwargs["host"], kwargs["port"] = nodes[attempt % len(nodes)]
        return redis.asyncio.Redis(connection_pool=redis.asyncio.ConnectionPool(**kwargs))
    if config.redis_url:
        pool = redis.asyncio.ConnectionPool.from_url(config.redis_url, **_overrides())
        return redis.asyncio.Redis(connection_pool=pool)
    return _from_alias(config.redis_alias)


def _cluster_nodes(host: str, port: int) -> list[tuple[str, int]]:
    """The node of ``REDIS_URL`` first, then the others the request client knows (it learnt
    them from the cluster's slots, with no round trip now)."""
    known = request_client()
    found = [(host, port)]
    for node in known.get_nodes() if is_cluster(known) else []:  # type: ignore [union-attr]
        address = (node.host, int(node.port))
        if address not in found:
            found.append(address)
    return found


def _from_alias(alias: str) -> redis.asyncio.Redis:
    from django_redis import get_redis_connection

    pool = getattr(get_redis_connection(alias, write=True), "connection_pool", None)
    if isinstance(pool, SentinelConnectionPool):
        sentinels, sentinel_kwargs, kwargs = sentinel_parts(pool, _overrides())
        sentinel_kwargs["retry"] = kwargs["retry"] = AsyncRetry(NoBackoff(), 0)
        found = Sentinel(  # type: ignore [no-untyped-call]
            sentinels,
            min_other_sentinels=pool.sentinel_manager.min_other_sentinels,
            sentinel_kwargs=sentinel_kwargs,
            **{
                name: value
                for name, value in kwargs.items()
                if name in _KEPT or name in _overrides()
            },
        )
        client: redis.asyncio.Redis = found.master_for(pool.service_name)
        return client
    if not isinstance(pool, redis.ConnectionPool):
        msg = f"the cache alias {alias!r} has no connection pool whos_online can subscribe with"
        raise LookupError(msg)
    options = pool.connection_kwargs
    kwargs = {name: value for name, value in options.items() if name in _KEPT}
    kwargs.update(_overrides())
    kwargs["connection_class"] = _async_connection_class(pool.connection_class)
    if issubclass(pool.connection_class, redis.SSLConnection):
        kwargs.update({name: value for name, value in options.items() if name.startswith("ssl_")})
    return redis.asyncio.Redis(connection_pool=redis.asyncio.ConnectionPool(**kwargs))


def _async_connection_class(sync: type[Any]) -> type[Any]:
    """The asyncio counterpart of a synchronous connection class: TLS, a Unix socket, or plain;
    fakeredis's own for a fakeredis connection (a site's tests), which shares its server."""
    if sync.__module__.startswith("fakeredis"):
        from fakeredis import aioredis

        return aioredis.FakeAsyncRedisConnection
    if issubclass(sync, redis.SSLConnection):
        return SSLConnection
    if issubclass(sync, redis.UnixDomainSocketConnection):
        return UnixDomainSocketConnection
    return redis.asyncio.Connection
