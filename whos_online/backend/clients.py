"""The asyncio client of the live streams' subscription (``live.subscription``): one per
process, made from the settings that make the request client (``connection``).

``REDIS_URL`` (on a Cluster, one of its nodes, taken in turn after a failure: a message published
on a Cluster reaches the subscribers of every node), or the django-redis cache named by
``REDIS_ALIAS``: its host, password, TLS and database, or its Sentinels and service name, whose
pool asks the Sentinels for the master at each new connection, so that subscribing again after a
failover goes to the new master. Like the request client: short timeouts, no retries, no health
checks of redis-py's own (the subscriber pings, and subscribes again after a failure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import redis
import redis.asyncio
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.sentinel import SentinelConnectionPool

from whos_online.backend import connection

if TYPE_CHECKING:
    from whos_online.config.settings import Config

#: Seconds to connect, and to wait for the answer to a command (a subscription, a ping): a
#: subscriber shares its event loop with every stream of the process, which may delay a read.
TIMEOUT: Final = 2.0
#: What a connection keeps of a synchronous pool's options.
_KEPT: Final = frozenset({"host", "port", "db", "username", "password", "path", "client_name"})


def _overrides() -> dict[str, Any]:
    return {
        "socket_timeout": TIMEOUT,
        "socket_connect_timeout": TIMEOUT,
        "retry": Retry(NoBackoff(), 0),
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
    known = connection.request_client()
    found = [(host, port)]
    for node in known.get_nodes() if connection.is_cluster(known) else []:  # type: ignore [union-attr]
        address = (node.host, int(node.port))
        if address not in found:
            found.append(address)
    return found


def _from_alias(alias: str) -> redis.asyncio.Redis:
    from django_redis import get_redis_connection

    pool = getattr(get_redis_connection(alias, write=True), "connection_pool", None)
    if isinstance(pool, SentinelConnectionPool):
        sentinels, sentinel_kwargs, kwargs = connection.sentinel_parts(pool, _overrides())
        sentinel_kwargs["retry"] = kwargs["retry"] = Retry(NoBackoff(), 0)
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
