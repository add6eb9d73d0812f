"""Recording visits: what the middleware, the login and logout receivers and ``record_*`` run.

A visit is queued in the process and written with the others of the next flush
(``whos_online.flushing.flusher``): a request never waits on Redis to record, unless
``FLUSH_INTERVAL`` is 0. What a recorded request learns at once is what its throttle cookie needs:
whether the visitor was online before (a browser with no genuine cookie, or one from before Redis
lost its data, is taken to be arriving), which room the visit left them in, and Redis's epoch in
their shard. While Redis is known to be down (from a failed call until one succeeds), the visit is
still queued, but the caller learns that it was not stored (``FAILED``), so that no throttle
cookie spares the next request its write.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation

from whos_online import store
from whos_online.backend import breakers
from whos_online.config.settings import Config, get_config
from whos_online.flushing import flusher as flushing
from whos_online.flushing import hits
from whos_online.recording import cookie as throttle
from whos_online.recording import identity, rooms
from whos_online.recording.cookie import recent
from whos_online.store import epochs, users
from whos_online.store.record import GO, STAY, Visit
from whos_online.store.results import as_timestamp

if TYPE_CHECKING:
    from datetime import datetime

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    from whos_online.backend import keyspace

#: What recording a visit came to: not stored (Redis is known to be down, or the queue is full),
#: queued for someone online already, or queued for someone who was not online (whose next page
#: must not show a snapshot from before).
FAILED: Final = 0
WRITTEN: Final = 1
ARRIVED: Final = 2


@dataclass(frozen=True)
class Recorded:
    """What recording a request came to, for the throttle cookie the middleware hands out."""

    #: FAILED (no cookie: the visit may not be stored), WRITTEN or ARRIVED.
    outcome: int
    #: When the visit the cookie speaks of was recorded: now, or when this process last wrote it.
    at: float
    #: The tag of that visit's room ("" for none, ``throttle.UNKNOWN_ROOM`` if not known).
    room_tag: str
    #: The epoch of the visitor's shard, as far as the process knows ("" if it does not).
    epoch: str = ""


@dataclass(frozen=True)
class _Visitor:
    """Who made a request: a user, or an anonymous visitor's set and member."""

    #: Their entry in the process's memory (``throttle.recent``) and the queue's.
    remembered: str
    user: AbstractBaseUser | AnonymousUser | None = None
    kind: str = ""
    member: str = ""


_NOBODY: Final = _Visitor(remembered="")


def user_visit(
    details: users.UserDetails,
    timestamp: float,
    *,
    former_guest: str = "",
    room: str = "",
    room_mode: str = GO,
) -> Visit:
    pk = details.pk
    return Visit(
        kind="users",
        member=pk,
        now=timestamp,
        user=details,
        former=former_guest,
        visitor=identity.visitor_id(f"u:{pk}", timestamp),
        room=room,
        room_mode=room_mode,
    )


def member_visit(
    kind: str,
    member: str,
    timestamp: float,
    *,
    former_user: str = "",
    room: str = "",
    room_mode: str = GO,
) -> Visit:
    # Bots are not visitors; guests are namespaced apart from user ids in the HyperLogLog.
    visitor = "" if kind == "bots" else identity.visitor_id(f"g:{member}", timestamp)
    return Visit(
        kind=kind,
        member=member,
        now=timestamp,
        former=former_user,
        visitor=visitor,
        room=room,
        room_mode=room_mode,
    )


def queue(config: Config, visit: Visit, *, room_tag: str | None = None) -> bool:
    """Queue ``visit``; False when it may not be stored soon: the queue is full, or Redis is
    known to be down for its shard (it is queued, then, and written once Redis answers again).
    Known to be down from a failed write until a call succeeds, the back-off passed or not
    (``breakers.known_to_fail``): in the moments after a back-off, before the flush that tries
    again has failed, Redis is no more up than during it. When the queue is written at once
    (``flushing.writes_at_once``), that write says.

    Unless the queue is written at once, the visit is remembered in the process's memory from
    now: if its flush fails, the memory's generation changes, and with it what the memory
    vouches for."""
    if not flushing.flusher().put(visit):
        return False
    if flushing.writes_at_once(config):
        return True
    shard = store.keys.member_shard(config, visit.joined, visit.member)
    if breakers.known_to_fail(config, shard, writes=True):
        return False
    remember(config, visit, room_tag)
    return True


def remember(config: Config, visit: Visit, room_tag: str | None = None) -> None:
    """Note ``visit`` in the process's memory of recent visitors (``throttle.recent``), with the
    tag of its room (by default of ``visit.room``)."""
    if not config.throttle:
        return
    tag = rooms.room_tag(visit.room) if room_tag is None else room_tag
    recent.remember(visit.person, visit.now + config.throttle, epochs.generation(), tag)
    if visit.former and visit.kind == "users":
        recent.forget([f"guests:{visit.former}", f"bots:{visit.former}"])


def record_soon(config: Config, visit: Visit) -> None:
    """Queue ``visit`` for the next flush, or write it now when the process writes at once
    (remembering it once written), as a recorded request does."""
    if not queue(config, visit):
        return
    if not flushing.writes_at_once(config):
        flushing.flusher().schedule(config.flush_interval)
    elif (
        store.keys.member_shard(config, visit.joined, visit.member).tag not in flushing.flush_now()
    ):
        remember(config, visit)


def _written(config: Config, visit: Visit) -> bool:
    """Queue ``visit`` and write the queue now, as the API and the login receiver do: whether
    it was written."""
    if not queue(config, visit):
        return False
    if store.keys.member_shard(config, visit.joined, visit.member).tag in flushing.flush_now():
        return False
    remember(config, visit)
    return True


def record_user(
    user: AbstractBaseUser | AnonymousUser,
    timestamp: float,
    *,
    former_guest: str = "",
    room: str = "",
) -> bool:
    """Record ``user`` now, writing at once; False if Redis could not be written."""
    config = get_config()
    details = users.details(user, config)
    return _written(config, user_visit(details, timestamp, former_guest=former_guest, room=room))


def record_member(
    config: Config,
    kind: str,
    member: str,
    timestamp: float,
    *,
    former_user: str = "",
    room: str = "",
) -> bool:
    """Record a guest or bot now, writing at once; False if Redis could not be written."""
    return _written(
        config, member_visit(kind, member, timestamp, former_user=former_user, room=room)
    )


def record_request(
    request: HttpRequest, config: Config, now: float, placement: rooms.Placement
) -> Recorded:
    """Record whoever made ``request``, placed as ``placement`` says, unless this process's
    memory spares the write: queue the visit, and with ``FLUSH_INTERVAL`` 0 write it now.

    The outcome is FAILED when the visit may not be stored (see ``queue``), so that the caller
    hands out no throttle cookie; ARRIVED when the visitor's browser sent no genuine cookie (or
    one from before Redis lost its data), or this process recorded them moments ago (a login
    records the user at once), so that their next page reads afresh; WRITTEN otherwise.
    """
    visitor = _visitor_of(getattr(request, "user", None), request, config, now)
    found = _spared(visitor, request, config, now, placement)
    if isinstance(found, Recorded):
        return found
    if visitor.user is None:
        visit = member_visit(
            visitor.kind, visitor.member, now, room=placement.room, room_mode=placement.mode
        )
    else:
        details = users.details(visitor.user, config)
        visit = user_visit(details, now, room=placement.room, room_mode=placement.mode)
    queued = queue(config, visit, room_tag=found.room_tag)
    failed = flushing.after_recording(config)
    return _recorded(config, request, visit, found, queued=queued, failed=failed)


async def arecord_request(
    request: HttpRequest, config: Config, now: float, placement: rooms.Placement
) -> Recorded:
    """``record_request`` for an ASGI site: the user is loaded with ``request.auser()``, and the
    visit queued from the event loop, which never waits on Redis for it. With ``FLUSH_INTERVAL``
    0 the queue is written in a thread of its own, which a client that hangs up cannot cut off.
    """
    auser = getattr(request, "auser", None)  # set by AuthenticationMiddleware
    user = getattr(request, "user", None) if auser is None else await auser()
    visitor = _visitor_of(user, request, config, now)
    found = _spared(visitor, request, config, now, placement)
    if isinstance(found, Recorded):
        return found
    if visitor.user is None:
        visit = member_visit(
            visitor.kind, visitor.member, now, room=placement.room, room_mode=placement.mode
        )
    else:
        try:
            details = users.details(visitor.user, config)
        except SynchronousOnlyOperation:
            # The site's HIDE_USER or DISPLAY_NAME reads the database, which it may not do here.
            details = await sync_to_async(users.details)(visitor.user, config)
        visit = user_visit(details, now, room=placement.room, room_mode=placement.mode)
    queued = queue(config, visit, room_tag=found.room_tag)
    if flushing.writes_at_once(config):
        failed = await sync_to_async(flushing.flusher().flush, thread_sensitive=False)()
    else:
        failed = flushing.after_recording(config)
    return _recorded(config, request, visit, found, queued=queued, failed=failed)


def _recorded(
    config: Config,
    request: HttpRequest,
    visit: Visit,
    found: _Writing,
    *,
    queued: bool,
    failed: frozenset[str],
) -> Recorded:
    shard = store.keys.member_shard(config, visit.joined, visit.member)
    if not queued or shard.tag in failed:
        return Recorded(FAILED, found.at, found.room_tag)
    if flushing.writes_at_once(config):
        remember(config, visit, found.room_tag)
    cookie = throttle.on_request(request)
    arriving = cookie is None or epochs.epochs.gone(cookie.epoch, config)
    return Recorded(
        ARRIVED if arriving else WRITTEN, found.at, found.room_tag, epochs.epochs.of(shard)
    )


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
    """A visit about to be queued: what its cookie will say of it."""

    at: float
    room_tag: str


def _spared(
    visitor: _Visitor, request: HttpRequest, config: Config, now: float, placement: rooms.Placement
) -> Recorded | _Writing:
    """What recording ``request`` comes to without a write (a ``Recorded``), or what its cookie
    will say once queued.

    The process's memory is asked only for a browser that sent no genuine cookie: a cookie says
    where its browser was last put, whichever process did so, while the memory knows only what
    this process wrote. For a page view it spares the write only on a site that uses no rooms:
    another process may have moved a client without cookies to another room since, and only a
    write puts them where their latest page is.
    """
    cookie = throttle.on_request(request)
    if placement.mode == GO:
        tag = rooms.room_tag(placement.room)
    elif cookie is not None:
        # Not a page view: the visitor stays where their browser's latest page view put them.
        tag = cookie.room
    elif placement.mode == STAY:
        # Where they most likely end up; leaving it again is checked against Redis anyway.
        tag = rooms.room_tag(placement.room)
    else:
        tag = throttle.UNKNOWN_ROOM
    if visitor is _NOBODY:
        return Recorded(WRITTEN, now, tag)
    if cookie is None and config.throttle:
        entry = recent.entry(visitor.remembered, now, epochs.generation())
        if entry is not None and _memory_spares(entry[1], placement, tag, config):
            # The cookie handed out runs from the visit that was stored, not from now.
            epoch = epochs.epochs.of(_shard_of(visitor, config))
            return Recorded(ARRIVED, entry[0] - config.throttle, entry[1], epoch)
    return _Writing(now, tag)


def _shard_of(visitor: _Visitor, config: Config) -> keyspace.Shard:
    if visitor.user is not None:
        return store.keys.user_shard(config, users.pk_text(visitor.user))
    return store.keys.member_shard(config, visitor.kind, visitor.member)


def _memory_spares(remembered: str, placement: rooms.Placement, tag: str, config: Config) -> bool:
    """Whether a visitor this process wrote within THROTTLE, in the room of tag ``remembered``,
    needs no write for this visit: one that places them nowhere new, or a page view in the same
    room on a site that uses no rooms (see ``_spared``)."""
    if placement.mode != GO:
        return True
    return remembered == tag and not rooms.in_use(config)


def leave_room(request: HttpRequest, config: Config, room: str) -> bool:
    """Take the person making ``request`` out of ``room`` within ``store.presence.LEAVE_GRACE``
    seconds, if their throttle cookie (or, for a client without one, this process's memory) says
    they were put in it, and it is still theirs in Redis. Returns whether the cookie (or memory)
    said so, so that the caller spends the cookie: a second word of leaving does nothing.

    A cookie that knows no room (``throttle.UNKNOWN_ROOM``: a page's own request wrote its
    reader after a reload's leaving word had spent the cookie before, and before the new page
    said "still here") does not stop them: Redis checks that the room is theirs."""
    now = time.time()
    visitor = _visitor_of(getattr(request, "user", None), request, config, now)
    if visitor is _NOBODY:
        return False
    tag = rooms.room_tag(room)
    cookie = throttle.on_request(request)
    if cookie is not None:
        if cookie.room not in {tag, throttle.UNKNOWN_ROOM}:
            return False
    else:
        entry = recent.entry(visitor.remembered, now, epochs.generation())
        if entry is None or entry[1] != tag:
            return False
    recent.forget([visitor.remembered])
    if visitor.user is None:
        kind, member = visitor.kind, visitor.member
    else:
        kind, member = "users", users.pk_text(visitor.user)
    flushing.leave_room(kind, member, room, now)
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


def count_hit(now: float | datetime | None = None) -> None:
    """Count one page view in the process buffer; the flusher writes it with the visits it
    queued (within ``hits.LONGEST_WAIT`` seconds with ``FLUSH_INTERVAL`` 0).

    The middleware calls this for every page view it does not ignore when ``COUNT_HITS`` is on.
    """
    hits.buffer().add(as_timestamp(now))
    flushing.after_hit(get_config())


def flush_if_stopping() -> None:
    """Once the process has been asked to stop, write what a request that recorded no visit
    holds (its page hit) before it answers, as a recorded request writes its visit: the process
    may end without running its exit handlers (``flushing.stopping``)."""
    if flushing.is_stopping():
        flushing.flush_now()


async def aflush_if_stopping() -> None:
    """``flush_if_stopping`` from an event loop, which never waits on Redis itself."""
    if flushing.is_stopping():
        await sync_to_async(flushing.flush_now, thread_sensitive=False)()


def flush_hits() -> bool:
    """Write the buffered page hits (and queued visits) now; False (and all of it kept) if
    Redis failed."""
    return flushing.flush()
