"""Following a Sentinel failover the moment the replica is promoted, not a second later.

Sentinel names the promoted replica only once it has read the new role from the replica's INFO,
about a second after sending it ``REPLICAOF NO ONE``; all that time the former master stays a
writable master, and every write sent there is lost when Sentinel later turns it into a replica.
Asking the Sentinels more often cannot close that gap: they do not know yet. The Sentinel leading
the failover does announce the promotion on its pub/sub channels, though, as it sends the command
(``+failover-state-wait-promotion``). So each process listens to every Sentinel on a daemon thread
and, on that message, points its pool at the promoted replica at once. The Sentinels' own answer
takes over again as soon as it names anything but the replaced master, when the failover is
announced as aborted, or after ``PROMOTION_TRUST`` seconds in any case.

The listener is a help, never a dependency: a Sentinel that cannot be reached is tried again
every ``LISTEN_RETRY`` seconds, and meanwhile ``connection.MasterWatch`` keeps asking the
Sentinels once a second, as it would without it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

import redis
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool

logger = logging.getLogger("whos_online")

#: Seconds for which an announced promotion outweighs Sentinels that still name the replaced
#: master. Sentinel names the new master once the failover ends, normally within seconds; this
#: bounds the harm of a listener that missed the announcement of an abort.
PROMOTION_TRUST: Final = 60.0
#: Seconds after the announcement during which a READONLY reply from the promoted replica means
#: "not promoted yet" (the announcement can overtake the command it announces) rather than a fault.
PROMOTION_GRACE: Final = 1.0
#: Seconds between two attempts to listen to a Sentinel that could not be reached.
LISTEN_RETRY: Final = 1.0
#: Seconds a listener waits for a message before checking whether it should stop.
POLL: Final = 0.5

PROMOTED: Final = "+failover-state-wait-promotion"
SWITCHED: Final = "+switch-master"
ABORTED: Final = "-failover-abort-slave-timeout"
CHANNELS: Final = (PROMOTED, SWITCHED, ABORTED)

Address = tuple[str, int]


@dataclass(frozen=True)
class Promotion:
    promoted: Address
    replaced: Address
    at: float


class FollowingSentinel(Sentinel):
    """redis-py's Sentinel manager, with announced promotions taking precedence over answers that
    still name the master being replaced."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore [no-untyped-call]
        self.promotions: dict[str, Promotion] = {}
        self._listeners: list[SentinelListener] = []
        self._listening_in: int | None = None
        self._lock = threading.Lock()

    def discover_master(self, service_name: str) -> Address:
        promotion = self.promotions.get(service_name)
        try:
            named: Address = super().discover_master(service_name)  # type: ignore [no-untyped-call]
        except MasterNotFoundError:
            if promotion is None:
                raise
            return promotion.promoted
        if promotion is None:
            return named
        if named == promotion.replaced and time.monotonic() - promotion.at < PROMOTION_TRUST:
            return promotion.promoted
        self._drop(service_name, promotion)
        return named

    def promote(self, service_name: str, promoted: Address, replaced: Address) -> None:
        self.promotions[service_name] = Promotion(promoted, replaced, time.monotonic())

    def abandon(self, service_name: str) -> None:
        self.promotions.pop(service_name, None)

    def just_promoted(self, service_name: str, address: Address | None) -> bool:
        """Whether ``address`` was announced as promoted within ``PROMOTION_GRACE`` seconds."""
        promotion = self.promotions.get(service_name)
        return (
            promotion is not None
            and promotion.promoted == address
            and time.monotonic() - promotion.at < PROMOTION_GRACE
        )

    def _drop(self, service_name: str, promotion: Promotion) -> None:
        if self.promotions.get(service_name) is promotion:
            self.promotions.pop(service_name, None)

    def listen(self, pool: SentinelConnectionPool) -> None:
        """Start listening to every Sentinel for ``pool``'s service, once per process (a forked
        worker inherits no threads, so it starts its own)."""
        pid = os.getpid()
        if self._listening_in == pid:
            return
        with self._lock:
            if self._listening_in == pid:
                return
            self._listening_in = pid
            self._listeners = [
                SentinelListener(self, sentinel, pool) for sentinel in self.sentinels
            ]
            for listener in self._listeners:
                listener.start()

    def stop_listening(self) -> None:
        with self._lock:
            listeners, self._listeners = self._listeners, []
            self._listening_in = None
        for listener in listeners:
            listener.stop()


class SentinelListener(threading.Thread):
    """Listens to one Sentinel for news of ``pool``'s service and applies it to the pool."""

    def __init__(
        self, manager: FollowingSentinel, sentinel: redis.Redis, pool: SentinelConnectionPool
    ) -> None:
        sentinel_pool = sentinel.connection_pool
        kwargs = sentinel_pool.connection_kwargs
        super().__init__(
            name=f"whos_online Sentinel listener {kwargs.get('host')}:{kwargs.get('port')}",
            daemon=True,
        )
        self.manager = manager
        self.pool = pool
        self.service_name: str = pool.service_name
        # A connection of its own, decoding replies; the timeouts and no-retry policy are the
        # Sentinel client's, so that a Sentinel that stops answering is noticed.
        self.client = redis.Redis(
            connection_pool=redis.ConnectionPool(
                connection_class=sentinel_pool.connection_class,
                **{**kwargs, "decode_responses": True},
            )
        )
        self._stopping = threading.Event()
        #: Set once the listener has subscribed (again, after a reconnection: cleared meanwhile).
        self.subscribed = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        while not self._stopping.is_set():
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)  # type: ignore [no-untyped-call]
            try:
                pubsub.subscribe(*CHANNELS)
                self.subscribed.set()
                while not self._stopping.is_set():
                    message = pubsub.get_message(timeout=POLL)
                    if message is not None:
                        self.handle(message["channel"], message["data"])
            except (redis.exceptions.RedisError, OSError):
                # Not worth a warning: requests still ask the Sentinels once a second.
                logger.debug("whos_online cannot listen to %s; retrying.", self.name, exc_info=True)
                self._stopping.wait(LISTEN_RETRY)
            finally:
                self.subscribed.clear()
                pubsub.close()
        self.client.close()

    def handle(self, channel: str, data: str) -> None:
        """Apply one Sentinel message. The formats are Sentinel's:

        - ``+failover-state-wait-promotion slave <name> <ip> <port> @ <service> <ip> <port>``
        - ``+switch-master <service> <old ip> <old port> <new ip> <new port>``
        - ``-failover-abort-slave-timeout master <service> <ip> <port>``
        """
        fields = data.split()
        try:
            if channel == PROMOTED and fields[5] == self.service_name:
                promoted = (fields[2], int(fields[3]))
                self.manager.promote(self.service_name, promoted, (fields[6], int(fields[7])))
            elif channel == SWITCHED and fields[0] == self.service_name:
                promoted = (fields[3], int(fields[4]))
                self.manager.promote(self.service_name, promoted, (fields[1], int(fields[2])))
            elif channel == ABORTED and fields[1] == self.service_name:
                self.manager.abandon(self.service_name)
            else:
                return
        except (IndexError, ValueError):
            logger.debug("whos_online ignores a Sentinel message it cannot read: %r", data)
            return
        # Drops the pool's idle connections if the master it names has changed; if the
        # Sentinels cannot be asked now, the next request asks again.
        with contextlib.suppress(redis.exceptions.RedisError, OSError):
            self.pool.get_master_address()  # type: ignore [no-untyped-call]
