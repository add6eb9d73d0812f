"""Redis clients for whos_online, and the circuit breaker that keeps an outage off the page.

Two clients exist per Redis target. The *request* client serves the middleware, the template tags
and the API: it has short timeouts and no retries, because redis-py's default retry turns a
refused connection into seconds and a frozen server into a minute per call. The *admin* client
serves the cleanup command, which may wait longer and should fail loudly instead.

Both share the server settings of the django-redis cache named by ``REDIS_ALIAS`` (host,
password, TLS, connection class…) or come from ``REDIS_URL``. The clients are cached for the life
of the process, like django-redis caches its pools, because creating a pool per request would
open a TCP connection per request; ``reset()`` drops them when settings change.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Final

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from whos_online.conf import Config, get_config

logger = logging.getLogger("whos_online")

#: Seconds to connect and to wait for a reply on the request path. A healthy Redis on the same
#: network answers in well under a millisecond; anything slower than this is treated as an outage.
REQUEST_TIMEOUT: Final = 0.25
#: The cleanup command prunes in chunks that each take milliseconds; give it room on a busy server.
ADMIN_TIMEOUT: Final = 10.0

#: Errors that mean "Redis is unavailable or refused the write"; everything else is a bug.
REDIS_ERRORS: Final = (redis.exceptions.RedisError, OSError)

_clients: dict[tuple[str, bool], redis.Redis] = {}
_clients_lock = threading.Lock()


def request_client() -> redis.Redis:
    return _client(get_config(), admin=False)


def admin_client() -> redis.Redis:
    return _client(get_config(), admin=True)


def _client(config: Config, *, admin: bool) -> redis.Redis:
    key = (config.redis_target, admin)
    client = _clients.get(key)
    if client is None:
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = _make_client(config, admin=admin)
    return client


def _make_client(config: Config, *, admin: bool) -> redis.Redis:
    timeout = ADMIN_TIMEOUT if admin else REQUEST_TIMEOUT
    overrides: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 0,
    }
    if config.redis_url:
        return redis.Redis.from_url(config.redis_url, **overrides)

    from django_redis import get_redis_connection

    base = get_redis_connection(config.redis_alias, write=True)
    pool = getattr(base, "connection_pool", None)
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        # Sentinel, cluster or custom pools know how to find their servers; use them as they are.
        return base  # type: ignore [no-any-return]
    assert isinstance(pool, redis.ConnectionPool)
    kwargs = {**pool.connection_kwargs, **overrides}
    # retry_on_timeout would retry despite Retry(…, 0) in older redis-py; never wanted here.
    kwargs.pop("retry_on_timeout", None)
    kwargs.pop("retry_on_error", None)
    new_pool = redis.ConnectionPool(
        connection_class=pool.connection_class,
        max_connections=pool.max_connections,
        **kwargs,
    )
    return redis.Redis(connection_pool=new_pool)


def reset() -> None:
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.connection_pool.disconnect()
    breaker.reset()


class CircuitBreaker:
    """Stops calling a Redis target for ``FAILURE_BACKOFF`` seconds after it failed.

    An outage therefore costs each process at most one timeout per back-off period, and the log
    gets one warning when an outage starts and one info line when Redis answers again.

    Each failure starts a new *generation* of the target. A caller notes the generation before it
    calls Redis and hands it to ``succeeded``: a reply to a call that began before another
    thread's failure says nothing about Redis now, so it neither closes the breaker nor logs a
    recovery that did not happen.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open_until: dict[str, float] = {}
        self._down: set[str] = set()
        self._generations: dict[str, int] = {}

    def generation(self, target: str) -> int:
        return self._generations.get(target, 0)

    def allows(self, target: str, now: float | None = None) -> bool:
        until = self._open_until.get(target)
        return until is None or (now if now is not None else time.monotonic()) >= until

    def failed(self, target: str, error: BaseException, backoff: float) -> None:
        with self._lock:
            self._open_until[target] = time.monotonic() + backoff
            self._generations[target] = self._generations.get(target, 0) + 1
            first = target not in self._down
            self._down.add(target)
        if first:
            logger.warning(
                "Redis at %s is unavailable (%s: %s); whos_online stops recording and shows "
                "empty counts, and retries every %g s.",
                target,
                type(error).__name__,
                error,
                backoff,
            )

    def succeeded(self, target: str, generation: int) -> None:
        """Note a reply to a call made when the target was at ``generation``."""
        if target not in self._down:
            return
        with self._lock:
            recovered = target in self._down and self._generations.get(target, 0) == generation
            if recovered:
                self._down.discard(target)
                self._open_until.pop(target, None)
        if recovered:
            logger.info("Redis at %s answers again; whos_online resumes recording.", target)

    def reset(self) -> None:
        with self._lock:
            self._open_until.clear()
            self._down.clear()
            self._generations.clear()


breaker: Final = CircuitBreaker()
