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
    )
    replaced = (f"guests:{former_guest}", f"bots:{former_guest}") if former_guest else ()
    return _pending(config, visit, remembered=f"u:{pk}", replaced=replaced)


def member_visit(
    config: Config,
    kind: str,
    member: str,
    timestamp: float,
    *,
    former_user: str = "",
    room: str = "",
) -> PendingVisit:
    # Bots are not visitors; guests are namespaced apart from user ids in the HyperLogLog.
    visitor = "" if kind == "bots" else identity.visitor_id(f"g:{member}", timestamp)
    visit = store.visits.Visit(
        kind=kind, member=member, now=timestamp, former=former_user, visitor=visitor, room=room
    )
    return _pending(config, visit, remembered=f"{kind}:{member}")


def _pending(
    config: Config, visit: store.visits.Visit, *, remembered: str, replaced: tuple[str, ...] = ()
) -> PendingVisit:
    """The calls of one visit, with any buffered page hits riding along in the same round trip
    when the visit samples the counts (one shard); with several shards the flush timer writes
    them."""
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
        room_tag=rooms.room_tag(visit.room),
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


def record_request(request: HttpRequest, config: Config, now: float) -> int:
    """Record whoever made ``request``, unless this process did so within THROTTLE seconds.

    Returns FAILED only when Redis could not be written, so that the caller does not hand out a
    throttle cookie for a visit that was not stored; ARRIVED when the visitor was not online, or
    this process recorded them moments ago (a login records the user at once), so that their
    next page reads afresh; WRITTEN otherwise. The process's memory of recent visitors counts
    only since Redis last failed (see ``RecentIdentities``).
    """
    user = getattr(request, "user", None)
    room = rooms.room_of(request)
    found = _to_record(user, request, config, now, room)
    if isinstance(found, int):
        return found
    if isinstance(found, tuple):
        return record_member(config, *found, now, room=room)
    return record_user(found, now, room=room)


async def arecord_request(request: HttpRequest, config: Config, now: float) -> int:
    """``record_request`` for an ASGI site, without leaving the event loop where it can be
    helped: the user is loaded with ``request.auser()`` and the visit written with an asyncio
    client (``whos_online.aio``). Where there is no asyncio client (a Sentinel alias), it runs
    ``record_request`` in Django's thread for sync code, as the middleware always did."""
    client = aio.request_client()
    if client is None:
        return await sync_to_async(record_request)(request, config, now)
    auser = getattr(request, "auser", None)  # set by AuthenticationMiddleware
    user = getattr(request, "user", None) if auser is None else await auser()
    room = rooms.room_of(request)
    found = _to_record(user, request, config, now, room)
    if isinstance(found, int):
        return found
    if isinstance(found, tuple):
        pending = member_visit(config, *found, now, room=room)
    else:
        try:
            details = users.details(found, config)
        except SynchronousOnlyOperation:
            # The site's HIDE_USER or DISPLAY_NAME reads the database, which it may not do here.
            details = await sync_to_async(users.details)(found, config)
        pending = user_visit(details, config, now, room=room)

    async def write(client: aio.AsyncClient, _config: Config) -> Any:
        return (await aio.run(client, pending.calls))[0]

    reply = await aio.call(None, client, write, shard=pending.shard, writes=True)
    return pending.finish(reply)


def _to_record(
    user: AbstractBaseUser | AnonymousUser | None,
    request: HttpRequest,
    config: Config,
    now: float,
    room: str,
) -> int | tuple[str, str] | AbstractBaseUser | AnonymousUser:
    """Whom a request should be recorded as: the user, or a (kind, member) for an anonymous
    visitor; or, when there is nothing to write, what recording came to (see record_request).
    The process's memory spares a write only for a visitor who stays in the same ``room``."""
    epoch = breakers.failures()
    tag = rooms.room_tag(room)
    if user is not None and user.is_authenticated:
        pk = users.pk_text(user)
        if config.throttle and recent.seen_recently(f"u:{pk}", now, epoch, tag):
            return ARRIVED
        return user
    guest = guest_of(request, config, now)
    if guest is None:
        return WRITTEN
    kind, member = guest
    if config.throttle and recent.seen_recently(f"{kind}:{member}", now, epoch, tag):
        return ARRIVED
    return guest


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
