"""Redis clients for whos_online, and the one call that goes through the circuit breakers.

Two clients exist per Redis target. The *request* client serves the middleware, the template tags
and the API: it has short timeouts and no retries, because redis-py's default retry turns a
refused connection into seconds and a frozen server into a minute per call. The *admin* client
serves the cleanup command, which may wait longer and should fail loudly instead.

Where the servers are comes from ``REDIS_URL`` (a node of a cluster with ``REDIS_CLUSTER``) or from
the django-redis cache named by ``REDIS_ALIAS``: its host, password, TLS and connection class, or,
for a Sentinel-managed alias, its Sentinels and service name. The clients are always built here,
never taken from django-redis as they are, so that every kind of deployment keeps the timeouts
and the no-retry policy above. They are cached for the life of the process, like django-redis
caches its pools, because creating a pool per request would open a TCP connection per request;
``reset()`` drops them when settings change.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar

import redis
import redis.utils
from django.dispatch import receiver
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ReadOnlyError, RedisClusterException
from redis.retry import Retry
from redis.sentinel import SentinelConnectionPool

from whos_online.backend.breakers import Attempt, breaker, refusals
from whos_online.backend.sentinels import FollowingSentinel
from whos_online.config.process import PerProcess
from whos_online.config.settings import Config, config_dropped, get_config

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from whos_online.backend.keyspace import Shard

logger = logging.getLogger("whos_online")

T = TypeVar("T")

#: A client of one Redis (plain or Sentinel-managed) or of a Redis Cluster.
Client: TypeAlias = "redis.Redis | RedisCluster"

#: Seconds to connect and to wait for a reply on the request path. A healthy Redis on the same
#: network answers in well under a millisecond; anything slower than this is treated as an outage.
REQUEST_TIMEOUT: Final = 0.25
#: The cleanup command prunes in chunks that each take milliseconds; give it room on a busy server.
ADMIN_TIMEOUT: Final = 10.0
#: Seconds between two questions to the Sentinels about which server is the master. Sentinel
#: leaves a demoted master writable for seconds after a failover, and redis-py's Sentinel pool
#: asks only when it opens a connection: without asking again, pooled connections would go on
#: writing to the old master, and those writes are lost when it turns into a replica.
MASTER_CHECK_INTERVAL: Final = 1.0

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


#: A forked process makes its own: its parent's pools, and the threads that listen to the
#: Sentinels for them, did not come along.
_clients: Final = PerProcess(_Clients)
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
    for client in [] if held is None else list(held.made.values()):
        close(client)


@receiver(config_dropped, dispatch_uid="whos_online.backend.connection.reset")
def reset(**kwargs: object) -> None:
    release()
    breaker.reset()
    refusals.reset()
    masters.reset()
