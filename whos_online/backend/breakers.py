"""The circuit breakers that keep a Redis outage off the page.

After an outage is seen, a process stops calling that Redis target for ``FAILURE_BACKOFF``
seconds: an outage then costs each process one failed call per back-off period, and the log one
warning per outage rather than one per request. A lost connection (refused, reset, closed, a name
that does not resolve) is an outage at once; a timeout is a strike, and an outage only when another
failure follows within the back-off with no success between: one slow read under load is no
outage, and a frozen server costs two timeouts before the breaker opens. A Redis that answers but
refuses writes (out of memory, a replica) opens a breaker of its own, which stops writes only, so
that the page still shows who is online.

Used by ``connection.call``, which makes the calls, and by the request path, which asks whether a
write may go before it promises one with a throttle cookie; this module makes none, so that it
can be read, and tested, on its own.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Final

import redis
from redis.exceptions import ReadOnlyError

if TYPE_CHECKING:
    from whos_online.backend.keyspace import Shard
    from whos_online.config.settings import Config

logger = logging.getLogger("whos_online")


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
        self._failures = 0

    def generation(self, target: str) -> int:
        return self._generations.get(target, 0)

    @property
    def failures(self) -> int:
        """How many calls failed so far, to any target: what a write succeeded "after"."""
        return self._failures

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
            self._failures += 1
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
            self._failures = 0


breaker: Final = CircuitBreaker()
#: Opened by a Redis that answers but refuses writes; it stops writes only.
refusals: Final = CircuitBreaker(
    "Redis at %s refuses writes (%s: %s); whos_online stops recording, still shows who is "
    "online, and tries a write again every %g s.",
    "Redis at %s takes writes again; whos_online resumes recording.",
)


def known_to_fail(config: Config, shard: Shard | None, *, writes: bool) -> bool:
    """Whether calls to ``shard``'s target (writes, with ``writes``) are known to fail: one
    failed, or a write was refused, and none has succeeded since. Unlike ``Attempt.allowed``,
    this stays true once the back-off has passed, until a call shows that Redis answers again:
    the request path hands out no throttle cookie meanwhile (docs/failure.md)."""
    target = breaker_target(config, shard)
    return breaker.is_down(target) or (writes and refusals.is_down(target))


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
        self.allowed = breaker.allows(self.target) and not (
            writes and not refusals.allows(self.target)
        )
        self.generation = breaker.generation(self.target)
        self.refused = refusals.generation(self.target)

    def failed(self, error: BaseException) -> None:
        if refuses_writes(error):
            refusals.failed(self.target, error, self.backoff)
            breaker.succeeded(self.target, self.generation)  # it answered
        else:
            breaker.failed(self.target, error, self.backoff)

    def succeeded(self) -> None:
        breaker.succeeded(self.target, self.generation)
        if self.writes:
            refusals.succeeded(self.target, self.refused)


def failures() -> int:
    """How many calls have failed in this process, or been refused: a visit stored before the
    latest one may have been lost since (see ``throttle.RecentVisitors``)."""
    return breaker.failures + refusals.failures
