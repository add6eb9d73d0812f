"""The one place that reads ``settings.WHOS_ONLINE``.

Settings are merged over ``DEFAULTS`` and turned into a frozen ``Config`` once per process, so
that the request path pays for no dict look-ups or regex compilation. The cache is dropped when a
test (or anything else) changes ``WHOS_ONLINE``, ``CACHES`` or ``SECRET_KEY`` through
``setting_changed``, so ``override_settings`` works everywhere.

``validate()`` is pure: it never calls ``get_config()``, so that the system checks can report every
problem at once instead of failing on the first one.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

    AnyUser = AbstractBaseUser | AnonymousUser

#: Crawlers, monitors and HTTP libraries that are counted as bots rather than guests.
DEFAULT_BOT_USER_AGENTS: Final = (
    r"(?i)bot\b|crawl|spider|slurp|bingpreview|facebookexternalhit|embedly|quora link preview"
    r"|pinterestbot|whatsapp|telegrambot|discord|slack|skype|vkshare|w3c_validator|lighthouse"
    r"|headlesschrome|phantomjs|python-requests|python-urllib|aiohttp|httpx|curl/|wget/"
    r"|go-http-client|java/|okhttp|libwww|apache-httpclient|uptime|pingdom|statuscake"
    r"|monitor|scrapy|feedfetcher|feedly|ahrefs|semrush|mj12|dotbot|petalbot|yandex|baidu"
)

DEFAULTS: Final[Mapping[str, Any]] = {
    "REDIS_ALIAS": "default",
    "REDIS_URL": None,
    "REDIS_CLUSTER": False,
    "KEY_PREFIX": "whos_online",
    "WINDOW": 600,
    "THROTTLE": 120,
    "TRACK_GUESTS": True,
    "GUEST_IDENTITY": "hashed-ip",
    "GUEST_IPV6_PREFIX": 64,
    "TRUSTED_PROXY_COUNT": 0,
    # None means "STATIC_URL and MEDIA_URL", read when the config is built.
    "IGNORE_PATHS": None,
    "BOT_USER_AGENTS": DEFAULT_BOT_USER_AGENTS,
    "HIDE_USER": None,
    "DISPLAY_NAME": None,
    "DISPLAY_LIMIT": 50,
    "COUNTER_PRECISIONS": [1, 5, 60, 300, 3600, 18000, 86400],
    "COUNTER_SAMPLES": 120,
    "FAILURE_BACKOFF": 10,
    "LAST_SEEN_DAYS": 90,
    "COUNT_HITS": False,
    "SHOW_NAMES_TO": "staff",
    "REFRESH_INTERVAL": 30,
    "JSON_MAX_AGE": 10,
    "SHARDS": 1,
    "SNAPSHOT_MAX_AGE": 2,
}

GUEST_IDENTITIES: Final = ("hashed-ip", "ip")
#: The named values of ``SHOW_NAMES_TO``; anything else is a dotted path or a callable.
NAME_AUDIENCES: Final = ("staff", "authenticated", "everyone")
REDIS_URL_SCHEMES: Final = ("redis", "rediss", "unix")
CLUSTER_URL_SCHEMES: Final = ("redis", "rediss")
#: Most shards a layout may have: choosing their hash tags costs about a millisecond per shard,
#: once per process.
MAX_SHARDS: Final = 128
CACHE_BACKEND: Final = "django_redis.cache.RedisCache"
MIDDLEWARE_PATH: Final = "whos_online.middleware.WhosOnlineMiddleware"
AUTH_MIDDLEWARE_PATH: Final = "django.contrib.auth.middleware.AuthenticationMiddleware"


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

    @functools.cached_property
    def redis_target(self) -> str:
        """Names the Redis server in log lines and keys the per-server failure state.

        Cached: every Redis call reads it (twice per recorded request), and redacting the URL
        parses it. The Config is frozen, so the value cannot go stale.
        """
        if self.redis_url:
            where = _redact(self.redis_url)
            return f"cluster {where}" if self.redis_cluster else where
        return f"cache alias {self.redis_alias!r}"


def user_settings() -> Mapping[str, Any]:
    raw = getattr(settings, "WHOS_ONLINE", None)
    return raw if raw is not None else {}


@functools.cache
def get_config() -> Config:
    """Build the process-wide ``Config``; raises ``ImproperlyConfigured`` on invalid settings."""
    from django.core.exceptions import ImproperlyConfigured

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
        hide_user=_import_callable(merged["HIDE_USER"]),
        display_name=_import_callable(merged["DISPLAY_NAME"]),
        display_limit=merged["DISPLAY_LIMIT"],
        counter_precisions=tuple(sorted(merged["COUNTER_PRECISIONS"])),
        counter_samples=merged["COUNTER_SAMPLES"],
        failure_backoff=float(merged["FAILURE_BACKOFF"]),
        last_seen_days=merged["LAST_SEEN_DAYS"],
        count_hits=merged["COUNT_HITS"],
        show_names_to=_name_audience(merged["SHOW_NAMES_TO"]),
        refresh_interval=merged["REFRESH_INTERVAL"],
        json_max_age=merged["JSON_MAX_AGE"],
        shards=merged["SHARDS"],
        snapshot_max_age=float(merged["SNAPSHOT_MAX_AGE"]),
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


def _import_callable(value: str | Callable[..., Any] | None) -> Any:
    if value is None or callable(value):
        return value
    return import_string(value)


def is_staff(user: AnyUser) -> bool:
    return bool(user.is_active and getattr(user, "is_staff", False))


def is_authenticated(user: AnyUser) -> bool:
    return bool(user.is_authenticated)


def _name_audience(value: str | Callable[..., Any]) -> Any:
    if value == "everyone":
        return None
    if value == "staff":
        return is_staff
    if value == "authenticated":
        return is_authenticated
    return _import_callable(value)


def _redact(url: str) -> str:
    """Hide passwords, given before the host or as ``?password=``, from log lines."""
    parts = urlsplit(url)
    if parts.password:
        parts = parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@"))
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return parts._replace(query=query).geturl()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _error(id_: int, msg: str, hint: str) -> Error:
    return Error(msg, hint=hint, id=f"whos_online.E{id_:03d}")


def validate(raw: object) -> list[CheckMessage]:  # noqa: PLR0912, PLR0915
    """Check every key of ``WHOS_ONLINE`` and report all problems, each with a hint."""
    if not isinstance(raw, Mapping):
        return [
            _error(
                1,
                f"WHOS_ONLINE must be a dict, not {type(raw).__name__}.",
                "Set WHOS_ONLINE = {} or leave it out to use the defaults.",
            )
        ]
    messages: list[CheckMessage] = []
    unknown = sorted(set(raw) - set(DEFAULTS), key=str)
    if unknown:
        messages.append(
            Warning(
                f"WHOS_ONLINE has unknown keys: {', '.join(map(str, unknown))}.",
                hint=f"Known keys: {', '.join(DEFAULTS)}.",
                id="whos_online.W001",
            )
        )
    merged = {**DEFAULTS, **raw}

    redis_url = merged["REDIS_URL"]
    # "" counts as unset, like get_config() reads it, for settings built from the environment.
    if redis_url not in (None, ""):
        if not isinstance(redis_url, str) or urlsplit(redis_url).scheme not in REDIS_URL_SCHEMES:
            messages.append(
                _error(
                    3,
                    f"WHOS_ONLINE['REDIS_URL'] must be a redis://, rediss:// or unix:// URL, "
                    f"not {redis_url!r}.",
                    "For example 'redis://127.0.0.1:6379/0', or leave it unset to use the "
                    "django-redis cache named by REDIS_ALIAS.",
                )
            )
    else:
        messages.extend(_check_alias(merged["REDIS_ALIAS"]))

    cluster = merged["REDIS_CLUSTER"]
    if not isinstance(cluster, bool):
        messages.append(
            _error(
                25,
                f"WHOS_ONLINE['REDIS_CLUSTER'] must be True or False, not {cluster!r}.",
                "True when REDIS_URL names a node of a Redis Cluster.",
            )
        )
    elif cluster and (
        not isinstance(redis_url, str)
        or urlsplit(redis_url).scheme not in CLUSTER_URL_SCHEMES
        or urlsplit(redis_url).path.strip("/") not in ("", "0")
    ):
        messages.append(
            _error(
                25,
                "WHOS_ONLINE['REDIS_CLUSTER'] is True, so REDIS_URL must be the redis:// or "
                f"rediss:// URL of a cluster node, with no database but 0, not {redis_url!r}.",
                "For example 'redis://10.0.0.5:7000'. Any node will do: the client finds the "
                "others. A cluster has no databases besides 0, and no unix:// sockets.",
            )
        )

    prefix = merged["KEY_PREFIX"]
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{} \r\n"):
        messages.append(
            _error(
                4,
                f"WHOS_ONLINE['KEY_PREFIX'] must be a non-empty string without braces or "
                f"spaces, not {prefix!r}.",
                "The prefix becomes a Redis Cluster hash tag, {prefix}, so it cannot hold braces.",
            )
        )

    window = merged["WINDOW"]
    if not _is_int(window) or window < 1:
        messages.append(
            _error(
                5,
                f"WHOS_ONLINE['WINDOW'] must be a positive integer of seconds, not {window!r}.",
                "The default is 600 (ten minutes).",
            )
        )

    throttle = merged["THROTTLE"]
    if not _is_int(throttle) or throttle < 0:
        messages.append(
            _error(
                6,
                f"WHOS_ONLINE['THROTTLE'] must be a non-negative integer of seconds, "
                f"not {throttle!r}.",
                "The default is 120; 0 records every request.",
            )
        )
    elif _is_int(window) and window >= 1 and throttle >= window:
        messages.append(
            _error(
                6,
                f"WHOS_ONLINE['THROTTLE'] ({throttle}) must be smaller than WINDOW ({window}).",
                "Otherwise people drop out of the online list while their throttle cookie "
                "still stops them from being recorded again.",
            )
        )

    for key, id_ in (("TRACK_GUESTS", 7), ("COUNT_HITS", 19)):
        if not isinstance(merged[key], bool):
            messages.append(
                _error(
                    id_,
                    f"WHOS_ONLINE[{key!r}] must be True or False, not {merged[key]!r}.",
                    f"The default is {DEFAULTS[key]}.",
                )
            )

    if merged["GUEST_IDENTITY"] not in GUEST_IDENTITIES:
        messages.append(
            _error(
                8,
                f"WHOS_ONLINE['GUEST_IDENTITY'] must be 'hashed-ip' or 'ip', "
                f"not {merged['GUEST_IDENTITY']!r}.",
                "'hashed-ip' (the default) stores no IP address in Redis.",
            )
        )
    elif merged["GUEST_IDENTITY"] == "ip":
        messages.append(
            Warning(
                "WHOS_ONLINE['GUEST_IDENTITY'] is 'ip': guests' raw IP addresses are stored "
                "in Redis.",
                hint="IP addresses are personal data in many jurisdictions; prefer 'hashed-ip'.",
                id="whos_online.W002",
            )
        )

    prefix = merged["GUEST_IPV6_PREFIX"]
    if not _is_int(prefix) or not 1 <= prefix <= 128:
        messages.append(
            _error(
                28,
                f"WHOS_ONLINE['GUEST_IPV6_PREFIX'] must be an integer from 1 to 128, "
                f"not {prefix!r}.",
                "64 counts each IPv6 network of a household or device as one guest, since "
                "devices rotate their addresses inside it; 128 uses the whole address.",
            )
        )

    proxies = merged["TRUSTED_PROXY_COUNT"]
    if not _is_int(proxies) or not 0 <= proxies <= 20:
        messages.append(
            _error(
                9,
                f"WHOS_ONLINE['TRUSTED_PROXY_COUNT'] must be an integer from 0 to 20, "
                f"not {proxies!r}.",
                "Count the reverse proxies in front of Django that append to "
                "X-Forwarded-For; 0 uses REMOTE_ADDR only.",
            )
        )

    ignore = merged["IGNORE_PATHS"]
    if ignore is not None:
        if isinstance(ignore, str) or not isinstance(ignore, Sequence):
            messages.append(
                _error(
                    10,
                    f"WHOS_ONLINE['IGNORE_PATHS'] must be a list of regular expressions, "
                    f"not {ignore!r}.",
                    "For example [r'^/static/', r'^/healthz$'].",
                )
            )
        else:
            for pattern in ignore:
                problem = _regex_problem(pattern)
                if problem:
                    messages.append(
                        _error(
                            10,
                            f"WHOS_ONLINE['IGNORE_PATHS'] holds an invalid regular expression "
                            f"{pattern!r}: {problem}.",
                            "Each entry is matched with re.search against request.path.",
                        )
                    )

    bots = merged["BOT_USER_AGENTS"]
    problem = None if bots is None else _regex_problem(bots)
    if problem:
        messages.append(
            _error(
                11,
                f"WHOS_ONLINE['BOT_USER_AGENTS'] must be a valid regular expression or None: "
                f"{problem}.",
                "It is matched with re.search against the User-Agent header.",
            )
        )

    for key, id_ in (("HIDE_USER", 12), ("DISPLAY_NAME", 13)):
        problem = _callable_problem(merged[key])
        if problem:
            messages.append(
                _error(
                    id_,
                    f"WHOS_ONLINE[{key!r}] {problem}.",
                    "Give the dotted path of a function that takes the user, such as "
                    "'myapp.online.hide_user'.",
                )
            )

    audience = merged["SHOW_NAMES_TO"]
    if isinstance(audience, str) and "." not in audience:
        problem = None if audience in NAME_AUDIENCES else f"is not a known audience: {audience!r}"
    else:
        problem = _callable_problem(audience)
    if problem or audience is None:
        messages.append(
            _error(
                22,
                f"WHOS_ONLINE['SHOW_NAMES_TO'] {problem or 'must not be None'}.",
                "Who may see names in the JSON view and the live widget: 'staff' (the default), "
                "'authenticated', 'everyone', or (the dotted path of) a function (user) -> bool.",
            )
        )

    shards = merged["SHARDS"]
    if not _is_int(shards) or not 1 <= shards <= MAX_SHARDS:
        messages.append(
            _error(
                26,
                f"WHOS_ONLINE['SHARDS'] must be an integer from 1 to {MAX_SHARDS}, not {shards!r}.",
                "1 keeps every key in one slot; on a Redis Cluster, a few shards per master "
                "spread the people online over the masters.",
            )
        )

    snapshot_age = merged["SNAPSHOT_MAX_AGE"]
    if not _is_number(snapshot_age) or snapshot_age < 0:
        messages.append(
            _error(
                27,
                f"WHOS_ONLINE['SNAPSHOT_MAX_AGE'] must be a non-negative number of seconds, "
                f"not {snapshot_age!r}.",
                "The default is 2; 0 reads Redis for every render.",
            )
        )

    for key, id_, minimum in (
        ("DISPLAY_LIMIT", 14, 0),
        ("COUNTER_SAMPLES", 16, 1),
        ("LAST_SEEN_DAYS", 18, 1),
        ("REFRESH_INTERVAL", 23, 1),
        ("JSON_MAX_AGE", 24, 0),
    ):
        value = merged[key]
        if not _is_int(value) or value < minimum:
            messages.append(
                _error(
                    id_,
                    f"WHOS_ONLINE[{key!r}] must be an integer of at least {minimum}, "
                    f"not {value!r}.",
                    f"The default is {DEFAULTS[key]}.",
                )
            )

    refresh, max_age = merged["REFRESH_INTERVAL"], merged["JSON_MAX_AGE"]
    if _is_int(refresh) and _is_int(max_age) and 1 <= refresh <= max_age:
        messages.append(
            Warning(
                f"WHOS_ONLINE['JSON_MAX_AGE'] ({max_age}) is not below REFRESH_INTERVAL "
                f"({refresh}): browsers and caches answer some refreshes with the counts they "
                "already showed.",
                hint="Keep JSON_MAX_AGE below REFRESH_INTERVAL, about a third of it.",
                id="whos_online.W004",
            )
        )

    precisions = merged["COUNTER_PRECISIONS"]
    if (
        isinstance(precisions, (str, bytes))
        or not isinstance(precisions, Sequence)
        or not precisions
        or not all(_is_int(p) and p >= 1 for p in precisions)
        or len(set(precisions)) != len(precisions)
    ):
        messages.append(
            _error(
                15,
                f"WHOS_ONLINE['COUNTER_PRECISIONS'] must be a non-empty list of distinct "
                f"positive integers (seconds), not {precisions!r}.",
                f"The default is {DEFAULTS['COUNTER_PRECISIONS']}.",
            )
        )

    backoff = merged["FAILURE_BACKOFF"]
    if not _is_number(backoff) or backoff < 0:
        messages.append(
            _error(
                17,
                f"WHOS_ONLINE['FAILURE_BACKOFF'] must be a non-negative number of seconds, "
                f"not {backoff!r}.",
                "The default is 10; 0 retries Redis on every request after a failure.",
            )
        )
    return messages


def _check_alias(alias: object) -> list[CheckMessage]:
    caches = getattr(settings, "CACHES", {})
    if not isinstance(alias, str) or alias not in caches:
        return [
            _error(
                2,
                f"WHOS_ONLINE['REDIS_ALIAS'] is {alias!r}, which is not a key of CACHES.",
                "Name a django-redis cache in CACHES, or set WHOS_ONLINE['REDIS_URL'].",
            )
        ]
    backend = caches[alias].get("BACKEND")
    if not _is_django_redis(backend):
        return [
            _error(
                2,
                f"The cache {alias!r} named by WHOS_ONLINE['REDIS_ALIAS'] uses {backend!r}, "
                f"not {CACHE_BACKEND!r}.",
                "whos_online needs a raw Redis connection, which only django-redis provides; "
                "or set WHOS_ONLINE['REDIS_URL'].",
            )
        ]
    return []


def _is_django_redis(backend: object) -> bool:
    if backend == CACHE_BACKEND:
        return True
    try:
        backend_class = import_string(str(backend))
        base = import_string(CACHE_BACKEND)
    except ImportError:
        return False
    return isinstance(backend_class, type) and issubclass(backend_class, base)


def _regex_problem(pattern: object) -> str | None:
    if not isinstance(pattern, str):
        return f"{pattern!r} is not a string"
    try:
        re.compile(pattern)
    except re.error as exc:
        return str(exc)
    return None


def _callable_problem(value: object) -> str | None:
    if value is None or callable(value):
        return None
    if not isinstance(value, str):
        return f"must be a dotted path or a callable, not {value!r}"
    try:
        imported = import_string(value)
    except Exception as exc:  # any import-time failure is a settings problem to report
        return f"cannot be imported: {exc}"
    if not callable(imported):
        return f"names {value!r}, which is not callable"
    return None


@receiver(setting_changed, dispatch_uid="whos_online.conf.reset")
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in {"WHOS_ONLINE", "CACHES", "SECRET_KEY", "STATIC_URL", "MEDIA_URL"}:
        reset()


def reset() -> None:
    """Forget everything cached from settings: the config, Redis clients and derived keys."""
    from whos_online import aio, connection, hits, identity, keyspace, snapshots, store, throttle

    get_config.cache_clear()
    connection.reset()
    aio.reset()
    identity.reset()
    keyspace.reset()
    throttle.reset()
    hits.reset()
    snapshots.reset()
    store.reset()
