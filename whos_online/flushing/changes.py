"""What the flushes changed, told off the request path: Django signals for the site's code, and
one message on Redis for the open pages' live streams.

Noted on the thread that wrote a batch and told from the flusher's thread, so that neither a
receiver nor the publish runs on a request ("Changes" in docs/how-it-works.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Final

import redis

from whos_online.backend import connection
from whos_online.backend.keyspace import USER_KINDS, changes_channel
from whos_online.signals import came_online, entered_room, left_room
from whos_online.store.items import ENTRY_ARGUMENTS, LEAVE, LEAVE_ROOM, VISIT
from whos_online.store.record import MAX_ENTRIES_PER_CALL
from whos_online.store.users import pk_values

if TYPE_CHECKING:
    from collections.abc import Sequence

    from django.dispatch import Signal

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config
    from whos_online.store.items import Entry
    from whos_online.store.results import Reply

logger = logging.getLogger("whos_online")

#: Seconds between two messages of one process at least.
PUBLISH_EVERY: Final = 1.0
#: Rooms a message names at most; beyond, it says that every room may have changed.
MAX_ROOMS: Final = 1000
#: Seconds after a leaver's grace ends before their room is published again, for clocks.
GRACE_MARGIN: Final = 0.25

_OP, _KIND, _MEMBER, _SCORE, _FORMER = (
    ENTRY_ARGUMENTS.index(name) for name in ("op", "kind", "member", "score", "former")
)


@dataclass(frozen=True, slots=True)
class Event:
    """One change to tell the site's receivers of."""

    signal: Signal
    kind: str
    member: str
    at: float
    room: str = ""

    def send(self, sender: object) -> None:
        arguments: dict[str, object] = {
            "kind": self.kind,
            "member": self.member,
            "user_id": pk_values([self.member])[0] if self.kind in USER_KINDS else None,
            "at": datetime.fromtimestamp(self.at, tz=timezone.utc),
        }
        if self.room:
            arguments["room"] = self.room
        for receiver, result in self.signal.send_robust(sender=sender, **arguments):
            if isinstance(result, Exception):
                logger.error(
                    "A receiver of whos_online's signals failed: %r", receiver, exc_info=result
                )


def _person(entry: Entry, who: str) -> tuple[str, str]:
    if not who:
        return entry.fields[_KIND], entry.fields[_MEMBER]
    kind, _, member = who.partition(":")
    return kind, member


class Pending:
    """What flushes changed and nobody was told yet: the signals to send, and the rooms (and
    whether the site) to publish."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._rooms: set[str] = set()
        self._site = False
        #: Rooms to publish again at a time (Unix), once their leavers' grace has passed.
        self._later: dict[str, float] = {}
        #: When (monotonic) this process last published.
        self._published = float("-inf")

    def take_in(self, config: Config, entries: Sequence[Entry], replies: Sequence[Reply]) -> bool:
        """Note what the calls that wrote a shard's ``entries`` changed (``MAX_ENTRIES_PER_CALL``
        entries to each call, in order), as their ``replies`` say; returns whether there is
        anything to send."""
        noted = False
        for number, reply in enumerate(replies):
            start = number * MAX_ENTRIES_PER_CALL
            noted = (
                self._take_in(config, entries[start : start + MAX_ENTRIES_PER_CALL], reply) or noted
            )
        return noted

    def _take_in(self, config: Config, entries: Sequence[Entry], reply: Reply) -> bool:
        publishes = config.live_updates
        events: list[Event] = []
        site = "1" in reply.arrived
        if site and came_online.has_listeners():
            events += [
                Event(came_online, entry.fields[_KIND], entry.fields[_MEMBER], entry.at)
                for entry, flag in zip(entries, reply.arrived, strict=False)
                if flag == "1"
            ]
        rooms: set[str] = set()
        later: dict[str, float] = {}
        for change in reply.changes:
            entry = entries[change.entry]
            kind, member = _person(entry, change.who)
            at = float(entry.fields[_SCORE])
            if change.left:
                rooms.add(change.left)
                if entry.fields[_OP] == LEAVE_ROOM:
                    later[change.left] = at + config.leave_grace + GRACE_MARGIN
                if left_room.has_listeners():
                    events.append(Event(left_room, kind, member, at, change.left))
            if change.entered:
                rooms.add(change.entered)
                if entered_room.has_listeners():
                    events.append(Event(entered_room, kind, member, at, change.entered))
        if not site and publishes:
            site = any(
                entry.fields[_OP] == LEAVE or (entry.fields[_OP] == VISIT and entry.fields[_FORMER])
                for entry in entries
            )
        if not (events or (publishes and (rooms or site))):
            return False
        with self._lock:
            self._events += events
            if publishes:
                self._rooms |= rooms
                self._site = self._site or site
                for room, at in later.items():
                    self._later[room] = max(at, self._later.get(room, 0.0))
        return True

    def deliver(self, config: Config, sender: object, *, at_once: bool = False) -> float | None:
        """Send the signals noted, and publish what changed if this process has not published
        for ``PUBLISH_EVERY`` seconds (or ``at_once``: as it exits). Returns in how many seconds
        something more is due (a publish held back, a leaver's room), or None."""
        with self._lock:
            events, self._events = self._events, []
        for event in events:
            event.send(sender)
        now, clock = time.time(), time.monotonic()
        with self._lock:
            due = {room for room, at in self._later.items() if at <= now or at_once}
            for room in due:
                del self._later[room]
            self._rooms |= due
            if not (self._rooms or self._site):
                return self._next(now)
            wait = self._published + PUBLISH_EVERY - clock
            if wait > 0 and not at_once:
                later = self._next(now)
                return wait if later is None else min(wait, later)
            rooms, site = self._rooms, self._site
            self._rooms, self._site, self._published = set(), False, clock
        later = self._next(now)
        if publish(config, rooms, site=site) or at_once:
            return later
        # Not sent (Redis failed, or a breaker is open): the streams' subscription may not have
        # failed with it, and would wait for their next refresh; tried again in a second (see
        # ``publish``).
        with self._lock:
            self._rooms |= rooms
            self._site = self._site or site
        return PUBLISH_EVERY if later is None else min(PUBLISH_EVERY, later)

    def _next(self, now: float) -> float | None:
        return max(min(self._later.values()) - now, 0.0) if self._later else None

    def holds(self) -> bool:
        return bool(self._events or self._rooms or self._site or self._later)


def message(rooms: set[str], *, site: bool) -> str:
    """What a publish says: ``{"rooms": [...], "site": true|false}``, or ``{"all": true}`` when
    more than ``MAX_ROOMS`` rooms changed."""
    if len(rooms) > MAX_ROOMS:
        return json.dumps({"all": True})
    return json.dumps({"rooms": sorted(rooms), "site": site}, ensure_ascii=False)


def rooms_of(data: object) -> set[str] | None:
    """The rooms a ``message`` names ("" for the site), read back by a subscriber; None for every
    room; an empty set for a message that cannot be read."""
    try:
        body = json.loads(data)  # type: ignore [arg-type]
    except (TypeError, ValueError):
        return set()
    if not isinstance(body, dict):
        return set()
    if body.get("all"):
        return None
    rooms = {room for room in body.get("rooms", ()) if isinstance(room, str)}
    if body.get("site"):
        rooms.add("")
    return rooms


def publish(config: Config, rooms: set[str], *, site: bool) -> bool:
    """One PUBLISH, behind the breaker; whether it is done with: sent, or refused for good.

    ``Pending.deliver`` tries one that failed otherwise again: a timeout, a lost connection or a
    breaker another call opened says nothing to the streams' own subscription, which may be up
    all along. An error reply (a user without the channel's permission, a renamed command) would
    come again, and each try would open the breaker anew: it is logged, as any failure, and the
    message dropped."""
    channel, body = changes_channel(config), message(rooms, site=site)
    refused: list[redis.exceptions.ResponseError] = []

    def send(client: Client, _config: Config) -> int:
        try:
            return int(client.publish(channel, body))
        except redis.exceptions.ResponseError as error:
            refused.append(error)
            raise

    return connection.call(None, send) is not None or bool(refused)
