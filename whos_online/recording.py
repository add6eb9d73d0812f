"""Recording visits: what the middleware, the login and logout receivers and ``record_*`` run.

Every function here fails open: while Redis cannot be written, nothing is recorded and the caller
learns so (``FAILED`` or False), so that the middleware hands out no throttle cookie for a visit
that was not stored. A visit is one round trip to the visitor's shard; page hits counted in the
process ride along with it, or are written by a timer.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation

from whos_online import (
    aio,
    breakers,
    connection,
    counters,
    hits,
    identity,
    keyspace,
    rooms,
    snapshots,
    store,
    throttle,
    users,
)
from whos_online.conf import Config, get_config
from whos_online.results import as_timestamp
from whos_online.throttle import recent

if TYPE_CHECKING:
    from datetime import datetime

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    from whos_online.connection import Client

#: What recording a visit came to: nothing written, written for someone online already, or
#: written for someone who was not online (whose next page must not show a snapshot from before).
FAILED: Final = 0
WRITTEN: Final = 1
ARRIVED: Final = 2


@dataclass
class PendingVisit:
    """One visit, ready to write: the script calls and what to do once they have run.

    Building it and finishing it are the same whether the write is awaited (``whos_online.aio``,
    under ASGI) or not; only the write itself differs.
    """

    config: Config
    kind: str
    member: str
    calls: list[store.scripts.ScriptCall]
    #: The in-process memory's entry for the visitor, and the Redis failure count it is
    #: written in (see ``throttle.RecentIdentities``).
    remembered: str
    until: float
    epoch: int
    #: Memory entries the visit replaces (a guest who has just logged in).
    replaced: tuple[str, ...] = ()
    #: Page hits riding along: settled with the buffer once the write's outcome is known.
    batch: hits.Batch | None = None
    #: The tag of the visit's room, which the memory keeps with the entry.
    room_tag: str = ""

    @property
    def shard(self) -> keyspace.Shard:
        return store.keys.member_shard(self.config, self.kind, self.member)

    def finish(self, reply: Any) -> int:
        """What the script's ``reply`` (None: it failed) comes to: FAILED, WRITTEN or ARRIVED."""
        if self.batch is not None:
            hits.buffer.settle(self.batch, added=reply is not None)
        if reply is None:
            return FAILED
        if self.config.throttle:
            recent.remember(self.remembered, self.until, self.epoch, self.room_tag)
            recent.forget(self.replaced)
        return WRITTEN if reply == 0 else ARRIVED


def user_visit(
    details: users.UserDetails,
    config: Config,
    timestamp: float,
    *,
    former_guest: str = "",
    room: str = "",
    room_mode: str = rooms.GO,
    room_tag: str | None = None,
) -> PendingVisit:
    pk = details.pk
    visit = store.visits.Visit(
        kind="users",
        member=pk,
        now=timestamp,
        user=details,
        former=former_guest,
        visitor=identity.visitor_id(f"u:{pk}", timestamp),
        room=room,
        room_mode=room_mode,
    )
    replaced = (f"guests:{former_guest}", f"bots:{former_guest}") if former_guest else ()
    return _pending(config, visit, remembered=f"u:{pk}", replaced=replaced, room_tag=room_tag)


def member_visit(
    config: Config,
    kind: str,
    member: str,
    timestamp: float,
    *,
    former_user: str = "",
    room: str = "",
    room_mode: str = rooms.GO,
    room_tag: str | None = None,
) -> PendingVisit:
    # Bots are not visitors; guests are namespaced apart from user ids in the HyperLogLog.
    visitor = "" if kind == "bots" else identity.visitor_id(f"g:{member}", timestamp)
    visit = store.visits.Visit(
        kind=kind,
        member=member,
        now=timestamp,
        former=former_user,
        visitor=visitor,
        room=room,
        room_mode=room_mode,
    )
    return _pending(config, visit, remembered=f"{kind}:{member}", room_tag=room_tag)


def _pending(
    config: Config,
    visit: store.visits.Visit,
    *,
    remembered: str,
    replaced: tuple[str, ...] = (),
    room_tag: str | None = None,
) -> PendingVisit:
    """The calls of one visit, with any buffered page hits riding along in the same round trip
    when the visit samples the counts (one shard); with several shards the flush timer writes
    them. ``room_tag`` is what the memory keeps of its room (by default the tag of
    ``visit.room``)."""
    epoch = breakers.failures()
    riding = config.count_hits and config.shards == 1
    batch = hits.buffer.take() if riding else None
    calls = store.visits.record_calls(
        config,
        visit,
        hits=_hit_amounts(batch.counts) if batch else {},
        batch=(batch.token, batch.number) if batch else None,
    )
    return PendingVisit(
        config=config,
        kind=visit.kind,
        member=visit.member,
        calls=calls,
        remembered=remembered,
        until=visit.now + config.throttle,
        epoch=epoch,
        replaced=replaced,
        batch=batch,
        room_tag=rooms.room_tag(visit.room) if room_tag is None else room_tag,
    )


def write(pending: PendingVisit) -> int:
    """Write ``pending`` (one round trip to its shard); FAILED, WRITTEN or ARRIVED."""
    reply = connection.call(
        None,
        lambda client, _config: store.scripts.run(client, pending.calls)[0],
        shard=pending.shard,
        writes=True,
    )
    return pending.finish(reply)


def record_user(
    user: AbstractBaseUser | AnonymousUser,
    timestamp: float,
    *,
    former_guest: str = "",
    room: str = "",
) -> int:
    config = get_config()
    details = users.details(user, config)
    return write(user_visit(details, config, timestamp, former_guest=former_guest, room=room))


def record_member(
    config: Config,
    kind: str,
    member: str,
    timestamp: float,
    *,
    former_user: str = "",
    room: str = "",
) -> int:
    return write(member_visit(config, kind, member, timestamp, former_user=former_user, room=room))


@dataclass(frozen=True)
class Recorded:
    """What recording a request came to, for the throttle cookie the middleware hands out."""

    #: FAILED (no cookie: the visit was not stored), WRITTEN or ARRIVED (see ``record_request``).
    outcome: int
    #: When the visit the cookie speaks of was recorded: now, or when this process last wrote it.
    at: float
    #: The tag of that visit's room ("" for none, ``throttle.UNKNOWN_ROOM`` if not known).
    room_tag: str


@dataclass(frozen=True)
class _Visitor:
    """Who made a request: a user, or an anonymous visitor's set and member."""

    #: Their entry in the process's memory (``throttle.recent``).
    remembered: str
    user: AbstractBaseUser | AnonymousUser | None = None
    kind: str = ""
    member: str = ""


def record_request(
    request: HttpRequest, config: Config, now: float, placement: rooms.Placement
) -> Recorded:
    """Record whoever made ``request``, placed as ``placement`` says, unless this process's
    memory spares the write.

    The outcome is FAILED only when Redis could not be written, so that the caller does not hand
    out a throttle cookie for a visit that was not stored; ARRIVED when the visitor was not
    online, or this process recorded them moments ago (a login records the user at once), so that
    their next page reads afresh; WRITTEN otherwise.
    """
    visitor = _visitor_of(getattr(request, "user", None), request, config, now)
    found = _spared(visitor, request, config, now, placement)
    if isinstance(found, Recorded):
        return found
    where = {"room": placement.room, "room_mode": placement.mode, "room_tag": found.room_tag}
    if visitor.user is None:
        pending = member_visit(config, visitor.kind, visitor.member, now, **where)
    else:
        details = users.details(visitor.user, config)
        pending = user_visit(details, config, now, **where)
    return found.after(write(pending))


async def arecord_request(
    request: HttpRequest, config: Config, now: float, placement: rooms.Placement
) -> Recorded:
    """``record_request`` for an ASGI site, without leaving the event loop where it can be
    helped: the user is loaded with ``request.auser()`` and the visit written with an asyncio
    client (``whos_online.aio``). Where there is no asyncio client (a Sentinel alias), it runs
    ``record_request`` in Django's thread for sync code, as the middleware always did."""
    client = aio.request_client()
    if client is None:
        return await sync_to_async(record_request)(request, config, now, placement)
    auser = getattr(request, "auser", None)  # set by AuthenticationMiddleware
    user = getattr(request, "user", None) if auser is None else await auser()
    visitor = _visitor_of(user, request, config, now)
    found = _spared(visitor, request, config, now, placement)
    if isinstance(found, Recorded):
        return found
    where = {"room": placement.room, "room_mode": placement.mode, "room_tag": found.room_tag}
    if visitor.user is None:
        pending = member_visit(config, visitor.kind, visitor.member, now, **where)
    else:
        try:
            details = users.details(visitor.user, config)
        except SynchronousOnlyOperation:
            # The site's HIDE_USER or DISPLAY_NAME reads the database, which it may not do here.
            details = await sync_to_async(users.details)(visitor.user, config)
        pending = user_visit(details, config, now, **where)

    async def write(client: aio.AsyncClient, _config: Config) -> Any:
        return (await aio.run(client, pending.calls))[0]

    reply = await aio.call(None, client, write, shard=pending.shard, writes=True)
    return found.after(pending.finish(reply))


_NOBODY: Final = _Visitor(remembered="")


def _visitor_of(
    user: AbstractBaseUser | AnonymousUser | None, request: HttpRequest, config: Config, now: float
) -> _Visitor:
    if user is not None and user.is_authenticated:
        return _Visitor(remembered=f"u:{users.pk_text(user)}", user=user)
    guest = guest_of(request, config, now)
    if guest is None:
        return _NOBODY
    kind, member = guest
    return _Visitor(remembered=f"{kind}:{member}", kind=kind, member=member)


@dataclass(frozen=True)
class _Writing:
    """A visit about to be written: what its cookie will say once it is."""

    at: float
    room_tag: str

    def after(self, outcome: int) -> Recorded:
        return Recorded(outcome, self.at, self.room_tag)


def _spared(
    visitor: _Visitor, request: HttpRequest, config: Config, now: float, placement: rooms.Placement
) -> Recorded | _Writing:
    """What recording ``request`` comes to without a write (a ``Recorded``), or what its cookie
    will say once written.

    The process's memory is asked only for a browser that sent no genuine cookie: a cookie says
    where its browser was last put, whichever process did so, while the memory knows only what
    this process wrote. For a page view it spares the write only on a site that uses no rooms:
    another process may have moved a client without cookies to another room since, and only a
    write puts them where their latest page is.
    """
    cookie = throttle.on_request(request)
    if placement.mode == rooms.GO:
        tag = rooms.room_tag(placement.room)
    elif cookie is not None:
        # Not a page view: the visitor stays where their browser's latest page view put them.
        tag = cookie.room
    elif placement.mode == rooms.STAY:
        # Where they most likely end up; leaving it again is checked against Redis anyway.
        tag = rooms.room_tag(placement.room)
    else:
        tag = throttle.UNKNOWN_ROOM
    if visitor is _NOBODY:
        return Recorded(WRITTEN, now, tag)
    if cookie is None and config.throttle:
        entry = recent.entry(visitor.remembered, now, breakers.failures())
        if entry is not None and _memory_spares(entry[1], placement, tag, config):
            return Recorded(ARRIVED, entry[0] - config.throttle, entry[1])
    return _Writing(now, tag)


def _memory_spares(remembered: str, placement: rooms.Placement, tag: str, config: Config) -> bool:
    """Whether a visitor this process wrote within THROTTLE, in the room of tag ``remembered``,
    needs no write for this visit: one that places them nowhere new, or a page view in the same
    room on a site that uses no rooms (see ``_spared``)."""
    if placement.mode != rooms.GO:
        return True
    return remembered == tag and not rooms.in_use(config)


def leave_room(request: HttpRequest, config: Config, room: str) -> bool:
    """Take the person making ``request`` out of ``room`` within ``store.presence.LEAVE_GRACE``
    seconds, if their throttle cookie (or, for a client without one, this process's memory) says
    they were put in it, and it is still theirs in Redis. Returns whether the cookie (or memory)
    said so, so that the caller spends the cookie: a second word of leaving does nothing."""
    now = time.time()
    visitor = _visitor_of(getattr(request, "user", None), request, config, now)
    if visitor is _NOBODY:
        return False
    tag = rooms.room_tag(room)
    cookie = throttle.on_request(request)
    if cookie is not None:
        if cookie.room != tag:
            return False
    else:
        entry = recent.entry(visitor.remembered, now, breakers.failures())
        if entry is None or entry[1] != tag:
            return False
    recent.forget([visitor.remembered])
    if visitor.user is None:
        kind, member = visitor.kind, visitor.member
    else:
        kind, member = "users", users.pk_text(visitor.user)
    call = store.presence.leave_room_call(config, kind, member, room, now=now)
    connection.call(
        None,
        lambda client, _config: store.scripts.run(client, [call]),
        shard=store.keys.member_shard(config, kind, member),
        writes=True,
    )
    return True


def guest_of(request: HttpRequest, config: Config, now: float) -> tuple[str, str] | None:
    """The set ("guests" or "bots") and member an anonymous ``request`` is recorded as, or None
    when guests are not tracked or the request has no usable client address."""
    if not config.track_guests:
        return None
    address = identity.client_ip(request, config)
    if address is None:
        return None
    kind = "bots" if identity.is_bot(request, config) else "guests"
    return kind, identity.guest_id(address, config, now)


def guest_member(request: HttpRequest, config: Config, now: float) -> str:
    """The guest member a request would have been recorded as, or "" if none."""
    address = identity.client_ip(request, config)
    return identity.guest_id(address, config, now) if address else ""


def user_logged_out(
    user: AbstractBaseUser | AnonymousUser | None, request: HttpRequest | None = None
) -> None:
    """Take ``user`` off the online list at once; their last-seen record stays.

    With the logout's ``request``, the visitor goes on as a guest in the same round trip, as a
    login moves them the other way. Recording them here rather than on their next request
    matters when another process served their earlier guest visits: that process still
    remembers the guest as recorded and would skip the write.
    """
    if user is None or not user.is_authenticated:
        return
    pk = users.pk_text(user)
    recent.forget([f"u:{pk}"])
    config = get_config()
    now = time.time()
    guest = None if request is None else guest_of(request, config, now)
    if guest is None:
        connection.call(
            None,
            lambda client, config: store.presence.remove_user(client, config, pk),
            shard=store.keys.user_shard(config, pk),
            writes=True,
        )
    else:
        kind, member = guest
        record_member(config, kind, member, now, former_user=pk)
    snapshots.invalidate()


def _hit_amounts(taken: dict[int, int]) -> dict[tuple[str, int], int]:
    return {(hits.COUNTER_NAME, second): count for second, count in taken.items()}


def count_hit(now: float | datetime | None = None) -> None:
    """Count one page view in the process buffer; it reaches Redis within about a second.

    The middleware calls this for every request it does not ignore when ``COUNT_HITS`` is on.
    """
    hits.buffer.add(as_timestamp(now))
    hits.timer.schedule(flush_hits)


def flush_hits() -> bool:
    """Write the buffered page hits now; False (and the hits kept) if Redis failed. A batch that
    failed before goes first, then what was counted since. True also when another thread is
    writing a batch, which settles it."""
    while True:
        batch = hits.buffer.take()
        if batch is None:
            return True
        written = connection.call(False, functools.partial(_write_batch, batch), writes=True)
        hits.buffer.settle(batch, added=written)
        if not written:
            if get_config().count_hits:
                hits.timer.schedule(flush_hits)
            return False


def flush_hits_at_exit() -> None:
    """Write what the process holds as it exits: first let a flush that the timer has started
    finish (its thread would be cut off by the exit, and its batch with it), then flush."""
    hits.timer.cancel()
    hits.timer.join(hits.EXIT_WAIT)
    flush_hits()


def _write_batch(batch: hits.Batch, client: Client, config: Config) -> bool:
    counters.add(client, config, _hit_amounts(batch.counts), batch=(batch.token, batch.number))
    return True
