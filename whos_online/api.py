"""The Python API of whos_online (also importable from the package itself).

Every function here fails open: while Redis is unreachable, slow or refusing writes, readers get
empty lists, zero counts or ``None`` and writers do nothing, and the circuit breaker in
``connection`` keeps further calls from waiting on Redis for ``FAILURE_BACKOFF`` seconds. That is
what a view or a template wants. The cleanup command uses ``store`` directly and fails loudly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from whos_online import identity, signals, store
from whos_online.conf import Config, get_config
from whos_online.connection import REDIS_ERRORS, breaker, request_client
from whos_online.throttle import recent

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

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


def call_redis(default: T, operation: Callable[[redis.Redis, Config], T]) -> T:
    """Run ``operation`` with the request client, or return ``default`` if Redis fails."""
    config = get_config()
    target = config.redis_target
    if not breaker.allows(target):
        return default
    try:
        result = operation(request_client(), config)
    except REDIS_ERRORS as error:
        breaker.failed(target, error, config.failure_backoff)
        return default
    breaker.succeeded(target)
    return result


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


def _pk_value(text: str) -> object:
    try:
        return get_user_model()._meta.pk.to_python(text)
    except ValidationError:
        return text


def display_name(user: AbstractBaseUser | AnonymousUser, config: Config) -> str:
    name = config.display_name(user) if config.display_name else user.get_username()
    # A lone surrogate cannot be sent to Redis; replace it rather than fail the request.
    return str(name)[:MAX_NAME_LENGTH].encode("utf-8", "replace").decode()


def profile_url(user: AbstractBaseUser | AnonymousUser) -> str:
    get_absolute_url = getattr(user, "get_absolute_url", None)
    return str(get_absolute_url()) if callable(get_absolute_url) else ""


def online_users(limit: int | None = None) -> list[OnlineUser]:
    """Users online now, newest first; hidden users are never listed.

    ``limit=None`` lists everyone online, which is O(N): on a big site pass a limit.
    """
    found = snapshot(limit)
    return [] if found is None else listed_users(found)


def snapshot(limit: int | None) -> store.Snapshot | None:
    """Counts and the newest ``limit`` visible users in one round trip; None if Redis failed."""
    now = time.time()
    return call_redis(
        None, lambda client, config: store.snapshot(client, config, limit=limit, now=now)
    )


def listed_users(found: store.Snapshot) -> list[OnlineUser]:
    return [
        OnlineUser(
            pk=_pk_value(row.pk),
            name=row.name,
            url=row.url,
            last_seen=_as_datetime(row.seen),
        )
        for row in found.listed
    ]


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


def _presence(
    user: AbstractBaseUser | AnonymousUser,
) -> Callable[[redis.Redis, Config], tuple[float | None, float | None]]:
    pk = _pk_text(user)
    return lambda client, config: store.user_presence(client, config, pk)


def record_user(
    user: AbstractBaseUser | AnonymousUser,
    *,
    now: float | datetime | None = None,
    former_guest: str = "",
) -> bool:
    """Record ``user`` as online now. Returns False if Redis could not be written."""
    if not user.is_authenticated:
        msg = "record_user() needs an authenticated user; use record_guest() for visitors."
        raise ValueError(msg)
    config = get_config()
    timestamp = _now(now)
    pk = _pk_text(user)
    hidden = bool(config.hide_user and config.hide_user(user))
    name = display_name(user, config)
    url = profile_url(user)

    def write(client: redis.Redis, config: Config) -> bool:
        store.record_user(
            client,
            config,
            pk=pk,
            hidden=hidden,
            name=name,
            url=url,
            now=timestamp,
            former_guest=former_guest,
        )
        return True

    written = call_redis(False, write)
    if written and config.throttle:
        recent.remember(f"u:{pk}", timestamp + config.throttle)
    return written


def record_guest(ip: str, *, bot: bool = False, now: float | datetime | None = None) -> bool:
    """Record a visitor by IP address (stored as the day's pseudonym unless GUEST_IDENTITY='ip')."""
    address = identity.normalize_ip(ip)
    if address is None:
        msg = f"record_guest() needs an IPv4 or IPv6 address, not {ip!r}."
        raise ValueError(msg)
    config = get_config()
    timestamp = _now(now)
    return _record_member(config, "bots" if bot else "guests", address, timestamp)


def _record_member(config: Config, kind: str, address: str, timestamp: float) -> bool:
    member = identity.guest_id(address, config, timestamp)

    def write(client: redis.Redis, config: Config) -> bool:
        store.record_member(client, config, kind=kind, member=member, now=timestamp)
        return True

    written = call_redis(False, write)
    if written and config.throttle:
        recent.remember(f"{kind}:{member}", timestamp + config.throttle)
    return written


def record_request(request: HttpRequest, config: Config, now: float) -> bool:
    """Record whoever made ``request``, unless this process did so within THROTTLE seconds.

    Returns False only when Redis could not be written, so that the caller does not hand out a
    throttle cookie for a visit that was not stored.
    """
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        if config.throttle and recent.seen_recently(f"u:{_pk_text(user)}", now):
            return True
        return record_user(user, now=now)
    if not config.track_guests:
        return True
    address = identity.client_ip(request, config)
    if address is None:
        return True
    kind = "bots" if identity.is_bot(request, config) else "guests"
    member = identity.guest_id(address, config, now)
    if config.throttle and recent.seen_recently(f"{kind}:{member}", now):
        return True
    return _record_member(config, kind, address, now)


def guest_member(request: HttpRequest, config: Config, now: float) -> str:
    """The guest member a request would have been recorded as, or "" if none."""
    address = identity.client_ip(request, config)
    return identity.guest_id(address, config, now) if address else ""


def user_logged_out(user: AbstractBaseUser | AnonymousUser | None) -> None:
    """Take ``user`` off the online list at once; their last-seen record stays."""
    if user is None or not user.is_authenticated:
        return
    pk = _pk_text(user)
    recent.forget([f"u:{pk}"])
    call_redis(None, lambda client, config: store.remove_user(client, config, pk))


def forget_user(user: AbstractBaseUser | AnonymousUser | object) -> bool:
    """Erase everything whos_online holds about a user (for a data-protection request).

    Accepts a user or a primary key. Returns False if Redis could not be reached, so that the
    caller can retry: an erasure must not be silently skipped.
    """
    pk = _pk_text(user)
    recent.forget([f"u:{pk}"])

    def erase(client: redis.Redis, config: Config) -> bool:
        store.remove_user(client, config, pk, erase=True)
        return True

    return call_redis(False, erase)


def prune(now: float | datetime | None = None) -> int:
    """Remove everyone last seen before the window; returns how many members were removed."""
    timestamp = _now(now)
    removed = call_redis(None, lambda client, config: prune_with(client, config, now=timestamp))
    return sum(removed.values()) if removed else 0


def prune_with(client: redis.Redis, config: Config, *, now: float) -> dict[str, int]:
    """Prune in chunks with ``client``, letting Redis errors propagate (used by the command).

    ``users_went_offline`` is sent once per chunk, so a huge prune never holds every id at once.
    """
    removed_by_kind = dict.fromkeys(store.KINDS, 0)
    for kind in store.KINDS:
        while True:
            removed = store.prune_chunk(client, config, kind, now=now)
            removed_by_kind[kind] += len(removed)
            is_user = kind in {"users", "hidden"}
            recent.forget(f"{'u' if is_user else kind}:{member}" for member in removed)
            if is_user and removed:
                signals.users_went_offline.send(
                    sender=prune, user_ids=[_pk_value(pk) for pk in removed]
                )
            if len(removed) < store.PRUNE_CHUNK_SIZE:
                break
    return removed_by_kind
