"""The one place that reads ``settings.WHOS_ONLINE``.

Settings are merged over ``DEFAULTS`` and turned into a frozen ``Config`` once per process, so
that the request path pays for no dict look-ups or regex compilation. The cache is dropped when a
test (or anything else) changes ``WHOS_ONLINE``, ``CACHES`` or ``SECRET_KEY`` through
``setting_changed``, so ``override_settings`` works everywhere.

Modules that cache what they derive from settings (clients, keys, hashes) clear it on
``config_changed``, which is sent whenever the ``Config`` is dropped. ``get_config`` validates the
settings as the system checks do (``validation.validate``), so that bad settings fail at startup
even where nobody runs ``manage.py check``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import Signal, receiver
from django.utils.module_loading import import_string

from whos_online.config.audiences import name_audience
from whos_online.config.defaults import DEFAULTS
from whos_online.config.validation import validate

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    AnyUser = AbstractBaseUser | AnonymousUser


@dataclass(frozen=True)
class Config:
    redis_alias: str
    redis_url: str | None
    redis_cluster: bool
    key_prefix: str
    window: int
    throttle: int
    track_guests: bool
    guest_identity: str
    guest_ipv6_prefix: int
    trusted_proxy_count: int
    ignore_paths: tuple[re.Pattern[str], ...]
    bot_user_agents: re.Pattern[str] | None
    hide_user: Callable[[AnyUser], bool] | None
    display_name: Callable[[AnyUser], str] | None
    display_limit: int
    counter_precisions: tuple[int, ...]
    counter_samples: int
    failure_backoff: float
    last_seen_days: int
    count_hits: bool
    #: Who may see names in the JSON view and the live widget; None means everyone, so that the
    #: user need not be loaded to decide.
    show_names_to: Callable[[AnyUser], bool] | None
    refresh_interval: int
    json_max_age: int
    shards: int
    #: Seconds a process may show the snapshot it last read; 0 reads Redis for every render.
    snapshot_max_age: float
    #: Seconds a process may hold recorded visits before writing them; 0 writes in the request.
    flush_interval: float
    #: Room patterns by URL name (``ROOMS``): the middleware puts a page view of that URL in the
    #: room its pattern names, formatted with the URL's keyword arguments.
    rooms: Mapping[str, str]
    #: Who may read a room through the JSON and widget views; None: whoever holds its token.
    room_access: Callable[[HttpRequest, str], bool] | None
    #: Seconds a room's token is good for after it was issued (``room_tokens``).
    room_token_max_age: int

    @functools.cached_property
    def redis_target(self) -> str:
        """Names the Redis server in log lines and keys the per-server failure state.

        Cached: every Redis call reads it (twice per recorded request), and redacting the URL
        parses it. The Config is frozen, so the value cannot go stale.
        """
        if self.redis_url:
            where = redact_url(self.redis_url)
            return f"cluster {where}" if self.redis_cluster else where
        return f"cache alias {self.redis_alias!r}"


def redact_url(url: str) -> str:
    """Hide passwords, given before the host or as ``?password=``, from log lines."""
    parts = urlsplit(url)
    if parts.password:
        parts = parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@"))
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return parts._replace(query=query).geturl()


def user_settings() -> Mapping[str, Any]:
    raw = getattr(settings, "WHOS_ONLINE", None)
    return raw if raw is not None else {}


@functools.cache
def get_config() -> Config:
    """Build the process-wide ``Config``; raises ``ImproperlyConfigured`` on invalid settings."""
    raw = user_settings()
    errors = [message for message in validate(raw) if message.is_serious()]
    if errors:
        details = "; ".join(f"{message.id}: {message.msg}" for message in errors)
        raise ImproperlyConfigured(f"Invalid WHOS_ONLINE setting. {details}")
    merged = {**DEFAULTS, **raw}
    return Config(
        redis_alias=merged["REDIS_ALIAS"],
        redis_url=merged["REDIS_URL"] or None,
        redis_cluster=merged["REDIS_CLUSTER"],
        key_prefix=merged["KEY_PREFIX"],
        window=merged["WINDOW"],
        throttle=merged["THROTTLE"],
        track_guests=merged["TRACK_GUESTS"],
        guest_identity=merged["GUEST_IDENTITY"],
        guest_ipv6_prefix=merged["GUEST_IPV6_PREFIX"],
        trusted_proxy_count=merged["TRUSTED_PROXY_COUNT"],
        ignore_paths=tuple(re.compile(p) for p in _ignore_paths(merged["IGNORE_PATHS"])),
        bot_user_agents=re.compile(merged["BOT_USER_AGENTS"])
        if merged["BOT_USER_AGENTS"]
        else None,
        hide_user=import_callable(merged["HIDE_USER"]),
        display_name=import_callable(merged["DISPLAY_NAME"]),
        display_limit=merged["DISPLAY_LIMIT"],
        counter_precisions=tuple(sorted(merged["COUNTER_PRECISIONS"])),
        counter_samples=merged["COUNTER_SAMPLES"],
        failure_backoff=float(merged["FAILURE_BACKOFF"]),
        last_seen_days=merged["LAST_SEEN_DAYS"],
        count_hits=merged["COUNT_HITS"],
        show_names_to=name_audience(merged["SHOW_NAMES_TO"]),
        refresh_interval=merged["REFRESH_INTERVAL"],
        json_max_age=merged["JSON_MAX_AGE"],
        shards=merged["SHARDS"],
        snapshot_max_age=float(merged["SNAPSHOT_MAX_AGE"]),
        flush_interval=float(merged["FLUSH_INTERVAL"]),
        rooms=dict(merged["ROOMS"]),
        room_access=import_callable(merged["ROOM_ACCESS"]),
        room_token_max_age=merged["ROOM_TOKEN_MAX_AGE"],
    )


def _default_ignore_paths() -> list[str]:
    patterns = []
    for url in (
        getattr(settings, "STATIC_URL", None),
        getattr(settings, "MEDIA_URL", None),
    ):
        # Only local prefixes can match request.path; a CDN URL ("https://…") never reaches Django.
        if isinstance(url, str) and url and "://" not in url:
            prefix = url if url.startswith("/") else f"/{url}"
            if prefix != "/":
                patterns.append("^" + re.escape(prefix))
    patterns.append(r"^/favicon\.ico$")
    return patterns


def _ignore_paths(value: Sequence[str] | None) -> list[str]:
    return _default_ignore_paths() if value is None else list(value)


def import_callable(value: str | Callable[..., Any] | None) -> Any:
    """A setting's callable, given as itself or as its dotted path."""
    if value is None or callable(value):
        return value
    return import_string(value)


#: Sent when the ``Config`` is dropped (a setting it reads changed, or ``reset()``): every module
#: that caches something derived from settings clears it.
config_changed = Signal()

#: Settings a ``Config`` (or something cached from one) is read from.
_READ_SETTINGS: Final = frozenset(
    {"WHOS_ONLINE", "CACHES", "SECRET_KEY", "STATIC_URL", "MEDIA_URL", "SECRET_KEY_FALLBACKS"}
)


@receiver(setting_changed, dispatch_uid="whos_online.config.settings.reset")
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in _READ_SETTINGS:
        reset()


def reset() -> None:
    """Forget everything cached from settings: the config, Redis clients and derived keys."""
    get_config.cache_clear()
    config_changed.send(sender=Config)
