"""The checks of ``WHOS_ONLINE``: each key by its row of the settings table, then the settings
weighed against each other (THROTTLE below WINDOW, a cluster's URL, the cache alias).

The table is handed in (``problems``), so that the settings module, which holds it, can import
this one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from whos_online.config.rules import Setting

CLUSTER_URL_SCHEMES: Final = ("redis", "rediss")
CACHE_BACKEND: Final = "django_redis.cache.RedisCache"


def problems(raw: object, table: Sequence[Setting]) -> list[CheckMessage]:
    """Every problem of ``raw`` (the site's ``WHOS_ONLINE``), by the rows of ``table``."""
    if not isinstance(raw, Mapping):
        return [
            Error(
                f"WHOS_ONLINE must be a dict, not {type(raw).__name__}.",
                hint="Set WHOS_ONLINE = {} or leave it out to use the defaults.",
                id="whos_online.E001",
            )
        ]
    messages: list[CheckMessage] = []
    defaults = {row.key: row.default for row in table}
    unknown = sorted(set(raw) - set(defaults), key=str)
    if unknown:
        messages.append(
            Warning(
                f"WHOS_ONLINE has unknown keys: {', '.join(map(str, unknown))}.",
                hint=f"Known keys: {', '.join(defaults)}.",
                id="whos_online.W001",
            )
        )
    merged = {**defaults, **raw}
    wrong = set()
    for row in table:
        for problem in row.problems(merged[row.key]) if row.problems else ():
            wrong.add(row.key)
            messages.append(
                Error(f"WHOS_ONLINE[{row.key!r}] {problem}.", hint=row.hint_text, id=row.check_id)
            )
    messages.extend(across_keys(merged, wrong))
    return messages


def across_keys(merged: Mapping[str, Any], wrong: set[str]) -> list[CheckMessage]:
    """What is wrong with two settings together, in ``merged`` (the site's over the
    defaults); a pair with a key in ``wrong`` (whose own value is wrong) is not weighed."""
    return [message for check in _ACROSS_KEYS for message in check(merged, wrong)]


def _alias(merged: Mapping[str, Any], wrong: set[str]) -> list[CheckMessage]:
    """Without a REDIS_URL, the alias must name a django-redis cache."""
    if merged["REDIS_URL"] not in (None, ""):
        return []
    alias = merged["REDIS_ALIAS"]
    caches = getattr(settings, "CACHES", {})
    if not isinstance(alias, str) or alias not in caches:
        return [
            Error(
                f"WHOS_ONLINE['REDIS_ALIAS'] is {alias!r}, which is not a key of CACHES.",
                hint="Name a django-redis cache in CACHES, or set WHOS_ONLINE['REDIS_URL'].",
                id="whos_online.E002",
            )
        ]
    backend = caches[alias].get("BACKEND")
    if not is_django_redis(backend):
        return [
            Error(
                f"The cache {alias!r} named by WHOS_ONLINE['REDIS_ALIAS'] uses {backend!r}, "
                f"not {CACHE_BACKEND!r}.",
                hint="whos_online needs a raw Redis connection, which only django-redis provides; "
                "or set WHOS_ONLINE['REDIS_URL'].",
                id="whos_online.E002",
            )
        ]
    return []


def is_django_redis(backend: object) -> bool:
    if backend == CACHE_BACKEND:
        return True
    try:
        backend_class = import_string(str(backend))
        base = import_string(CACHE_BACKEND)
    except ImportError:
        return False
    return isinstance(backend_class, type) and issubclass(backend_class, base)


def _cluster_url(merged: Mapping[str, Any], wrong: set[str]) -> list[CheckMessage]:
    """A cluster is reached through a redis:// URL of one of its nodes, on database 0."""
    url = merged["REDIS_URL"]
    if merged["REDIS_CLUSTER"] is not True or (
        isinstance(url, str)
        and urlsplit(url).scheme in CLUSTER_URL_SCHEMES
        and urlsplit(url).path.strip("/") in ("", "0")
    ):
        return []
    return [
        Error(
            "WHOS_ONLINE['REDIS_CLUSTER'] is True, so REDIS_URL must be the redis:// or "
            f"rediss:// URL of a cluster node, with no database but 0, not {url!r}.",
            hint="For example 'redis://10.0.0.5:7000'. Any node will do: the client finds the "
            "others. A cluster has no databases besides 0, and no unix:// sockets.",
            id="whos_online.E025",
        )
    ]


def _throttle_below_window(merged: Mapping[str, Any], wrong: set[str]) -> list[CheckMessage]:
    throttle, window = merged["THROTTLE"], merged["WINDOW"]
    if {"THROTTLE", "WINDOW"} & wrong or throttle < window:
        return []
    return [
        Error(
            f"WHOS_ONLINE['THROTTLE'] ({throttle}) must be smaller than WINDOW ({window}).",
            hint="Otherwise people drop out of the online list while their throttle cookie "
            "still stops them from being recorded again.",
            id="whos_online.E006",
        )
    ]


def _raw_addresses(merged: Mapping[str, Any], wrong: set[str]) -> list[CheckMessage]:
    if merged["GUEST_IDENTITY"] != "ip":
        return []
    return [
        Warning(
            "WHOS_ONLINE['GUEST_IDENTITY'] is 'ip': guests' raw IP addresses are stored in Redis.",
            hint="IP addresses are personal data in many jurisdictions; prefer 'hashed-ip'.",
            id="whos_online.W002",
        )
    ]


def _refresh_beats_cache(merged: Mapping[str, Any], wrong: set[str]) -> list[CheckMessage]:
    refresh, max_age = merged["REFRESH_INTERVAL"], merged["JSON_MAX_AGE"]
    if {"REFRESH_INTERVAL", "JSON_MAX_AGE"} & wrong or refresh > max_age:
        return []
    return [
        Warning(
            f"WHOS_ONLINE['JSON_MAX_AGE'] ({max_age}) is not below REFRESH_INTERVAL "
            f"({refresh}): browsers and caches answer some refreshes with the counts they "
            "already showed.",
            hint="Keep JSON_MAX_AGE below REFRESH_INTERVAL, about a third of it.",
            id="whos_online.W004",
        )
    ]


def _token_outlives_refresh(merged: Mapping[str, Any], wrong: set[str]) -> list[CheckMessage]:
    refresh, max_age = merged["REFRESH_INTERVAL"], merged["ROOM_TOKEN_MAX_AGE"]
    if {"REFRESH_INTERVAL", "ROOM_TOKEN_MAX_AGE"} & wrong or max_age > refresh:
        return []
    return [
        Warning(
            f"WHOS_ONLINE['ROOM_TOKEN_MAX_AGE'] ({max_age}) is not above REFRESH_INTERVAL "
            f"({refresh}): a room's live widget would fetch its page again for a new token at "
            "nearly every refresh.",
            hint="Keep ROOM_TOKEN_MAX_AGE many times REFRESH_INTERVAL (the default is an hour).",
            id="whos_online.W008",
        )
    ]


_ACROSS_KEYS: Final[tuple[Callable[[Mapping[str, Any], set[str]], list[CheckMessage]], ...]] = (
    _alias,
    _cluster_url,
    _throttle_below_window,
    _raw_addresses,
    _refresh_beats_cache,
    _token_outlives_refresh,
)
