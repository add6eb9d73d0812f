"""The process's one subscription to what the flushes publish, fanned out to its open streams.

One subscription and one read per message for all of an event loop's streams (a ``Hub``), so
that Redis's load grows with the processes, not the open pages; it also keeps each stream's
timers (``tick``), re-records readers when Redis lost its data, and ends the streams at SIGTERM
so that an ASGI server can exit. docs/how-it-works.md ("Live streams") tells how.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Final, TypeVar

from asgiref.sync import sync_to_async
from django.dispatch import receiver

from whos_online.backend import clients, connection
from whos_online.backend.clients import REDIS_ERRORS
from whos_online.backend.connection import CircuitBreaker
from whos_online.backend.keyspace import changes_channel
from whos_online.config import process
from whos_online.config.process import PerProcess
from whos_online.config.settings import get_config
from whos_online.flushing import changes, stopping
from whos_online.reading import snapshots
from whos_online.store.epochs import lost_since

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    import redis.asyncio

    from whos_online.backend.keyspace import Person
    from whos_online.config.settings import Config
    from whos_online.live.outbox import Listener

logger = logging.getLogger("whos_online")
T = TypeVar("T")

#: Seconds without a message after which the subscription pings Redis, and waits as long for
#: its answer.
HEALTH_EVERY: Final = 5.0
#: Seconds the subscription stays up with no stream open.
LINGER: Final = 30.0
#: Seconds between two ticks of a hub (``Hub.tick``).
TICK: Final = 1.0
#: Seconds before the first attempt to subscribe again; each failure doubles it.
FIRST_BACKOFF: Final = 0.5
#: Seconds one wait for a message lasts at most.
_POLL: Final = 1.0
#: Seconds the streams are handed their events in one go, at most, before the process's other
#: work has a turn: with ``LiveStreams`` each is a write to its socket, and 10 000 of them would
#: hold the event loop for a third of a second; a request of the process takes a few dozen
#: turns, each of which would wait for one run.
SENDING_SLICE: Final = 0.002
#: Streams of one event loop that read their first state at once, at most: pages reconnecting
#: after a restart would otherwise outnumber the client's pool, and its breaker see an outage.
OPENING: Final = 8

_breaker: Final = PerProcess(
    lambda: CircuitBreaker(
        "The live streams' subscription to Redis at %s failed (%s: %s); the live widgets poll "
        "meanwhile, and whos_online subscribes again within %g s.",
        "The live streams' subscription to Redis at %s is back.",
    )
)


def breaker() -> CircuitBreaker:
    """This process's breaker of the live streams' subscription (``config.process``)."""
    return _breaker.get()


class Hub:
    """The subscription of one event loop, and the streams it feeds."""

    def __init__(self) -> None:
        self.listeners: set[Listener] = set()
        #: Whether the subscription is up, and whether it failed (until it is up again).
        self.live = False
        self.down = False
        self.done = False
        #: Counts the changes announced: a stream that read its first state before it joined
        #: is read again if this moved meanwhile (``catch_up``).
        self.generation = 0
        #: Streams to read for whatever changed.
        self._joining: set[Listener] = set()
        #: The rooms changed and not read yet ("" for the site), or None for every room.
        self._changed: set[str] | None = set()
        self._wake = asyncio.Event()
        #: Held by a stream while it reads its first state (``OPENING``).
        self.opening = asyncio.Semaphore(OPENING)
        #: Whether a read of every room is due, after one that failed (``_read_again``).
        self._retrying = False
        #: Whether the streams' readers are to be recorded again before the next read: Redis
        #: came back, or lost its data.
        self._lost = False
        #: The epoch of each shard as the last read saw it (``read_and_render``).
        self.epochs: dict[str, str] = {}
        self._idle_since = time.monotonic()
        #: What to do once the read under way is over (``after_read``); None while none is.
        self._after_read: list[Callable[[], None]] | None = None
        self._tasks = [
            asyncio.ensure_future(self._subscribe()),
            asyncio.ensure_future(self._read()),
            asyncio.ensure_future(self._ticking()),
        ]
        stopping.install_signal_handler()  # over a handler the server set after the site loaded

    def add(self, listener: Listener) -> None:
        self.listeners.add(listener)
        if self.down:
            listener.stale()

    def catch_up(self, listener: Listener) -> None:
        """Read ``listener``'s rooms again: something changed since its first read."""
        self._joining.add(listener)
        self._wake.set()

    def discard(self, listener: Listener) -> None:
        self.listeners.discard(listener)
        self._joining.discard(listener)
        if not self.listeners:
            self._idle_since = time.monotonic()

    def _read_over(self, after: list[Callable[[], None]]) -> None:
        if self._after_read is after:
            self._after_read = None
        for then in after:
            then()

    def after_read(self, then: Callable[[], None]) -> None:
        """Do ``then`` now, or once the read under way is over: its thread may still render a
        stream discarded meanwhile."""
        if self._after_read is None:
            then()
        else:
            self._after_read.append(then)

    def changed(self, rooms: set[str] | None) -> None:
        """Have the streams of ``rooms`` (None: of every room) read and told."""
        self.generation += 1
        if rooms is None or self._changed is None:
            self._changed = None
        else:
            self._changed |= rooms
        self._wake.set()

    def stop(self) -> None:
        self.done = True
        for task in self._tasks:
            task.cancel()

    def shut_down(self) -> None:
        """End every stream and the subscription (asked to stop); the tick cancels laggards."""
        for task in self._tasks[:2]:
            task.cancel()
        for listener in list(self.listeners):
            listener.end()

    def tick(self, now: float | None = None) -> None:
        """Every stream's heartbeat, end or cancellation, when due; those that ended go."""
        for listener in list(self.listeners):
            self._tick(listener, now)

    def _tick(self, listener: Listener, now: float | None = None) -> None:
        if not listener.tick(now):
            self.discard(listener)

    async def _ticking(self) -> None:
        while not (self.done and not self.listeners):
            await asyncio.sleep(TICK)
            # In slices: streams quiet since the same change all send their heartbeat now.
            await _each_in_slices(list(self.listeners), self._tick)

    # The subscription

    async def _subscribe(self) -> None:
        failures = 0
        try:
            while not self._lingered():
                config = get_config()
                client: redis.asyncio.Redis | None = None
                try:
                    client = clients.subscriber(config, failures)
                    requests = connection.breaker().generation(config.redis_target)
                    async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                        await pubsub.subscribe(changes_channel(config))
                        self._up(config, requests)
                        failures = 0
                        await self._listen(pubsub, config.refresh_interval)
                except (*REDIS_ERRORS, TimeoutError, asyncio.TimeoutError, LookupError) as error:
                    failures += 1
                    backoff = min(FIRST_BACKOFF * 2 ** (failures - 1), config.failure_backoff or 1)
                    self._down(config.redis_target, error, backoff)
                    await asyncio.sleep(backoff)
                finally:
                    if client is not None:
                        with contextlib.suppress(*REDIS_ERRORS):
                            await client.aclose()
        finally:
            self.done = True
            self._tasks[1].cancel()

    def _lingered(self) -> bool:
        return not self.listeners and time.monotonic() - self._idle_since >= LINGER

    async def _listen(self, pubsub: redis.asyncio.client.PubSub, every: float) -> None:
        """Take messages until the subscription fails, or no stream has been open for a while."""
        quiet_since = resynced = time.monotonic()
        pinged = False
        while not self._lingered():
            message = await pubsub.get_message(timeout=_POLL)
            now = time.monotonic()
            if message is not None:
                quiet_since, pinged = now, False
                if message.get("type") == "message":
                    self.changed(changes.rooms_of(message.get("data")))
            elif now - quiet_since >= HEALTH_EVERY * (2 if pinged else 1):
                if pinged:
                    msg = "no answer to a ping"
                    raise TimeoutError(msg)
                await pubsub.ping()
                pinged = True
            if now - resynced >= every:
                resynced = now
                self.changed(None)

    def _up(self, config: Config, requests: int) -> None:
        """Subscribed: Redis answered, so the request path's breaker closes too (unless one of its
        calls failed since ``requests``), and the streams get their state now."""
        target = config.redis_target
        if self.down:
            self._lost = True  # it may have lost its data, or a reader their window, meanwhile
        self.live, self.down = True, False
        ours = breaker()
        ours.succeeded(target, ours.generation(target))
        if not config.redis_cluster:  # a node's answer says nothing of the others' slots
            connection.breaker().succeeded(target, requests)
        self.changed(None)  # what changed while it was down

    def _down(self, target: str, error: BaseException, backoff: float) -> None:
        self.live, self.down = False, True
        # A timeout that the next attempt follows within FAILURE_BACKOFF, however short this
        # back-off, is an outage (see ``CircuitBreaker``).
        breaker().failed(target, error, backoff, window=get_config().failure_backoff or 1.0)
        for listener in list(self.listeners):
            listener.stale()

    # Reading for the streams

    def _read_again(self) -> None:
        """A read failed while the subscription may be up: read every room again once the request
        path's breaker may let it through, not at the next message (``_up`` does when down)."""
        if self._retrying:
            return
        self._retrying = True

        def again() -> None:
            self._retrying = False
            if self.live and not self.done:
                self.changed(None)

        asyncio.get_running_loop().call_later(get_config().failure_backoff or 1.0, again)

    async def _read(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._read_changed()

    async def _read_changed(self) -> None:
        """One read of what changed, and its events handed out. A method of its own: the streams
        it read are let go as it returns, not held by ``_read``'s frame until the next change
        (a stream that ended meanwhile would keep its connection's objects alive until then)."""
        changed, self._changed = self._changed, set()
        joining, self._joining = self._joining, set()
        affected = [
            listener
            for listener in self.listeners
            if changed is None or listener in joining or not listener.rooms.isdisjoint(changed)
        ]
        if not affected:
            return
        rooms = sorted(set().union(*(listener.rooms for listener in affected)))
        lost, self._lost = self._lost, False
        after: list[Callable[[], None]] = []
        self._after_read = after
        reading = asyncio.ensure_future(
            sync_to_async(read_and_render, thread_sensitive=False)(
                rooms, affected, self.epochs, lost=lost
            )
        )
        # Once its thread is done, whether it failed or this task was cancelled meanwhile (at a
        # stop: the thread goes on rendering).
        reading.add_done_callback(lambda _reading: self._read_over(after))
        events = await asyncio.shield(reading)
        if events is not None and len(events) < len(affected):
            self.changed(None)  # Redis lost its data: read again once each was recorded
        elif events is None:
            self._lost = self._lost or lost  # for the read that gets through
            for listener in affected:
                listener.stale()
            self._read_again()
        else:
            await _hand_out(affected, events)


async def _hand_out(listeners: Sequence[Listener], events: Sequence[str | None]) -> None:
    """Each listener its event, if it has one."""
    handed = (
        (one, event) for one, event in zip(listeners, events, strict=True) if event is not None
    )
    await _each_in_slices(handed, lambda pair: pair[0].send(pair[1]))


async def _each_in_slices(items: Iterable[T], do: Callable[[T], object]) -> None:
    """``do`` each of ``items``, in runs of ``SENDING_SLICE`` between the process's other work."""
    since = time.perf_counter()
    for item in items:
        do(item)
        if time.perf_counter() - since >= SENDING_SLICE:
            await asyncio.sleep(0)
            since = time.perf_counter()


def read_and_render(
    rooms: Sequence[str],
    listeners: Sequence[Listener],
    epochs: dict[str, str],
    *,
    lost: bool = False,
) -> list[str | None] | None:
    """One read of ``rooms``, and each listener's event from it (in a thread); None when Redis
    could not be read; no event (``[]``) when it lost its data since ``epochs`` (updated here),
    or with ``lost``: each listener's reader is then recorded again, for the next read."""
    config = get_config()
    sought: dict[str, dict[str, Person]] = {}
    for listener in listeners:
        for room, people in listener.sought().items():
            sought.setdefault(room, {}).update((person.key, person) for person in people)
    found = snapshots.read_many(
        config.display_limit,
        rooms,
        readers={room: list(people.values()) for room, people in sought.items()},
    )
    if all(one is None for one in found.values()):
        return None
    if lost_since([one.epochs for one in found.values() if one is not None], epochs) or lost:
        for listener in listeners:
            listener.lost(config)
        return []
    shared: dict[object, str] = {}
    events: list[str | None] = []
    for listener in listeners:
        try:
            events.append(listener.render(found, shared))
        except Exception:
            logger.exception("A live stream of whos_online could not render its widgets.")
            events.append(None)
    return events


def _stop_all(hubs: dict[asyncio.AbstractEventLoop, Hub]) -> None:
    """Stop every subscription of the process (settings changed: tests)."""
    for loop, found in list(hubs.items()):
        if not loop.is_closed():
            loop.call_soon_threadsafe(found.stop)
    hubs.clear()


_hubs: Final = PerProcess(dict[asyncio.AbstractEventLoop, Hub], dropped=_stop_all)


def hub() -> Hub:
    """The subscription of the running event loop, started if it is not running."""
    loop = asyncio.get_running_loop()
    hubs = _hubs.get()
    found = hubs.get(loop)
    if found is None or found.done:
        for other in [other for other in hubs if other.is_closed()]:
            del hubs[other]
        found = hubs[loop] = Hub()
    return found


@receiver(process.asked_to_stop, dispatch_uid="whos_online.live.subscription.shut_down")
def shut_down(**kwargs: object) -> None:
    """End the streams of every event loop of the process (SIGTERM; from its handler, which
    runs between two steps of one of those loops, so each hub does it on its own loop)."""
    for loop, found in list((_hubs.peek() or {}).items()):
        with contextlib.suppress(RuntimeError):  # a loop closed meanwhile
            loop.call_soon_threadsafe(found.shut_down)
