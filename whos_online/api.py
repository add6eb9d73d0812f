"""The Python API of whos_online (also importable from the package itself).

Every function here fails open: while Redis is unreachable, slow or refusing writes, readers get
empty lists, zero counts or ``None`` and writers do nothing, and the circuit breaker in
``connection`` keeps further calls from waiting on Redis for ``FAILURE_BACKOFF`` seconds. That is
what a view or a template wants. The cleanup command uses ``store`` directly and fails loudly.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.exceptions import SynchronousOnlyOperation, ValidationError

from whos_online import (
    aio,
    connection,
    counters,
    hits,
    identity,
    keyspace,
    signals,
    snapshots,
    store,
)
from whos_online.conf import Config, get_config
from whos_online.text import clean_name, linkable_url
from whos_online.throttle import recent

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    from whos_online.connection import Client

T = TypeVar("T")

#: Longest display name stored; longer names are cut, so one user cannot bloat the list.
MAX_NAME_LENGTH = 150


@dataclass(frozen=True)
class OnlineUser:
    pk: object
    name: str
    url: str
    last_seen: datetime

    def __str__(self) -> str:
        return self.name


class OnlineCounts(NamedTuple):
    users: int
    guests: int
    bots: int
    #: People online: users (hidden ones included) and guests, not bots.
    total: int


EMPTY_COUNTS = OnlineCounts(0, 0, 0, 0)


class Peak(NamedTuple):
    """The most people (users and guests, not bots) ever online at once, and when."""

    people: int
    #: None until someone has been recorded (or since the peak was reset).
    when: datetime | None


NO_PEAK = Peak(0, None)


def call_redis(
    default: T,
    operation: Callable[[Client, Config], T],
    *,
    shard: keyspace.Shard | None = None,
    writes: bool = False,
) -> T:
    """Run ``operation`` with the request client, or return ``default`` if Redis fails; pass
    ``writes`` when it writes, so that a Redis refusing writes stops it but not the reads."""
    return connection.call(default, operation, shard=shard, writes=writes)


def _now(now: float | datetime | None) -> float:
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        return now.timestamp()
    return float(now)


def _as_datetime(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc)


def _pk_text(user: AbstractBaseUser | AnonymousUser | object) -> str:
    return str(getattr(user, "pk", user))


def _pk_values(texts: Iterable[str]) -> list[object]:
    """Primary keys as the user model has them, from their stored text (kept as text if the
    model would not take it). The model's field is looked up once for the whole list."""
    to_python = get_user_model()._meta.pk.to_python
    values = []
    for text in texts:
        try:
            values.append(to_python(text))
        except ValidationError:
            values.append(text)
    return values


def display_name(user: AbstractBaseUser | AnonymousUser, config: Config) -> str:
    name = config.display_name(user) if config.display_name else user.get_username()
    # A lone surrogate cannot be sent to Redis; replace it rather than fail the request.
    # Cleaned after the cut, which could leave a bidirectional run open.
    return clean_name(str(name)[:MAX_NAME_LENGTH].encode("utf-8", "replace").decode())


def profile_url(user: AbstractBaseUser | AnonymousUser) -> str:
    """The user's ``get_absolute_url()``, if a link to it cannot run script (else "")."""
    get_absolute_url = getattr(user, "get_absolute_url", None)
    return linkable_url(str(get_absolute_url())) if callable(get_absolute_url) else ""


def online_users(limit: int | None = None) -> list[OnlineUser]:
    """Users online now, newest first; hidden users are never listed.

    ``limit=None`` lists everyone online, which is O(N): on a big site pass a limit.
    """
    found = snapshot(limit)
    return [] if found is None else listed_users(found)


def snapshot(
    limit: int | None, *, max_age: float = 0, fresh_after: int | None = None
) -> store.Snapshot | None:
    """Counts and the newest ``limit`` visible users; None if Redis could not be read.

    One round trip on one Redis; on a cluster one per shard, and a shard whose node fails counts
    as empty (its breaker logs the outage once) while the others are still shown. With
    ``max_age``, the snapshot this process read last is reused while it is younger than that,
    unless it was read before the second ``fresh_after`` (see ``snapshots``).
    """
    kept = snapshots.cache.get(limit, max_age, fresh_after=fresh_after)
    if kept is not None:
        return kept
    now = time.time()
    config = get_config()
    if config.redis_cluster and config.shards > 1:
        found = _snapshot_by_shard(config, limit, now)
    else:
        found = call_redis(
            None, lambda client, config: store.snapshot(client, config, limit=limit, now=now)
        )
    if found is not None and max_age > 0:
        snapshots.cache.put(found)
    return found


def _snapshot_by_shard(config: Config, limit: int | None, now: float) -> store.Snapshot | None:
    """One call per shard, each behind the breaker of its shard: a shard that fails counts as
    empty. A shard that ``store.unfinished`` names is asked again for ``limit`` names."""
    shards = keyspace.layout(config)
    asked = store.shard_limit(limit, len(shards))
    parts: dict[int, store.Snapshot] = {}
    for index, shard in enumerate(shards):
        found = _read_shard(config, shard, asked, now)
        if found is not None:
            parts[index] = found
    indexes = list(parts)
    for position in store.unfinished([parts[index] for index in indexes], limit, asked):
        index = indexes[position]
        found = _read_shard(config, shards[index], limit, now)
        if found is not None:
            parts[index] = found
    return store.combine(list(parts.values()), limit) if parts else None


def _read_shard(
    config: Config, shard: keyspace.Shard, limit: int | None, now: float
) -> store.Snapshot | None:
    calls = [store.snapshot_call(config, shard, limit=limit, now=now)]
    raw = call_redis(None, lambda client, _config: store.run(client, calls)[0], shard=shard)
    return None if raw is None else store.parse_snapshot(raw, limit)


def listed_users(found: store.Snapshot) -> list[OnlineUser]:
    pks = _pk_values(row.pk for row in found.listed)
    return [
        OnlineUser(pk=pk, name=row.name, url=row.url, last_seen=_as_datetime(row.seen))
        for pk, row in zip(pks, found.listed, strict=True)
    ]


def more_of(found: store.Snapshot) -> int:
    """Visible users online beyond those listed; hidden users are never part of it."""
    return max(found.visible - len(found.listed), 0)


def counts_of(found: store.Snapshot) -> OnlineCounts:
    users = found.visible + found.hidden
    return OnlineCounts(
        users=users, guests=found.guests, bots=found.bots, total=users + found.guests
    )


def online_counts() -> OnlineCounts:
    found = snapshot(0)
    return EMPTY_COUNTS if found is None else counts_of(found)


def is_online(user: AbstractBaseUser | AnonymousUser) -> bool:
    if not user.is_authenticated:
        return False
    now = time.time()
    score, _ = call_redis(_UNKNOWN_PRESENCE, _presence(user))
    return score is not None and score >= now - get_config().window


def last_seen(user: AbstractBaseUser | AnonymousUser) -> datetime | None:
    """When the user was last recorded; kept ``LAST_SEEN_DAYS`` after they leave."""
    if not user.is_authenticated:
        return None
    _, seen = call_redis(_UNKNOWN_PRESENCE, _presence(user))
    return None if seen is None else _as_datetime(seen)


_UNKNOWN_PRESENCE: tuple[float | None, float | None] = (None, None)


class Presence(NamedTuple):
    online: bool
    #: When the user was last recorded, or None (never, or longer ago than LAST_SEEN_DAYS).
    last_seen: datetime | None


UNKNOWN_PRESENCE = Presence(online=False, last_seen=None)


def presence(users: Iterable[AbstractBaseUser | object]) -> dict[object, Presence]:
    """Whether each of ``users`` (users or primary keys) is online, and when each was last
    seen, keyed by primary key: one Redis round trip for all of them, so that a list of users
    (an admin changelist, say) costs one read, not one per row. If Redis fails, everyone is
    offline and unseen."""
    keys = [getattr(user, "pk", user) for user in users]
    texts = [_pk_text(key) for key in keys]
    if not texts:
        return {}
    now = time.time()
    found = call_redis(None, lambda client, config: store.users_presence(client, config, texts))
    if found is None:
        return dict.fromkeys(keys, UNKNOWN_PRESENCE)
    window = get_config().window
    return {
        key: Presence(
            online=score is not None and score >= now - window,
            last_seen=None if seen is None else _as_datetime(seen),
        )
        for key, (score, seen) in zip(keys, found, strict=True)
    }


def online_user_pks(limit: int) -> list[object] | None:
    """Primary keys of up to ``limit`` users online, hidden ones included; None if Redis fails.

    For filtering a queryset of users; O(log N + limit), so pass a bound.
    """
    now = time.time()
    found = call_redis(
        None, lambda client, config: store.online_user_pks(client, config, now=now, limit=limit)
    )
    return None if found is None else _pk_values(found)


def _presence(
    user: AbstractBaseUser | AnonymousUser,
) -> Callable[[Client, Config], tuple[float | None, float | None]]:
    pk = _pk_text(user)
    return lambda client, config: store.user_presence(client, config, pk)


def record_user(
    user: AbstractBaseUser | AnonymousUser,
    *,
    now: float | datetime | None = None,
    former_guest: str = "",
) -> bool:
    """Record ``user`` as online now. Returns False if Redis could not be written.

    ``former_guest`` is the member the visitor had as a guest (or bot) before logging in; it
    leaves the guests and bots in the same step, and this process forgets having recorded it, so
    that another browser at the same address is counted as a guest again at once.
    """
    if not user.is_authenticated:
        msg = "record_user() needs an authenticated user; use record_guest() for visitors."
        raise ValueError(msg)
    return bool(_record_user(user, _now(now), former_guest=former_guest))


@dataclass
class PendingVisit:
    """One visit, ready to write: the script calls and what to do once they have run.

    Building it and finishing it are the same whether the write is awaited (``whos_online.aio``,
    under ASGI) or not; only the write itself differs.
    """

    config: Config
    kind: str
    member: str
    calls: list[store.ScriptCall]
    #: The in-process memory's entry for the visitor, and the Redis failure count it is
    #: written in (see ``throttle.RecentIdentities``).
    remembered: str
    until: float
    epoch: int
    #: Memory entries the visit replaces (a guest who has just logged in).
    replaced: tuple[str, ...] = ()
    #: Page hits riding along: settled with the buffer once the write's outcome is known.
    batch: hits.Batch | None = None

    @property
    def shard(self) -> keyspace.Shard:
        return store.member_shard(self.config, self.kind, self.member)

    def finish(self, reply: Any) -> int:
        """What the script's ``reply`` (None: it failed) comes to: FAILED, WRITTEN or ARRIVED."""
        if self.batch is not None:
            hits.buffer.settle(self.batch, added=reply is not None)
        if reply is None:
            return FAILED
        if self.config.throttle:
            recent.remember(self.remembered, self.until, self.epoch)
            recent.forget(self.replaced)
        return WRITTEN if reply == 0 else ARRIVED


def user_details(user: AbstractBaseUser | AnonymousUser, config: Config) -> store.UserDetails:
    """What is stored about a user: runs the site's ``HIDE_USER`` and ``DISPLAY_NAME``."""
    return store.UserDetails(
        pk=_pk_text(user),
        hidden=bool(config.hide_user and config.hide_user(user)),
        name=display_name(user, config),
        url=profile_url(user),
    )


def _user_visit(
    details: store.UserDetails, config: Config, timestamp: float, *, former_guest: str = ""
) -> PendingVisit:
    pk = details.pk
    return _pending(
        config,
        kind="users",
        member=pk,
        now=timestamp,
        user=details,
        former=former_guest,
        visitor=identity.visitor_id(f"u:{pk}", timestamp),
        remembered=f"u:{pk}",
        replaced=(f"guests:{former_guest}", f"bots:{former_guest}") if former_guest else (),
    )


def _member_visit(
    config: Config, kind: str, member: str, timestamp: float, *, former_user: str = ""
) -> PendingVisit:
    # Bots are not visitors; guests are namespaced apart from user ids in the HyperLogLog.
    visitor = "" if kind == "bots" else identity.visitor_id(f"g:{member}", timestamp)
    return _pending(
        config,
        kind=kind,
        member=member,
        now=timestamp,
        visitor=visitor,
        former=former_user,
        remembered=f"{kind}:{member}",
    )


def _pending(
    config: Config,
    *,
    kind: str,
    member: str,
    now: float,
    remembered: str,
    replaced: tuple[str, ...] = (),
    **visit: Any,
) -> PendingVisit:
    """The calls of one visit, with any buffered page hits riding along in the same round trip
    when the visit samples the counts (one shard); with several shards the flush timer writes
    them."""
    epoch = connection.failures()
    riding = config.count_hits and config.shards == 1
    batch = hits.buffer.take() if riding else None
    calls = store.record_calls(
        config,
        kind=kind,
        member=member,
        now=now,
        hits=_hit_amounts(batch.counts) if batch else {},
        batch=(batch.token, batch.number) if batch else None,
        **visit,
    )
    return PendingVisit(
        config=config,
        kind=kind,
        member=member,
        calls=calls,
        remembered=remembered,
        until=now + config.throttle,
        epoch=epoch,
        replaced=replaced,
        batch=batch,
    )


def _write(pending: PendingVisit) -> int:
    """Write ``pending`` (one round trip to its shard); FAILED, WRITTEN or ARRIVED."""
    reply = call_redis(
        None,
        lambda client, _config: store.run(client, pending.calls)[0],
        shard=pending.shard,
        writes=True,
    )
    return pending.finish(reply)


def _record_user(
    user: AbstractBaseUser | AnonymousUser, timestamp: float, *, former_guest: str = ""
) -> int:
    config = get_config()
    details = user_details(user, config)
    return _write(_user_visit(details, config, timestamp, former_guest=former_guest))


def record_guest(ip: str, *, bot: bool = False, now: float | datetime | None = None) -> bool:
    """Record a visitor by IP address (stored as the day's pseudonym unless GUEST_IDENTITY='ip')."""
    address = identity.normalize_ip(ip)
    if address is None:
        msg = f"record_guest() needs an IPv4 or IPv6 address, not {ip!r}."
        raise ValueError(msg)
    config = get_config()
    timestamp = _now(now)
    member = identity.guest_id(address, config, timestamp)
    return bool(_record_member(config, "bots" if bot else "guests", member, timestamp))


def _record_member(
    config: Config, kind: str, member: str, timestamp: float, *, former_user: str = ""
) -> int:
    return _write(_member_visit(config, kind, member, timestamp, former_user=former_user))


#: What recording a visit came to: nothing written, written for someone online already, or
#: written for someone who was not online (whose next page must not show a snapshot from before).
FAILED: Final = 0
WRITTEN: Final = 1
ARRIVED: Final = 2


def _hit_amounts(taken: dict[int, int]) -> dict[tuple[str, int], int]:
    return {(hits.COUNTER_NAME, second): count for second, count in taken.items()}


def count_hit(now: float | datetime | None = None) -> None:
    """Count one page view in the process buffer; it reaches Redis within about a second.

    The middleware calls this for every request it does not ignore when ``COUNT_HITS`` is on.
    """
    hits.buffer.add(_now(now))
    hits.timer.schedule(flush_hits)


def flush_hits() -> bool:
    """Write the buffered page hits now; False (and the hits kept) if Redis failed. A batch that
    failed before goes first, then what was counted since. True also when another thread is
    writing a batch, which settles it."""
    while True:
        batch = hits.buffer.take()
        if batch is None:
            return True
        written = call_redis(False, functools.partial(_write_batch, batch), writes=True)
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


def record_request(request: HttpRequest, config: Config, now: float) -> int:
    """Record whoever made ``request``, unless this process did so within THROTTLE seconds.

    Returns FAILED only when Redis could not be written, so that the caller does not hand out a
    throttle cookie for a visit that was not stored; ARRIVED when the visitor was not online, or
    this process recorded them moments ago (a login records the user at once), so that their
    next page reads afresh; WRITTEN otherwise. The process's memory of recent visitors counts
    only since Redis last failed (see ``RecentIdentities``).
    """
    user = getattr(request, "user", None)
    found = _to_record(user, request, config, now)
    if isinstance(found, int):
        return found
    if isinstance(found, tuple):
        return _record_member(config, *found, now)
    return _record_user(found, now)


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
    found = _to_record(user, request, config, now)
    if isinstance(found, int):
        return found
    if isinstance(found, tuple):
        pending = _member_visit(config, *found, now)
    else:
        try:
            details = user_details(found, config)
        except SynchronousOnlyOperation:
            # The site's HIDE_USER or DISPLAY_NAME reads the database, which it may not do here.
            details = await sync_to_async(user_details)(found, config)
        pending = _user_visit(details, config, now)

    async def write(client: aio.AsyncClient, _config: Config) -> Any:
        return (await aio.run(client, pending.calls))[0]

    reply = await aio.call(None, client, write, shard=pending.shard, writes=True)
    return pending.finish(reply)


def _to_record(
    user: AbstractBaseUser | AnonymousUser | None, request: HttpRequest, config: Config, now: float
) -> int | tuple[str, str] | AbstractBaseUser | AnonymousUser:
    """Whom a request should be recorded as: the user, or a (kind, member) for an anonymous
    visitor; or, when there is nothing to write, what recording came to (see record_request)."""
    epoch = connection.failures()
    if user is not None and user.is_authenticated:
        if config.throttle and recent.seen_recently(f"u:{_pk_text(user)}", now, epoch):
            return ARRIVED
        return user
    guest = _guest_of(request, config, now)
    if guest is None:
        return WRITTEN
    kind, member = guest
    if config.throttle and recent.seen_recently(f"{kind}:{member}", now, epoch):
        return ARRIVED
    return guest


def _guest_of(request: HttpRequest, config: Config, now: float) -> tuple[str, str] | None:
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
    pk = _pk_text(user)
    recent.forget([f"u:{pk}"])
    config = get_config()
    now = time.time()
    guest = None if request is None else _guest_of(request, config, now)
    if guest is None:
        call_redis(
            None,
            lambda client, config: store.remove_user(client, config, pk),
            shard=store.user_shard(config, pk),
            writes=True,
        )
        snapshots.cache.invalidate()
        return
    kind, member = guest
    _record_member(config, kind, member, now, former_user=pk)
    snapshots.cache.invalidate()


def forget_user(user: AbstractBaseUser | AnonymousUser | object) -> bool:
    """Erase everything whos_online holds about a user (for a data-protection request).

    Accepts a user or a primary key. Returns False if Redis could not be reached, so that the
    caller can retry: an erasure must not be silently skipped.
    """
    pk = _pk_text(user)
    recent.forget([f"u:{pk}"])

    def erase(client: Client, config: Config) -> bool:
        # Every layout the cleanup has seen: a user recorded before SHARDS changed has their
        # last-seen record in the old one until it expires.
        for shards in store.layouts_known(client, config):
            store.remove_user(client, config, pk, erase=True, shards=shards)
        return True

    snapshots.cache.invalidate()
    return call_redis(False, erase, writes=True)


def prune(now: float | datetime | None = None) -> int:
    """Remove everyone last seen before the window; returns how many members were removed."""
    timestamp = _now(now)
    removed = call_redis(
        None, lambda client, config: prune_with(client, config, now=timestamp), writes=True
    )
    return sum(removed.values()) if removed else 0


def prune_with(
    client: Client,
    config: Config,
    *,
    now: float,
    between_chunks: Callable[[], object] | None = None,
) -> dict[str, int]:
    """Prune in chunks with ``client``, letting Redis errors propagate (used by the command).

    ``users_went_offline`` is sent once per chunk, so a huge prune never holds every id at once.
    ``between_chunks`` is called after each chunk and its signal: the command extends its lock
    there, and stops there when asked to, so that no removed user goes unreported.
    """
    removed_by_kind = dict.fromkeys(store.KINDS, 0)
    _prune_layout(
        client,
        config,
        keyspace.layout(config),
        now=now,
        removed_by_kind=removed_by_kind,
        between_chunks=between_chunks,
    )
    return removed_by_kind


def _prune_layout(
    client: Client,
    config: Config,
    layout: Sequence[keyspace.Shard],
    *,
    now: float,
    removed_by_kind: dict[str, int],
    current: bool = True,
    between_chunks: Callable[[], object] | None = None,
) -> None:
    for shard in layout:
        for kind in store.KINDS:
            _prune_set(
                client,
                config,
                shard,
                kind,
                now=now,
                removed_by_kind=removed_by_kind,
                current=current,
                between_chunks=between_chunks,
            )


def _prune_set(
    client: Client,
    config: Config,
    shard: keyspace.Shard,
    kind: str,
    *,
    now: float,
    removed_by_kind: dict[str, int],
    current: bool = True,
    between_chunks: Callable[[], object] | None = None,
) -> None:
    """Prune one set in chunks. Only the ``current`` layout's removals are news: a member left
    in an old layout is online in the new one, or was already reported by the earlier runs."""
    while True:
        removed = store.prune_chunk(client, config, kind, now=now, shard=shard)
        removed_by_kind[kind] += len(removed)
        is_user = kind in {"users", "hidden"}
        if current:
            recent.forget(f"{'u' if is_user else kind}:{member}" for member in removed)
            if is_user and removed:
                signals.users_went_offline.send(sender=prune, user_ids=_pk_values(removed))
        if between_chunks is not None:
            between_chunks()
        if len(removed) < store.PRUNE_CHUNK_SIZE:
            break


def prune_old_layouts(
    client: Client,
    config: Config,
    *,
    now: float,
    between_chunks: Callable[[], object] | None = None,
) -> dict[str, int]:
    """Prune what layouts of another ``SHARDS`` left (used by the command), and forget a layout
    once none of its sets is left (``between_chunks`` as for ``prune_with``).

    Nobody reads an old layout, so its members are not counted; they are pruned like the current
    ones, once stale, rather than all at once, so that a process still running with the old
    setting during a deploy loses nobody.
    """
    removed_by_kind = dict.fromkeys(store.KINDS, 0)
    old = store.layouts_seen(client, config)[1:]
    for shards in old:
        _prune_layout(
            client,
            config,
            keyspace.layout(config, shards),
            now=now,
            removed_by_kind=removed_by_kind,
            current=False,
            between_chunks=between_chunks,
        )
        if store.layout_is_empty(client, config, shards):
            store.forget_layout(client, config, shards)
    if old and config.shards == 1 and store.layouts_known(client, config) == [1]:
        # Back to the one-shard layout and the others emptied: keep no record, as before.
        store.forget_layout(client, config, 1)
    return removed_by_kind


def sample_counts(client: Client, config: Config, *, now: float) -> store.Snapshot | None:
    """Raise the peak and sample the ``online:*`` counters from counts over every shard (used by
    the command when ``SHARDS`` > 1, where a visit cannot count the whole site)."""
    if config.shards == 1:
        return None
    found = store.snapshot(client, config, limit=0, now=now)
    store.sample(client, config, found, now=now)
    return found


def update_counter(name: str, count: int = 1, now: float | datetime | None = None) -> bool:
    """Add ``count`` to the counter ``name`` at every precision, in one round trip.

    Returns False if Redis could not be written. Raises TypeError or ValueError for a bad name or
    count, since those are mistakes in the calling code rather than conditions of the moment.
    """
    counters.check_name(name)
    if not _is_whole_number(count):
        msg = f"update_counter() counts in whole numbers, not {type(count).__name__}."
        raise TypeError(msg)
    if not counters.MIN_COUNT <= count <= counters.MAX_COUNT:
        msg = f"update_counter() counts must be in Redis's 64-bit integer range, not {count}."
        raise ValueError(msg)
    timestamp = _now(now)

    def write(client: Client, config: Config) -> bool:
        counters.add(client, config, {(name, int(timestamp)): count})
        return True

    return call_redis(False, write, writes=True)


def _is_whole_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def get_counter(name: str, precision: int) -> list[tuple[int, int]]:
    """The samples of counter ``name`` at ``precision``: (slice start in Unix seconds, count),
    oldest first; empty for an unknown counter or when Redis fails."""
    counters.check_name(name)
    precisions = get_config().counter_precisions
    if not _is_whole_number(precision):
        msg = f"get_counter() precision is a whole number of seconds, not {precision!r}."
        raise TypeError(msg)
    if precision not in precisions:
        msg = (
            f"get_counter() precision must be one of COUNTER_PRECISIONS {list(precisions)}, "
            f"not {precision!r}."
        )
        raise ValueError(msg)
    return call_redis([], lambda client, config: counters.get(client, config, name, precision))


def clean_counters(now: float | datetime | None = None) -> int:
    """Drop counter samples beyond the newest ``COUNTER_SAMPLES`` slices of every counter and
    precision, and counters of precisions no longer configured; returns the samples removed."""
    timestamp = _now(now)
    cleaned = call_redis(
        None, lambda client, config: counters.clean(client, config, now=timestamp), writes=True
    )
    return cleaned.samples if cleaned else 0


def peak() -> Peak:
    """The all-time peak of people online; ``(0, None)`` before any visit or if Redis fails."""
    unknown: tuple[int, float | None] = (0, None)
    return _peak(*call_redis(unknown, store.read_peak))


def peak_of(found: store.Snapshot) -> Peak:
    return _peak(found.peak, found.peak_at)


def _peak(people: int, at: float | None) -> Peak:
    if not people or at is None:
        return NO_PEAK
    return Peak(people, _as_datetime(at))


def unique_visitors(day: date | datetime | None = None) -> int:
    """About how many distinct users and guests visited on a UTC day (today by default).

    A HyperLogLog estimate: within about 1 % of the true number. A guest who logs in counts once
    as a guest and once as a user. Kept ``LAST_SEEN_DAYS`` days after the day ends.
    """
    if day is None:
        wanted = store.utc_day(time.time())
    elif isinstance(day, datetime):
        wanted = store.utc_day(day.timestamp()) if day.tzinfo else day.date()
    else:
        wanted = day
    return call_redis(0, lambda client, config: store.unique_visitors(client, config, wanted))
