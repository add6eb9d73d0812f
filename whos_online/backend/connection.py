"""The one call that goes to Redis on the request path (``call``): with the request client,
behind the circuit breakers that keep an outage off the page, failing open; and, under Sentinel,
which server is the master now.

An outage costs each process one failed call per ``FAILURE_BACKOFF`` and the log one warning
("Redis connections" in docs/how-it-works.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Final, TypeVar

import redis
import redis.utils
from redis.exceptions import ReadOnlyError
from redis.sentinel import SentinelConnectionPool

from whos_online.backend.clients import REDIS_ERRORS, Client, request_client
from whos_online.backend.sentinels import FollowingSentinel
from whos_online.config import process
from whos_online.config.process import PerProcess
from whos_online.config.settings import Config, get_config

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from whos_online.backend.keyspace import Shard


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


_masters: Final = PerProcess(MasterWatch)


def masters() -> MasterWatch:
    """This process's watch of the Sentinels (``config.process``)."""
    return _masters.get()


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
        watch = masters()
        watch.before_call(client)
        try:
            result = operation(client, config)
        except REDIS_ERRORS as error:
            if not watch.moved_after(client, error):
                raise
            result = operation(client, config)
    except REDIS_ERRORS as error:
        attempt.failed(error)
        return default
    attempt.succeeded()
    return result


#: Error codes of a Redis that answers but will not take writes: out of memory under
#: ``noeviction``, a replica, or a failed snapshot with ``stop-writes-on-bgsave-error``. Inside a
#: script, Redis 7 and later keep the code at the start of the message; 6.2 puts it after a dash.
_WRITE_REFUSALS: Final = re.compile(r"(?:^|-)(?:OOM|READONLY|MISCONF) ")
#: Seconds a strike stands at least, whatever the back-off: with ``FAILURE_BACKOFF`` 0 a frozen
#: server is still an outage, and logged as one.
MIN_STRIKE_WINDOW: Final = 1.0


def refuses_writes(error: BaseException) -> bool:
    """Whether ``error`` says Redis is up and reads work, but writes are refused."""
    if isinstance(error, (redis.exceptions.OutOfMemoryError, ReadOnlyError)):
        return True
    return isinstance(error, redis.exceptions.ResponseError) and bool(
        _WRITE_REFUSALS.search(str(error))
    )


def timed_out(error: BaseException) -> bool:
    """Whether ``error`` is a wait that ran out (for a reply, or to connect), rather than a
    connection refused or lost: Redis may only have been slow to answer."""
    return isinstance(error, (redis.exceptions.TimeoutError, TimeoutError, asyncio.TimeoutError))


class CircuitBreaker:
    """Stops calling a Redis target for ``FAILURE_BACKOFF`` seconds once it is seen to be out.

    A failure opens the breaker at once, unless it is a timeout (``timed_out``): that is a
    *strike*, which opens it only if another failure follows within ``window`` seconds (the
    back-off unless told, ``MIN_STRIKE_WINDOW`` at least) with no success between, or if the
    target is down already. A slow
    read under load therefore costs nothing more than itself, and an outage costs each process
    at most two timeouts when it starts and one per back-off period after; the log gets one
    warning when the breaker opens, with the error, and one info line when Redis answers again.

    Each failure, strikes included, starts a new *generation* of the target. A caller notes the
    generation before it calls Redis and hands it to ``succeeded``: a reply to a call that began
    before another thread's failure says nothing about Redis now, so it neither closes the
    breaker, nor wipes out a strike, nor logs a recovery that did not happen.
    """

    def __init__(self, failure: str = "", recovery: str = "") -> None:
        #: Logged as a warning with the target, the error's type and text, and the back-off.
        self.failure = failure or (
            "Redis at %s is unavailable (%s: %s); whos_online stops recording and shows empty "
            "counts, and retries every %g s."
        )
        #: Logged as info with the target.
        self.recovery = recovery or "Redis at %s answers again; whos_online resumes recording."
        self._lock = threading.Lock()
        self._open_until: dict[str, float] = {}
        self._down: set[str] = set()
        #: When (monotonic) a target timed out while up, and how long that strike stands.
        self._strikes: dict[str, tuple[float, float]] = {}
        self._generations: dict[str, int] = {}

    def generation(self, target: str) -> int:
        return self._generations.get(target, 0)

    def is_down(self, target: str) -> bool:
        """Whether the last call to ``target`` that says anything failed: from a failure until
        a call succeeds, whether or not the back-off has passed (``allows`` says whether to try
        again)."""
        return target in self._down

    def allows(self, target: str, now: float | None = None) -> bool:
        until = self._open_until.get(target)
        return until is None or (now if now is not None else time.monotonic()) >= until

    def failed(
        self, target: str, error: BaseException, backoff: float, *, window: float | None = None
    ) -> None:
        """Note a failed call to ``target``: open the breaker for ``backoff`` seconds, or only
        strike it if ``error`` is a timeout and no strike stands (see the class)."""
        now = time.monotonic()
        with self._lock:
            self._generations[target] = self._generations.get(target, 0) + 1
            if timed_out(error) and not self._struck(target, now):
                stands = backoff if window is None else window
                self._strikes[target] = (now, max(stands, MIN_STRIKE_WINDOW))
                return
            self._strikes.pop(target, None)
            self._open_until[target] = now + backoff
            first = target not in self._down
            self._down.add(target)
        if first:
            logger.warning(self.failure, target, type(error).__name__, error, backoff)

    def _struck(self, target: str, now: float) -> bool:
        """Whether a failure of ``target`` now opens its breaker even if it is a timeout: it is
        down already, or a strike stands (no success since, within its window)."""
        if target in self._down:
            return True
        struck, window = self._strikes.get(target, (float("-inf"), 0.0))
        return now - struck <= window

    def succeeded(self, target: str, generation: int) -> None:
        """Note a reply to a call made when the target was at ``generation``."""
        if target not in self._down and target not in self._strikes:
            return
        with self._lock:
            if self._generations.get(target, 0) != generation:
                return
            self._strikes.pop(target, None)
            recovered = target in self._down
            if recovered:
                self._down.discard(target)
                self._open_until.pop(target, None)
        if recovered:
            logger.info(self.recovery, target)

    def reset(self) -> None:
        with self._lock:
            self._open_until.clear()
            self._down.clear()
            self._strikes.clear()
            self._generations.clear()


_breaker: Final = PerProcess(CircuitBreaker)
_refusals: Final = PerProcess(
    lambda: CircuitBreaker(
        "Redis at %s refuses writes (%s: %s); whos_online stops recording, still shows who is "
        "online, and tries a write again every %g s.",
        "Redis at %s takes writes again; whos_online resumes recording.",
    )
)


def breaker() -> CircuitBreaker:
    """This process's breaker of the calls to Redis."""
    return _breaker.get()


def refusals() -> CircuitBreaker:
    """This process's breaker opened by a Redis that answers but refuses writes; it stops
    writes only."""
    return _refusals.get()


def known_to_fail(config: Config, shard: Shard | None, *, writes: bool) -> bool:
    """Whether calls to ``shard``'s target (writes, with ``writes``) are known to fail: one
    failed, or a write was refused, and none has succeeded since. Unlike ``Attempt.allowed``,
    this stays true once the back-off has passed, until a call shows that Redis answers again:
    the request path hands out no throttle cookie meanwhile (docs/failure.md)."""
    target = breaker_target(config, shard)
    return breaker().is_down(target) or (writes and refusals().is_down(target))


def breaker_target(config: Config, shard: Shard | None) -> str:
    """What the breaker keys on: the whole target, or on a cluster each shard's slot, so that a
    master that is down takes only its own shards out."""
    if shard is None or not config.redis_cluster:
        return config.redis_target
    return f"{config.redis_target} {{{shard.tag}}}"


class Attempt:
    """One call's dealings with the breakers of its target: whether it may go at all, and what
    its outcome says about Redis (see ``connection.call``).

    Redis errors open the breaker of the target (of ``shard``'s slot on a cluster). A Redis that
    answers but refuses writes (``refuses_writes``) opens only the ``refusals`` breaker, which
    stops calls that ``writes``: reads go on showing who is online, and a successful read is no
    sign that writes work again.
    """

    def __init__(self, config: Config, shard: Shard | None, *, writes: bool) -> None:
        self.backoff = config.failure_backoff
        self.target = breaker_target(config, shard)
        self.writes = writes
        self.breaker, self.refusals = breaker(), refusals()
        self.allowed = self.breaker.allows(self.target) and not (
            writes and not self.refusals.allows(self.target)
        )
        self.generation = self.breaker.generation(self.target)
        self.refused = self.refusals.generation(self.target)

    def failed(self, error: BaseException) -> None:
        # A write that failed, or was refused, may not be stored: what the process's memory of
        # recent visitors vouches for is so no longer (``store.epochs.generation``).
        process.note_loss()
        if refuses_writes(error):
            self.refusals.failed(self.target, error, self.backoff)
            self.breaker.succeeded(self.target, self.generation)  # it answered
        else:
            self.breaker.failed(self.target, error, self.backoff)

    def succeeded(self) -> None:
        self.breaker.succeeded(self.target, self.generation)
        if self.writes:
            self.refusals.succeeded(self.target, self.refused)
