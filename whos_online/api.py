"""The Python API of whos_online, also importable from the package itself.

Every function here fails open, as a view or a template wants: while Redis is unreachable, slow
or refusing writes, readers get empty lists, zero counts or ``None`` and writers do nothing (and
say so where a caller must know). The cleanup command uses ``store`` directly and fails loudly.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, TypeVar

from asgiref.sync import sync_to_async

from whos_online import signals
from whos_online.backend import connection
from whos_online.backend.keyspace import USER_KINDS, person_key, user_person_key
from whos_online.config.settings import get_config
from whos_online.flushing import flusher
from whos_online.flushing.flusher import flush
from whos_online.reading import snapshots, viewer
from whos_online.reading.viewer import room_token
from whos_online.recording import guests, rooms, visits
from whos_online.recording.rooms import set_room
from whos_online.recording.throttle import recent
from whos_online.store import cleanup, counters, snapshot
from whos_online.store.results import (
    EMPTY_COUNTS,
    UNKNOWN_PRESENCE,
    OnlineCounts,
    OnlineUser,
    Peak,
    Presence,
    as_datetime,
    as_peak,
    as_timestamp,
    as_utc_date,
)
from whos_online.store.users import (
    ask_online_user_pks,
    ask_users_presence,
    erase_user,
    pk_text,
    pk_values,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable
    from datetime import date, datetime

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config

T = TypeVar("T")

__all__ = [
    "OnlineCounts",
    "OnlineUser",
    "Peak",
    "Presence",
    "aenter",
    "aflush",
    "ais_online",
    "alast_seen",
    "aleave",
    "aonline_counts",
    "aonline_users",
    "apresence",
    "clean_counters",
    "enter",
    "flush",
    "forget_user",
    "get_counter",
    "is_online",
    "last_seen",
    "leave",
    "online_counts",
    "online_user_pks",
    "online_users",
    "peak",
    "presence",
    "prune",
    "record_guest",
    "record_user",
    "room_token",
    "set_room",
    "shows_names_to",
    "unique_visitors",
    "update_counter",
]


def online_users(limit: int | None = None, room: str | None = None) -> list[OnlineUser]:
    """Users online now, newest first (in ``room``, if given), hidden users never; ``limit=None``
    lists everyone online, which is O(N): on a big site pass a limit."""
    found = snapshots.read(limit, room=_room(room))
    return [] if found is None else found.users


def online_counts(room: str | None = None) -> OnlineCounts:
    """How many are online on the site, or in ``room``."""
    found = snapshots.read(0, room=_room(room))
    return EMPTY_COUNTS if found is None else found.counts


def shows_names_to(user: AbstractBaseUser | AnonymousUser) -> bool:
    """Whether ``SHOW_NAMES_TO`` lets ``user`` see who is online by name: for an endpoint of
    the site's own API, whose authentication (a token, say) the JSON view cannot know."""
    return viewer.shows_names_to(user, get_config())


def _room(room: str | None) -> str:
    return "" if room is None else rooms.check_room(room)


def is_online(user: AbstractBaseUser | AnonymousUser) -> bool:
    """Whether ``user`` was seen within ``WINDOW``: the truth, for a hidden user too (code that
    shows it to others shows a hidden user only to themselves and staff, as ``{% last_seen %}``)."""
    return user.is_authenticated and _presence_of(user).online


def last_seen(user: AbstractBaseUser | AnonymousUser) -> datetime | None:
    """When the user was last recorded (kept ``LAST_SEEN_DAYS``); the truth, as ``is_online``."""
    return _presence_of(user).last_seen if user.is_authenticated else None


def _presence_of(user: AbstractBaseUser | AnonymousUser) -> Presence:
    return next(iter(presence([user]).values()))


def presence(users: Iterable[AbstractBaseUser | object]) -> dict[object, Presence]:
    """Whether each of ``users`` (users or pks) is online and when last seen, by pk, in one round
    trip (an admin changelist costs one read, not one per row); everyone offline and unseen if
    Redis fails. Hidden users are reported as they are, as by ``is_online``."""
    keys = [getattr(user, "pk", user) for user in users]
    texts = [pk_text(key) for key in keys]
    if not texts:
        return {}
    now = time.time()
    found = snapshots.read_after_own_visits(
        None, lambda pipe, config: ask_users_presence(pipe, config, texts)
    )
    if found is None:
        return dict.fromkeys(keys, UNKNOWN_PRESENCE)
    window = get_config().window
    return {
        key: Presence(
            online=score is not None and score >= now - window,
            last_seen=None if seen is None else as_datetime(seen),
        )
        for key, (score, seen) in zip(keys, found, strict=True)
    }


def online_user_pks(limit: int) -> list[object] | None:
    """Primary keys of up to ``limit`` users online, hidden ones included (to filter a
    queryset; O(log N + limit)); None if Redis fails."""
    now = time.time()
    found = snapshots.read_after_own_visits(
        None,
        lambda pipe, config: ask_online_user_pks(pipe, config, now=now, limit=limit),
    )
    return None if found is None else pk_values(found)


def record_user(
    user: AbstractBaseUser | AnonymousUser,
    *,
    now: float | datetime | None = None,
    former_guest: str = "",
    room: str | None = None,
) -> bool:
    """Record ``user`` as online now (in ``room``, else in none); False if Redis could not be
    written. ``former_guest``, their member as a guest before logging in, leaves the anonymous
    sets in the same step. ``HIDE_USER`` and ``DISPLAY_NAME`` run now, not after ``THROTTLE``."""
    if not user.is_authenticated:
        msg = "record_user() needs an authenticated user; use record_guest() for visitors."
        raise ValueError(msg)
    timestamp = as_timestamp(now)
    return bool(visits.record_user(user, timestamp, former_guest=former_guest, room=_room(room)))


def record_guest(
    ip: str, *, bot: bool = False, now: float | datetime | None = None, room: str | None = None
) -> bool:
    """Record the guest (or bot) at address ``ip``, in ``room`` if given."""
    address = guests.normalize_ip(ip)
    if address is None:
        msg = f"record_guest() needs an IPv4 or IPv6 address, not {ip!r}."
        raise ValueError(msg)
    config = get_config()
    timestamp = as_timestamp(now)
    member = guests.guest_id(address, config, timestamp)
    kind = "bots" if bot else "guests"
    return bool(visits.record_member(config, kind, member, timestamp, room=_room(room)))


def forget_user(user: AbstractBaseUser | AnonymousUser | object) -> bool:
    """Erase everything whos_online holds about a user or pk (a data-protection request);
    False if Redis could not be reached, so that the caller retries rather than skips it."""
    pk = pk_text(user)
    recent().forget([user_person_key(pk)])
    flusher.current().forget([user_person_key(pk)])
    now = time.time()
    snapshots.invalidate()
    return connection.call(False, functools.partial(erase_user, pk=pk, now=now), writes=True)


def update_counter(name: str, count: int = 1, now: float | datetime | None = None) -> bool:
    """Add ``count`` to the counter ``name`` at every precision, in one round trip; False if
    Redis could not be written, TypeError or ValueError for a bad name or count (a caller's bug)."""
    counters.check_name(name)
    counters.check_count(count, "update_counter")
    timestamp = as_timestamp(now)

    def write(client: Client, config: Config) -> bool:
        counters.add(client, config, {(name, int(timestamp)): count})
        return True

    return connection.call(False, write, writes=True)


def get_counter(name: str, precision: int) -> list[tuple[int, int]]:
    """The samples of counter ``name`` at ``precision``: (slice start in Unix seconds, count),
    oldest first; empty for an unknown counter or when Redis fails."""
    counters.check_name(name)
    counters.check_precision(precision, get_config().counter_precisions, "get_counter")
    return connection.call([], lambda client, config: counters.get(client, config, name, precision))


def reporter(sender: object) -> Callable[[str, list[str]], None]:
    """What hears of the members a prune took off the online sets: this process forgets them (so
    that their next visit is written), and ``went_offline`` and ``users_went_offline`` tell."""

    def gone(kind: str, members: list[str]) -> None:
        recent().forget(person_key(kind, member) for member in members)
        user_ids = pk_values(members) if kind in USER_KINDS else []
        signals.went_offline.send(sender=sender, kind=kind, members=members, user_ids=user_ids)
        if kind in USER_KINDS:
            signals.users_went_offline.send(sender=sender, user_ids=user_ids)

    return gone


def prune(now: float | datetime | None = None) -> int:
    """Remove everyone last seen before the window, from the site and the rooms; returns how many
    left the site. The queue is written first, so that no visit queued before lands after."""
    timestamp = as_timestamp(now)
    gone = reporter(prune)
    flusher.current().flush()

    def prune_all(client: Client, config: Config) -> int:
        removed = cleanup.prune_with(client, config, now=timestamp, on_gone=gone)
        cleanup.prune_rooms(client, config, now=timestamp)
        return sum(removed.values())

    return connection.call(0, prune_all, writes=True)


def clean_counters(now: float | datetime | None = None) -> int:
    """Drop counter samples beyond the newest ``COUNTER_SAMPLES`` slices of every counter and
    precision, and counters of precisions no longer configured; returns the samples removed."""
    timestamp = as_timestamp(now)
    cleaned = connection.call(
        None, lambda client, config: counters.clean(client, config, now=timestamp), writes=True
    )
    return cleaned.samples if cleaned else 0


def peak() -> Peak:
    """The all-time peak of people online; ``(0, None)`` before any visit or if Redis fails."""
    unknown: tuple[int, float | None] = (0, None)
    return as_peak(*snapshots.read_after_own_visits(unknown, snapshot.ask_peak))


def unique_visitors(day: date | datetime | None = None) -> int:
    """About how many distinct users and guests visited on a UTC day (today by default): a
    HyperLogLog's estimate, within about 1 %, kept ``LAST_SEEN_DAYS`` after the day."""
    wanted = as_utc_date(day, time.time())
    if get_config().redis_cluster:
        # A cluster's pipelines refuse PFCOUNT: the flush, then the read.
        flusher.current().flush()
        return connection.call(
            0, lambda client, config: snapshot.unique_visitors(client, config, wanted)
        )
    return snapshots.read_after_own_visits(
        0, lambda pipe, config: snapshot.ask_unique_visitors(pipe, config, wanted)
    )


def enter(
    room: str,
    *,
    user: AbstractBaseUser | AnonymousUser | None = None,
    address: str | None = None,
    connection: str,
    now: float | datetime | None = None,
) -> bool:
    """Put the person of ``connection`` (``user`` if authenticated, else the guest at
    ``address``) in ``room`` while it stays open: call it again within ``WINDOW`` to renew it,
    ``leave`` when it closes. Queued; False when it may not be stored soon. ``HIDE_USER`` and
    ``DISPLAY_NAME`` may read the database: async code calls ``aenter``."""
    config = get_config()
    link = visits.entering(config, *_where(room, connection, now), user=user, address=address)
    return visits.send_link(config, link)


def leave(
    room: str,
    *,
    user: AbstractBaseUser | AnonymousUser | None = None,
    address: str | None = None,
    connection: str,
    now: float | datetime | None = None,
) -> bool:
    """Take ``connection`` out of ``room`` (``enter``'s, with the same person): its person leaves
    the room with the last of their connections there. Queued like ``enter``."""
    config = get_config()
    link = visits.leaving(config, *_where(room, connection, now), user=user, address=address)
    return visits.send_link(config, link)


def _where(room: str, connection: str, now: float | datetime | None) -> tuple[str, str, float]:
    """``enter``'s and ``leave``'s room, connection and time, checked."""
    return _room(room), visits.check_connection(connection), as_timestamp(now)


# The async API: writes queue from the event loop; reads run the sync API in a thread of
# asgiref's pool, not Django's one database thread, where they would queue behind queries.


async def aenter(
    room: str,
    *,
    user: AbstractBaseUser | AnonymousUser | None = None,
    address: str | None = None,
    connection: str,
    now: float | datetime | None = None,
) -> bool:
    """``enter`` for async code (a Channels consumer): never blocks the event loop."""
    config = get_config()
    where = _where(room, connection, now)
    link = await visits.aentering(config, *where, user=user, address=address)
    return await visits.asend_link(config, link)


async def aleave(
    room: str,
    *,
    user: AbstractBaseUser | AnonymousUser | None = None,
    address: str | None = None,
    connection: str,
    now: float | datetime | None = None,
) -> bool:
    """``leave`` for async code: never blocks the event loop."""
    config = get_config()
    link = visits.leaving(config, *_where(room, connection, now), user=user, address=address)
    return await visits.asend_link(config, link)


def _in_thread(function: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    return sync_to_async(function, thread_sensitive=False)


async def aonline_users(limit: int | None = None, room: str | None = None) -> list[OnlineUser]:
    """``online_users`` for async code, read in a thread."""
    return await _in_thread(online_users)(limit, room)


async def aonline_counts(room: str | None = None) -> OnlineCounts:
    """``online_counts`` for async code, read in a thread."""
    return await _in_thread(online_counts)(room)


async def ais_online(user: AbstractBaseUser | AnonymousUser) -> bool:
    """``is_online`` for async code, read in a thread."""
    return await _in_thread(is_online)(user)


async def alast_seen(user: AbstractBaseUser | AnonymousUser) -> datetime | None:
    """``last_seen`` for async code, read in a thread."""
    return await _in_thread(last_seen)(user)


async def apresence(users: Iterable[AbstractBaseUser | object]) -> dict[object, Presence]:
    """``presence`` for async code, read in a thread. ``users`` is taken in the loop: a list of
    users or primary keys (an unevaluated queryset cannot be iterated there)."""
    return await _in_thread(presence)(list(users))


async def aflush() -> bool:
    """``flush`` for async code, written in a thread."""
    return await _in_thread(flush)()
