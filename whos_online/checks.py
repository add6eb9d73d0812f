"""System checks: every ``WHOS_ONLINE`` key, the middleware's place in ``MIDDLEWARE``, the URL
names of ``ROOMS``, and on ``check --deploy`` the cleanup, Redis's database and its reach.

The settings are checked by ``config.settings.validate``, which ``get_config`` runs too, so that
settings the checks refuse never make a ``Config`` (docs/checks.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS
from django.core.checks import CheckMessage, Error, Warning
from django.urls import URLResolver, get_resolver
from django.utils.module_loading import import_string

from whos_online.config.room_rules import entry_fields
from whos_online.config.rules import rooms_problems
from whos_online.config.settings import DEFAULTS, user_settings, validate
from whos_online.config.validation import is_django_redis

if TYPE_CHECKING:
    from collections.abc import Iterable

    from django.urls import URLPattern


MIDDLEWARE_PATH: Final = "whos_online.middleware.WhosOnlineMiddleware"
AUTH_MIDDLEWARE_PATH: Final = "django.contrib.auth.middleware.AuthenticationMiddleware"


def check_settings(**kwargs: Any) -> list[CheckMessage]:
    return validate(user_settings())


def check_room_urls(**kwargs: Any) -> list[CheckMessage]:
    """Each key of ``ROOMS`` names a URL of the site's URLconf, and each field of its pattern is
    a keyword argument that every URL of that name captures. Says nothing of a ``ROOMS`` that
    ``check_settings`` reports as malformed."""
    raw: object = user_settings()
    rooms = raw.get("ROOMS") if isinstance(raw, Mapping) else None
    if not isinstance(rooms, Mapping) or rooms_problems(rooms):
        return []
    known = url_captures()
    messages: list[CheckMessage] = []
    for name, entry in rooms.items():
        if name not in known:
            messages.append(
                Error(
                    f"WHOS_ONLINE['ROOMS'] names the URL {name!r}, which the URLconf does not "
                    "have.",
                    hint="Use the name as reverse() takes it, with its namespaces, such as "
                    "'forum:topic'.",
                    id="whos_online.E031",
                )
            )
            continue
        missing = sorted(set(entry_fields(entry)) - known[name].fields())
        if missing:
            captured = ", ".join(sorted(known[name].fields())) or "none"
            messages.append(
                Error(
                    f"WHOS_ONLINE['ROOMS'][{name!r}] is {entry!r}, but the URL {name!r} does "
                    f"not capture {', '.join(missing)} (it captures: {captured}).",
                    hint="A room pattern is formatted with the keyword arguments the URL passes "
                    "to its view, or with its positional captures by number ('{0}') when it "
                    "has no keyword; a function ({'call': ...}) can work out what a pattern "
                    "cannot.",
                    id="whos_online.E032",
                )
            )
    return messages


def check_cleanup_runs(**kwargs: Any) -> list[CheckMessage]:
    """A deploy check (``manage.py check --deploy``), since it reads Redis: whether the online
    sets hold people gone for several windows, which only happens when the cleanup command
    does not run. Says nothing when Redis cannot be read or the settings are wrong."""
    from django.utils.timesince import timesince

    from whos_online import dashboard
    from whos_online.backend import connection
    from whos_online.config.settings import get_config
    from whos_online.store import users
    from whos_online.store.results import as_datetime

    if any(message.is_serious() for message in validate(user_settings())):
        return []
    now = time.time()
    oldest = connection.call(None, users.oldest_seen)
    late_since = dashboard.cleanup_late_since(oldest, get_config(), now=now)
    if late_since is None:
        return []
    since = timesince(late_since, as_datetime(now))
    return [
        Warning(
            f"People last seen {since} ago are still in whos_online's sets: the "
            "cleanup command has not run since then, and the sets grow until it does.",
            hint="Run 'manage.py whos_online_cleanup' from cron every minute, with the "
            "virtual environment's python.",
            id="whos_online.W005",
        )
    ]


#: Django's own Redis cache, whose ``clear()`` empties its database as django-redis's does.
DJANGO_REDIS_CACHE_BACKEND: Final = "django.core.cache.backends.redis.RedisCache"
#: Names of this machine that mean the same server when only the name differs.
_LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})

Database = tuple[str, int | str, int]


def _database(url: object) -> Database | None:
    """Which Redis database a URL names: (host, port, db), or ("unix", path, db); None for
    anything that is not a Redis URL. The defaults are redis-py's: port 6379, database 0."""
    if not isinstance(url, str):
        return None
    from redis.connection import parse_url

    try:
        parts = parse_url(url)  # type: ignore [no-untyped-call]
    except ValueError:
        return None
    db = int(parts.get("db") or 0)
    if "path" in parts:
        return ("unix", str(parts["path"]), db)
    host = str(parts.get("host") or "localhost").lower()
    return ("loopback" if host in _LOOPBACK_NAMES else host, int(parts.get("port") or 6379), db)


def _cache_databases(cache: Mapping[str, Any]) -> set[Database]:
    """The Redis databases a cache's ``clear()`` empties: those of its LOCATION (one URL, a
    list, or comma-separated) when it is a Redis cache, django-redis's or Django's own."""
    backend = cache.get("BACKEND")
    if backend != DJANGO_REDIS_CACHE_BACKEND and not is_django_redis(backend):
        return set()
    location = cache.get("LOCATION")
    urls = location.split(",") if isinstance(location, str) else location
    if not isinstance(urls, (list, tuple)):
        return set()
    return {found for url in urls if (found := _database(url)) is not None}


def check_own_database(**kwargs: Any) -> list[CheckMessage]:
    """A deploy check: whether whos_online keeps its data in the database of a Django cache.

    A cache's ``clear()`` empties its whole Redis database (FLUSHDB), whatever key prefix each
    user of it has, and deploy scripts often run ``cache.clear()``: whos_online's peak, counter
    history and last-seen records would go with the cached pages. It needs no Redis; it is a
    deploy check because the default, sharing the default cache, is fine while developing.
    """
    raw = user_settings()
    if any(message.is_serious() for message in validate(raw)):
        return []
    merged = {**DEFAULTS, **raw}
    caches: Mapping[str, Mapping[str, Any]] = getattr(settings, "CACHES", {})
    url, alias = merged["REDIS_URL"], merged["REDIS_ALIAS"]
    if url not in (None, ""):
        ours, own_alias = ({found} if (found := _database(url)) else set()), None
    else:
        ours, own_alias = _cache_databases(caches[alias]), alias
    sharing = [
        name
        for name, cache in caches.items()
        if (name == own_alias and name == DEFAULT_CACHE_ALIAS)
        or (name != own_alias and ours & _cache_databases(cache))
    ]
    if not sharing:
        return []
    names = ", ".join(repr(name) for name in sharing)
    return [
        Warning(
            f"whos_online keeps its data in the Redis database of the cache {names}: that "
            "cache's clear(), which deploy scripts often run, empties the whole database, and "
            "erases whos_online's peak, counter history and last-seen records with it.",
            hint="Give whos_online a database of its own: a django-redis cache alias on another "
            "database number (LOCATION 'redis://host:6379/1'), named by "
            "WHOS_ONLINE['REDIS_ALIAS'], or WHOS_ONLINE['REDIS_URL'] = 'redis://host:6379/1'.",
            id="whos_online.W006",
        )
    ]


def check_redis_reachable(**kwargs: Any) -> list[CheckMessage]:
    """A deploy check: whether Redis answers a PING within the request path's timeout.

    While it does not, whos_online fails open: pages render, showing nobody online and
    recording nothing, with one warning in the log per outage. That is right for an outage, and
    wrong for a deployment that can never reach its Redis, which only this check reports.
    """
    from whos_online.backend import clients
    from whos_online.config.settings import get_config

    if any(message.is_serious() for message in validate(user_settings())):
        return []
    try:
        clients.request_client().ping()
    except clients.REDIS_ERRORS as error:
        return [
            Warning(
                f"whos_online cannot reach Redis at {get_config().redis_target} within "
                f"{clients.REQUEST_TIMEOUT:g} s ({type(error).__name__}: {error}): pages "
                "will show nobody online and record nobody.",
                hint="Check WHOS_ONLINE['REDIS_URL'], or the LOCATION and OPTIONS of the cache "
                "WHOS_ONLINE['REDIS_ALIAS'] names (host, port, password, TLS), and that Redis "
                "runs and accepts connections from this machine.",
                id="whos_online.W007",
            )
        ]
    return []


def _indexes_of_subclasses(middleware: list[str], base_path: str) -> list[int]:
    """Indexes of the entries that are ``base_path`` or a subclass of it, as Django's admin
    checks find its middleware: a site may extend ours, or Django's."""
    try:
        base = import_string(base_path)
    except ImportError:  # pragma: no cover - both bases always import
        return []
    found = []
    for index, path in enumerate(middleware):
        if path == base_path:
            found.append(index)
            continue
        try:
            candidate = import_string(path)
        except ImportError:
            continue
        if isinstance(candidate, type) and issubclass(candidate, base):
            found.append(index)
    return found


def check_middleware(**kwargs: Any) -> list[CheckMessage]:
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    ours = _indexes_of_subclasses(middleware, MIDDLEWARE_PATH)
    if not ours:
        return [
            Warning(
                f"{MIDDLEWARE_PATH} is not in MIDDLEWARE, so nobody is recorded as online.",
                hint=f"Add it (or a subclass of it) to MIDDLEWARE right after "
                f"{AUTH_MIDDLEWARE_PATH}.",
                id="whos_online.W003",
            )
        ]
    if len(ours) > 1:
        return [
            Error(
                f"{MIDDLEWARE_PATH} (or a subclass) is listed {len(ours)} times in MIDDLEWARE.",
                hint="Keep one entry, right after AuthenticationMiddleware.",
                id="whos_online.E020",
            )
        ]
    auth = _indexes_of_subclasses(middleware, AUTH_MIDDLEWARE_PATH)
    if not auth or auth[0] > ours[0]:
        return [
            Error(
                f"{MIDDLEWARE_PATH} must come after {AUTH_MIDDLEWARE_PATH} in MIDDLEWARE.",
                hint="It needs request.user to tell users from guests; move it just below "
                "AuthenticationMiddleware.",
                id="whos_online.E021",
            )
        ]
    return []


@dataclass(frozen=True)
class Captures:
    """What a URL passes its view: keyword arguments by name, and how many positional ones."""

    keywords: frozenset[str]
    positional: int

    def fields(self) -> frozenset[str]:
        """The fields a room pattern may name: the keywords, and the positions by number."""
        return self.keywords | {str(index) for index in range(self.positional)}

    def __and__(self, other: Captures) -> Captures:
        return Captures(self.keywords & other.keywords, min(self.positional, other.positional))


def url_captures(urlconf: str | None = None) -> dict[str, Captures]:
    """``{name: captures}`` for every named URL, the name as ``reverse()`` takes it (instance
    namespaces joined by ':').

    A URL's view is passed what its route captures (its own and its includes'), and the extra
    ``kwargs`` of its ``path()``; as Django does, a route that captures any keyword passes its
    unnamed groups to no one, and only one that captures none passes them, by position. A name
    several routes share keeps only what all of them pass: a room pattern must work whichever
    of them a request matched.
    """
    found: dict[str, Captures] = {}
    _walk(get_resolver(urlconf).url_patterns, (), frozenset(), 0, found)
    return found


def _walk(
    patterns: Iterable[URLPattern | URLResolver],
    namespaces: tuple[str, ...],
    captured: frozenset[str],
    positional: int,
    found: dict[str, Captures],
) -> None:
    for entry in patterns:
        regex = entry.pattern.regex
        keywords = captured | set(regex.groupindex)
        unnamed = positional + regex.groups - len(regex.groupindex)
        if isinstance(entry, URLResolver):
            keywords |= set(entry.default_kwargs)
            inner = (*namespaces, entry.namespace) if entry.namespace else namespaces
            _walk(entry.url_patterns, inner, keywords, unnamed, found)
        elif entry.name:
            keywords |= set(entry.default_args)
            captures = Captures(frozenset(keywords), 0 if keywords else unnamed)
            name = ":".join((*namespaces, entry.name))
            found[name] = found[name] & captures if name in found else captures
