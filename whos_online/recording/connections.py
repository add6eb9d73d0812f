"""Connections entering and leaving rooms: what ``enter`` and ``leave`` queue.

A long-lived channel (a WebSocket, a server-sent stream) holds its person in a room while it is
open; what it says is queued like a visit and written with the next flush, so that the caller
never waits on Redis (docs/connections.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation

from whos_online.backend import connection
from whos_online.flushing import flusher
from whos_online.recording import guests
from whos_online.store import keys, users
from whos_online.store.items import Link
from whos_online.store.keys import user_person_key

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

    from whos_online.config.settings import Config

    Someone = AbstractBaseUser | AnonymousUser | None

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


def queue(config: Config, link: Link) -> bool:
    """Queue ``link`` for the next flush; False when it may not be stored soon (the queue is
    full, or Redis is known to be down for its shard: it is queued then, and written once Redis
    answers again)."""
    if not flusher.current().put(link):
        return False
    if flusher.writes_at_once(config):
        return True
    shard = keys.member_shard(config, link.kind, link.member)
    return not connection.known_to_fail(config, shard, writes=True)


def send(config: Config, link: Link) -> bool:
    """Queue ``link`` and wake the flushing thread, or write the queue now when the process
    writes at once (``FLUSH_INTERVAL`` 0, or stopping); whether it is (or will soon be)
    stored."""
    queued = queue(config, link)
    failed = flusher.after_recording(config)
    return queued and keys.member_shard(config, link.kind, link.member).tag not in failed


async def asend(config: Config, link: Link) -> bool:
    """``send`` from an event loop, which never waits on Redis: a write at once goes to a
    thread."""
    queued = queue(config, link)
    if not flusher.writes_at_once(config):
        flusher.current().schedule(config.flush_interval)
        return queued
    failed = await sync_to_async(flusher.current().flush, thread_sensitive=False)()
    return queued and keys.member_shard(config, link.kind, link.member).tag not in failed
