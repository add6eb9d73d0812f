"""Visits and connections made and queued: what a recorded request, a login or logout,
``record_*``, ``enter`` and ``leave`` hand on.

Each is queued in the process and written with the next flush, so that the caller never waits on
Redis (unless ``FLUSH_INTERVAL`` is 0; ``record_user`` and ``record_guest`` write at once). A
queued visit is remembered in the process's memory of recent visitors (``throttle.recent()``), so
that a client without cookies costs one write per ``THROTTLE``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation

from whos_online.backend import connection, keyspace
from whos_online.backend.keyspace import former_guest_keys, user_person_key
from whos_online.config import process
from whos_online.config.settings import Config, get_config
from whos_online.flushing import batches, flusher
from whos_online.recording import guests, rooms, throttle
from whos_online.recording.state import state_of
from whos_online.recording.throttle import recent
from whos_online.store import epochs, users
from whos_online.store.items import GO, STAY, STAYS_PUT, Link, Placement, Visit
from whos_online.store.results import as_timestamp

if TYPE_CHECKING:
    from datetime import datetime

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    from whos_online.backend.keyspace import Shard
    from whos_online.store.items import Visitor

    Someone = AbstractBaseUser | AnonymousUser | None


def user_visit(
    details: users.UserDetails,
    timestamp: float,
    *,
    former_guest: str = "",
    room: str = "",
    room_mode: str = GO,
    title: str = "",
) -> Visit:
    pk = details.pk
    return Visit(
        unhidden_kind="users",
        member=pk,
        seen_at=timestamp,
        user=details,
        former=former_guest,
        daily_id=guests.daily_id(user_person_key(pk), timestamp),
        room=room,
        room_mode=room_mode,
        title=title,
    )


def member_visit(
    kind: str,
    member: str,
    timestamp: float,
    *,
    former_user: str = "",
    room: str = "",
    room_mode: str = GO,
    title: str = "",
) -> Visit:
    # Bots are not visitors; guests are namespaced apart from user ids in the HyperLogLog.
    daily_id = "" if kind == "bots" else guests.daily_id(f"g:{member}", timestamp)
    return Visit(
        unhidden_kind=kind,
        member=member,
        seen_at=timestamp,
        former=former_user,
        daily_id=daily_id,
        room=room,
        room_mode=room_mode,
        title=title,
    )


def queue(config: Config, visit: Visit, shard: Shard, *, room_tag: str | None = None) -> bool:
    """Queue ``visit``, of ``shard``; False when it may not be stored soon: the queue is full, or
    Redis is known to be down for the shard (it is queued, then, and written once Redis answers
    again). Known to be down from a failed write until a call succeeds, the back-off passed or
    not (``breakers.known_to_fail``): in the moments after a back-off, before the flush that
    tries again has failed, Redis is no more up than during it. When the queue is written at
    once (``flusher.writes_at_once``), that write says.

    Otherwise the visit is remembered in the process's memory from now: if its flush fails, the
    memory's generation changes, and with it what the memory vouches for."""
    if not flusher.current().put(visit):
        return False
    if flusher.writes_at_once(config):
        return True
    if connection.known_to_fail(config, shard, writes=True):
        return False
    remember(config, visit, room_tag)
    return True


def remember(config: Config, visit: Visit, room_tag: str | None = None) -> None:
    """Note ``visit`` in the process's memory of recent visitors (``throttle.recent()``), with the
    tag of its room (by default of ``visit.room``)."""
    if not config.throttle:
        return
    tag = rooms.room_tag(visit.room) if room_tag is None else room_tag
    recent().remember(visit.person, visit.seen_at + config.throttle, epochs.generation(), tag)
    if visit.former and visit.unhidden_kind == "users":
        recent().forget(former_guest_keys(visit.former))


def record_soon(config: Config, visit: Visit) -> None:
    """Queue ``visit`` for the next flush, or write it now when the process writes at once
    (remembering it once written), as a recorded request does."""
    shard = keyspace.member_shard(config, visit.kind, visit.member)
    if not queue(config, visit, shard):
        return
    if not flusher.writes_at_once(config):
        flusher.current().schedule(config.flush_interval)
    elif shard.tag not in flusher.current().flush():
        remember(config, visit)


def _written(config: Config, visit: Visit) -> bool:
    """Queue ``visit`` and write the queue now, as the API and the login receiver do: whether
    it was written."""
    shard = keyspace.member_shard(config, visit.kind, visit.member)
    if not queue(config, visit, shard):
        return False
    if shard.tag in flusher.current().flush():
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


def count_hit(now: float | datetime | None = None) -> None:
    """Count one page view in the process buffer; the flusher writes it with the visits it
    queued, or within ``batches.LONGEST_WAIT`` seconds when it queued none.

    The middleware calls this for every page view it does not ignore when ``COUNT_HITS`` is on.
    """
    batches.buffer().add(as_timestamp(now))
    flusher.after_hit(get_config())


def flush_if_stopping() -> None:
    """Once the process has been asked to stop, write what a request that recorded no visit
    holds (its page hit) before it answers, as a recorded request writes its visit: the process
    may end without running its exit handlers (``flushing.stopping``)."""
    if process.is_stopping():
        flusher.current().flush()


async def aflush_if_stopping() -> None:
    """``flush_if_stopping`` from an event loop, which never waits on Redis itself."""
    if process.is_stopping():
        await sync_to_async(flusher.current().flush, thread_sensitive=False)()


def flush_hits() -> bool:
    """Write the buffered page hits (and queued visits) now; False (and all of it kept) if
    Redis failed."""
    return flusher.flush()


def visit_of(
    visitor: Visitor, config: Config, now: float, placement: Placement, title: str
) -> Visit:
    title = title if placement.mode == GO and placement.room else ""
    details = visitor.details(config)
    if details is None:
        return member_visit(
            visitor.kind,
            visitor.member,
            now,
            room=placement.room,
            room_mode=placement.mode,
            title=title,
        )
    return user_visit(details, now, room=placement.room, room_mode=placement.mode, title=title)


def leave_room(request: HttpRequest, config: Config, room: str) -> bool:
    """Take the person making ``request`` out of ``room`` within ``LEAVE_GRACE``
    seconds, if their throttle cookie (or, for a client without one, this process's memory) says
    they were put in it, and it is still theirs in Redis. Returns whether the cookie (or memory)
    said so, so that the caller spends the cookie: a second word of leaving does nothing.

    A cookie that knows no room (``throttle.UNKNOWN_ROOM``: a page's own request wrote its
    reader after a reload's leaving word had spent the cookie before, and before the new page
    said "still here") does not stop them: Redis checks that the room is theirs."""
    now = time.time()
    state = state_of(request)
    visitor = state.visitor(config, now)
    if visitor is None:
        return False
    tag = rooms.room_tag(room)
    cookie = state.cookie
    if cookie is not None:
        if cookie.room not in {tag, throttle.UNKNOWN_ROOM}:
            return False
    else:
        entry = recent().entry(visitor.key, now, epochs.generation())
        if entry is None or entry[1] != tag:
            return False
    recent().forget([visitor.key])
    kind = visitor.kind if visitor.user is None else "users"
    flusher.leave_room(kind, visitor.member, room, now)
    return True


def record_again(visitor: Visitor, config: Config, room: str = "") -> bool:
    """Queue a visit of ``visitor``, whose page is open, in ``room`` unless a later page put
    them in another (a page's "still here"): Redis lost what it held of them (a restart without
    its data), and their page would otherwise wait for its next "still here", or the reader's
    next page, to show them again. Spared when this process wrote them since it learned of the
    loss (``recent``: several pages of one person, one write). Returns whether it was queued."""
    now = time.time()
    if config.throttle and recent().entry(visitor.key, now, epochs.generation()) is not None:
        return False
    if room:
        visit = visit_of(visitor, config, now, Placement(room, STAY), "")
        tag = rooms.room_tag(room)
    else:  # online, wherever they were
        visit = visit_of(visitor, config, now, STAYS_PUT, "")
        tag = throttle.UNKNOWN_ROOM
    queued = queue(config, visit, visitor.shard, room_tag=tag)
    flusher.after_recording(config)
    return queued


#: Longest connection id, in characters: an id becomes part of a Redis member.
MAX_CONNECTION_LENGTH: Final = 200


def check_connection(connection: object) -> str:
    """``connection`` if it is a connection id (text of 1 to ``MAX_CONNECTION_LENGTH``
    characters)."""
    if not isinstance(connection, str) or not 1 <= len(connection) <= MAX_CONNECTION_LENGTH:
        msg = (
            f"A connection is named by text of 1 to {MAX_CONNECTION_LENGTH} characters "
            f"(a Channels consumer's channel_name), not {connection!r:.40}."
        )
        raise ValueError(msg)
    return connection.encode("utf-8", "replace").decode()


def _is_user(user: Someone) -> bool:
    return user is not None and bool(user.is_authenticated)


def _guest(config: Config, address: str | None, now: float) -> str:
    """The member of the guest at ``address`` today."""
    normalized = guests.normalize_ip(address) if isinstance(address, str) else None
    if normalized is None:
        msg = (
            "A connection's person is an authenticated user, or a guest named by an IPv4 or IPv6 "
            f"address, not {address!r:.60}."
        )
        raise ValueError(msg)
    return guests.guest_id(normalized, config, now)


def entering(
    config: Config,
    room: str,
    connection: str,
    now: float,
    *,
    user: Someone,
    address: str | None,
    details: users.UserDetails | None = None,
) -> Link:
    """A connection of ``user`` (or else of the guest at ``address``) entering ``room``: runs
    ``HIDE_USER`` and ``DISPLAY_NAME`` unless ``details`` gives what they said."""
    if _is_user(user):
        assert user is not None
        found = details if details is not None else users.details(user, config)
        kind = "hidden" if found.hidden else "users"
        daily_id = guests.daily_id(user_person_key(found.pk), now)
        return Link(kind, found.pk, room, connection, now, user=found, daily_id=daily_id)
    member = _guest(config, address, now)
    daily_id = guests.daily_id(f"g:{member}", now)
    return Link("guests", member, room, connection, now, daily_id=daily_id)


def leaving(
    config: Config, room: str, connection: str, now: float, *, user: Someone, address: str | None
) -> Link:
    """A connection of ``user`` (or else of the guest at ``address``) leaving ``room``: who they
    are takes no ``HIDE_USER`` (the script takes a user out of both user sets)."""
    if _is_user(user):
        assert user is not None
        return Link("users", users.pk_text(user), room, connection, now, leaving=True)
    return Link("guests", _guest(config, address, now), room, connection, now, leaving=True)


async def aentering(
    config: Config,
    room: str,
    connection: str,
    now: float,
    *,
    user: Someone,
    address: str | None,
) -> Link:
    """``entering`` from an event loop: a ``HIDE_USER`` or ``DISPLAY_NAME`` that reads the
    database runs in Django's thread for that, as the middleware runs it."""
    try:
        return entering(config, room, connection, now, user=user, address=address)
    except SynchronousOnlyOperation:
        assert user is not None
        details = await sync_to_async(users.details)(user, config)
        return entering(config, room, connection, now, user=user, address=address, details=details)


def queue_link(config: Config, link: Link) -> bool:
    """Queue ``link`` for the next flush; False when it may not be stored soon (the queue is
    full, or Redis is known to be down for its shard: it is queued then, and written once Redis
    answers again)."""
    if not flusher.current().put(link):
        return False
    if flusher.writes_at_once(config):
        return True
    shard = keyspace.member_shard(config, link.kind, link.member)
    return not connection.known_to_fail(config, shard, writes=True)


def send_link(config: Config, link: Link) -> bool:
    """Queue ``link`` and wake the flushing thread, or write the queue now when the process
    writes at once (``FLUSH_INTERVAL`` 0, or stopping); whether it is (or will soon be)
    stored."""
    queued = queue_link(config, link)
    failed = flusher.after_recording(config)
    return queued and keyspace.member_shard(config, link.kind, link.member).tag not in failed


async def asend_link(config: Config, link: Link) -> bool:
    """``send_link`` from an event loop, which never waits on Redis: a write at once goes to a
    thread."""
    queued = queue_link(config, link)
    if not flusher.writes_at_once(config):
        flusher.current().schedule(config.flush_interval)
        return queued
    failed = await sync_to_async(flusher.current().flush, thread_sensitive=False)()
    return queued and keyspace.member_shard(config, link.kind, link.member).tag not in failed
