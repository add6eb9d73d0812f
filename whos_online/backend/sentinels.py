"""Following a Sentinel failover the moment the replica is promoted, not a second later.

The Sentinels name a promoted replica about a second after promoting it, and what is written to
the former master meanwhile is lost; the Sentinel leading the failover announces the promotion at
once, so each process listens for it ("Redis connections" in docs/how-it-works.md).
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
REPLICA_FOUND: Final = "+slave"
CHANNELS: Final = (PROMOTED, SWITCHED, ABORTED, REPLICA_FOUND)
#: How many fields each channel's messages have, and which of them names the service.
_SHAPES: Final = {PROMOTED: (8, 5), SWITCHED: (5, 0), ABORTED: (4, 1), REPLICA_FOUND: (8, 5)}
#: Errors that mean "this Sentinel gave no usable answer": it could not be reached, refused the
#: question, or answered something redis-py's parsing of the replicas' states could not read.
_NO_ANSWER: Final = (
    redis.exceptions.RedisError,
    OSError,
    KeyError,
    ValueError,
    TypeError,
    AttributeError,
)

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
        #: By service, the replicas of its master that the Sentinels named when last asked.
        self.replicas: dict[str, frozenset[Address]] = {}
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

    def learn_replicas(self, service_name: str) -> frozenset[Address]:
        """Ask every Sentinel which replicas of ``service_name``'s master it knows, remember them
        all, and return them; if no Sentinel answers, what was known before stays."""
        found: set[Address] = set()
        answered = False
        for sentinel in list(self.sentinels):  # discover_master reorders the list meanwhile
            try:
                states = sentinel.sentinel_slaves(service_name)
            except _NO_ANSWER:
                continue
            answered = True
            found.update(_addresses(states))
        if answered:
            self.replicas[service_name] = frozenset(found)
        return self.replicas.get(service_name, frozenset())

    def vouches_for(self, service_name: str, address: Address) -> bool:
        """Whether the Sentinels know ``address`` as a replica of ``service_name``'s master: from
        what they said before, or else from what they say now."""
        if address in self.replicas.get(service_name, ()):
            return True
        return address in self.learn_replicas(service_name)

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


def _addresses(states: object) -> set[Address]:
    """The addresses in a reply to ``SENTINEL REPLICAS``, as redis-py parses it."""
    found: set[Address] = set()
    if not isinstance(states, list):
        return found
    for state in states:
        if isinstance(state, dict):
            host, port = state.get("ip"), state.get("port")
            if isinstance(host, str) and isinstance(port, int):
                found.add((host, port))
    return found


def _text(value: object) -> str | None:
    """A message's channel or payload as text, or None if it is not UTF-8 text."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def _address(host: str, port: str) -> Address:
    """An address of a message; ValueError unless ``port`` is a port number in ASCII digits
    (``int`` would take "1_2" or other scripts' digits too)."""
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        msg = f"not a port: {port!r}"
        raise ValueError(msg)
    return host, int(port)


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
        # A connection of its own; the timeouts and no-retry policy are the Sentinel client's,
        # so that a Sentinel that stops answering is noticed. Replies stay bytes: decoding them
        # as redis-py would raises on a message that is not UTF-8, out of ``get_message``.
        self.client = redis.Redis(
            connection_pool=redis.ConnectionPool(
                connection_class=sentinel_pool.connection_class,
                **{**kwargs, "decode_responses": False},
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
                # What the Sentinels know before any announcement is what announcements are
                # checked against (it may have changed while this listener was cut off).
                self.manager.learn_replicas(self.service_name)
                self.subscribed.set()
                while not self._stopping.is_set():
                    message = pubsub.get_message(timeout=POLL)
                    if isinstance(message, dict):
                        self.handle_safely(message.get("channel"), message.get("data"))
            except (redis.exceptions.RedisError, OSError):
                # Not worth a warning: requests still ask the Sentinels once a second.
                logger.debug("whos_online cannot listen to %s; retrying.", self.name, exc_info=True)
                self._stopping.wait(LISTEN_RETRY)
            finally:
                self.subscribed.clear()
                pubsub.close()
        self.client.close()

    def handle_safely(self, channel: object, data: object) -> None:
        """``handle``, logging rather than raising whatever it meets: an answer of a Sentinel
        that redis-py cannot parse, say. The thread lives as long as the process; what one
        message does wrong must not end it."""
        try:
            self.handle(channel, data)
        except Exception:
            logger.warning(
                "whos_online could not apply a Sentinel message: %r", data, exc_info=True
            )

    def handle(self, channel: object, data: object) -> None:
        """Apply one Sentinel message. The formats are Sentinel's:

        - ``+failover-state-wait-promotion slave <name> <ip> <port> @ <service> <ip> <port>``
        - ``+switch-master <service> <old ip> <old port> <new ip> <new port>``
        - ``-failover-abort-slave-timeout master <service> <ip> <port>``
        - ``+slave slave <name> <ip> <port> @ <service> <ip> <port>``

        Any other shape (other field counts, a port that is not one, bytes that are not UTF-8,
        a payload that is not text) is ignored, as are other services' messages.
        """
        name, text = _text(channel), _text(data)
        shape = _SHAPES.get(name or "")
        if shape is None:
            return
        fields = [] if text is None else text.split()
        if len(fields) != shape[0]:
            logger.debug("whos_online ignores a Sentinel message it cannot read: %r", data)
            return
        if fields[shape[1]] != self.service_name:
            return
        try:
            if name == PROMOTED:
                self.follow(_address(fields[2], fields[3]), _address(fields[6], fields[7]))
            elif name == SWITCHED:
                self.follow(_address(fields[3], fields[4]), _address(fields[1], fields[2]))
                # The promoted replica is a master now, and the former master a replica.
                self.manager.learn_replicas(self.service_name)
            elif name == ABORTED:
                self.manager.abandon(self.service_name)
            else:
                self.manager.learn_replicas(self.service_name)
                return
        except ValueError:
            logger.debug("whos_online ignores a Sentinel message it cannot read: %r", data)
            return
        # Drops the pool's idle connections if the master it names has changed; if the
        # Sentinels cannot be asked now, the next request asks again.
        with contextlib.suppress(redis.exceptions.RedisError, OSError):
            self.pool.get_master_address()  # type: ignore [no-untyped-call]

    def follow(self, promoted: Address, replaced: Address) -> None:
        """Point the pool at ``promoted``, if the Sentinels know it as a replica."""
        if self.manager.vouches_for(self.service_name, promoted):
            self.manager.promote(self.service_name, promoted, replaced)
            return
        logger.warning(
            "whos_online ignores a Sentinel's announcement that %s:%s replaces the master of "
            "%r: no Sentinel knows that address as one of its replicas.",
            *promoted,
            self.service_name,
        )
