"""System checks: every ``WHOS_ONLINE`` key, the middleware's place in ``MIDDLEWARE``, and (on
``check --deploy``) whether the cleanup command runs.

Each key is checked by one row of ``RULES``: its check id, what is wrong with a value (nothing,
or the phrases that finish "WHOS_ONLINE['KEY'] …"), and a hint. The few checks that weigh two
settings against each other follow the table. ``validate`` is pure (it never calls
``get_config``), so that ``manage.py check`` reports every problem at once; ``get_config`` runs it
too, and refuses to build a ``Config`` from settings with errors.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.utils.module_loading import import_string

from whos_online.conf import DEFAULTS, MAX_SHARDS, user_settings
from whos_online.visibility import NAME_AUDIENCES

GUEST_IDENTITIES: Final = ("hashed-ip", "ip")
REDIS_URL_SCHEMES: Final = ("redis", "rediss", "unix")
CLUSTER_URL_SCHEMES: Final = ("redis", "rediss")
CACHE_BACKEND: Final = "django_redis.cache.RedisCache"
MIDDLEWARE_PATH: Final = "whos_online.middleware.WhosOnlineMiddleware"
AUTH_MIDDLEWARE_PATH: Final = "django.contrib.auth.middleware.AuthenticationMiddleware"


@dataclass(frozen=True)
class Rule:
    """How one key is checked: ``problems`` returns what is wrong with its value, if anything,
    each as the end of a sentence that starts with the key."""

    key: str
    id: str
    problems: Callable[[Any], list[str]]
    hint: str


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(
    minimum: int, maximum: int | None = None, *, wanted: str = ""
) -> Callable[[Any], list[str]]:
    """An integer from ``minimum`` (to ``maximum``); ``wanted`` says so in the setting's terms."""
    if not wanted:
        wanted = (
            f"an integer of at least {minimum}"
            if maximum is None
            else f"an integer from {minimum} to {maximum}"
        )

    def problems(value: Any) -> list[str]:
        if _is_int(value) and value >= minimum and (maximum is None or value <= maximum):
            return []
        return [f"must be {wanted}, not {value!r}"]

    return problems


def _seconds(value: Any) -> list[str]:
    if _is_number(value) and value >= 0:
        return []
    return [f"must be a non-negative number of seconds, not {value!r}"]


def _boolean(value: Any) -> list[str]:
    return [] if isinstance(value, bool) else [f"must be True or False, not {value!r}"]


def _redis_url(value: Any) -> list[str]:
    # "" counts as unset, like get_config() reads it, for settings built from the environment.
    if value in (None, ""):
        return []
    if isinstance(value, str) and urlsplit(value).scheme in REDIS_URL_SCHEMES:
        return []
    return [f"must be a redis://, rediss:// or unix:// URL, not {value!r}"]


def _key_prefix(value: Any) -> list[str]:
    if isinstance(value, str) and value and not any(c in value for c in "{} \r\n"):
        return []
    return [f"must be a non-empty string without braces or spaces, not {value!r}"]


def _guest_identity(value: Any) -> list[str]:
    if value in GUEST_IDENTITIES:
        return []
    return [f"must be 'hashed-ip' or 'ip', not {value!r}"]


def _regex_problem(pattern: object) -> str | None:
    if not isinstance(pattern, str):
        return f"{pattern!r} is not a string"
    try:
        re.compile(pattern)
    except re.error as exc:
        return str(exc)
    return None


def _ignore_paths(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Sequence):
        return [f"must be a list of regular expressions, not {value!r}"]
    return [
        f"holds an invalid regular expression {pattern!r}: {problem}"
        for pattern in value
        if (problem := _regex_problem(pattern))
    ]


def _optional_regex(value: Any) -> list[str]:
    problem = None if value is None else _regex_problem(value)
    return [f"must be a valid regular expression or None: {problem}"] if problem else []


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


def _optional_callable(value: Any) -> list[str]:
    problem = _callable_problem(value)
    return [problem] if problem else []


def _audience(value: Any) -> list[str]:
    if value is None:
        return ["must not be None"]
    if isinstance(value, str) and "." not in value:
        return [] if value in NAME_AUDIENCES else [f"is not a known audience: {value!r}"]
    return _optional_callable(value)


def _precisions(value: Any) -> list[str]:
    if (
        isinstance(value, (str, bytes))
        or not isinstance(value, Sequence)
        or not value
        or not all(_is_int(p) and p >= 1 for p in value)
        or len(set(value)) != len(value)
    ):
        return [f"must be a non-empty list of distinct positive integers (seconds), not {value!r}"]
    return []


def _default(key: str) -> str:
    return f"The default is {DEFAULTS[key]}."


_CALLABLE_HINT: Final = (
    "Give the dotted path of a function that takes the user, such as 'myapp.online.hide_user'."
)

RULES: Final = (
    Rule(
        "REDIS_URL",
        "whos_online.E003",
        _redis_url,
        "For example 'redis://127.0.0.1:6379/0', or leave it unset to use the django-redis cache "
        "named by REDIS_ALIAS.",
    ),
    Rule(
        "REDIS_CLUSTER",
        "whos_online.E025",
        _boolean,
        "True when REDIS_URL names a node of a Redis Cluster.",
    ),
    Rule(
        "KEY_PREFIX",
        "whos_online.E004",
        _key_prefix,
        "The prefix becomes a Redis Cluster hash tag, {prefix}, so it cannot hold braces.",
    ),
    Rule(
        "WINDOW",
        "whos_online.E005",
        _whole(1, wanted="a positive integer of seconds"),
        "The default is 600 (ten minutes).",
    ),
    Rule(
        "THROTTLE",
        "whos_online.E006",
        _whole(0, wanted="a non-negative integer of seconds"),
        "The default is 120; 0 records every request.",
    ),
    Rule("TRACK_GUESTS", "whos_online.E007", _boolean, _default("TRACK_GUESTS")),
    Rule(
        "GUEST_IDENTITY",
        "whos_online.E008",
        _guest_identity,
        "'hashed-ip' (the default) stores no IP address in Redis.",
    ),
    Rule(
        "TRUSTED_PROXY_COUNT",
        "whos_online.E009",
        _whole(0, 20),
        "Count the reverse proxies in front of Django that append to X-Forwarded-For; 0 uses "
        "REMOTE_ADDR only.",
    ),
    Rule(
        "IGNORE_PATHS",
        "whos_online.E010",
        _ignore_paths,
        "A list such as [r'^/static/', r'^/healthz$']: each entry is matched with re.search "
        "against request.path.",
    ),
    Rule(
        "BOT_USER_AGENTS",
        "whos_online.E011",
        _optional_regex,
        "It is matched with re.search against the User-Agent header.",
    ),
    Rule("HIDE_USER", "whos_online.E012", _optional_callable, _CALLABLE_HINT),
    Rule("DISPLAY_NAME", "whos_online.E013", _optional_callable, _CALLABLE_HINT),
    Rule("DISPLAY_LIMIT", "whos_online.E014", _whole(0), _default("DISPLAY_LIMIT")),
    Rule("COUNTER_PRECISIONS", "whos_online.E015", _precisions, _default("COUNTER_PRECISIONS")),
    Rule("COUNTER_SAMPLES", "whos_online.E016", _whole(1), _default("COUNTER_SAMPLES")),
    Rule(
        "FAILURE_BACKOFF",
        "whos_online.E017",
        _seconds,
        "The default is 10; 0 retries Redis on every request after a failure.",
    ),
    Rule("LAST_SEEN_DAYS", "whos_online.E018", _whole(1), _default("LAST_SEEN_DAYS")),
    Rule("COUNT_HITS", "whos_online.E019", _boolean, _default("COUNT_HITS")),
    Rule(
        "SHOW_NAMES_TO",
        "whos_online.E022",
        _audience,
        "Who may see names in the JSON view and the live widget: 'staff' (the default), "
        "'authenticated', 'everyone', or (the dotted path of) a function (user) -> bool.",
    ),
    Rule("REFRESH_INTERVAL", "whos_online.E023", _whole(1), _default("REFRESH_INTERVAL")),
    Rule("JSON_MAX_AGE", "whos_online.E024", _whole(0), _default("JSON_MAX_AGE")),
    Rule(
        "SHARDS",
        "whos_online.E026",
        _whole(1, MAX_SHARDS),
        "1 keeps every key in one slot; on a Redis Cluster, a few shards per master spread the "
        "people online over the masters.",
    ),
    Rule(
        "SNAPSHOT_MAX_AGE",
        "whos_online.E027",
        _seconds,
        "The default is 2; 0 reads Redis for every render.",
    ),
    Rule(
        "GUEST_IPV6_PREFIX",
        "whos_online.E028",
        _whole(1, 128),
        "64 counts each IPv6 network of a household or device as one guest, since devices "
        "rotate their addresses inside it; 128 uses the whole address.",
    ),
)


def validate(raw: object) -> list[CheckMessage]:
    """Check every key of ``WHOS_ONLINE`` and report all problems, each with a hint."""
    if not isinstance(raw, Mapping):
        return [
            Error(
                f"WHOS_ONLINE must be a dict, not {type(raw).__name__}.",
                hint="Set WHOS_ONLINE = {} or leave it out to use the defaults.",
                id="whos_online.E001",
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
    wrong = set()
    for rule in RULES:
        for problem in rule.problems(merged[rule.key]):
            wrong.add(rule.key)
            messages.append(
                Error(f"WHOS_ONLINE[{rule.key!r}] {problem}.", hint=rule.hint, id=rule.id)
            )
    for check in _ACROSS_KEYS:
        messages.extend(check(merged, wrong))
    return messages


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
    if not _is_django_redis(backend):
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


def _is_django_redis(backend: object) -> bool:
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


_ACROSS_KEYS: Final[tuple[Callable[[Mapping[str, Any], set[str]], list[CheckMessage]], ...]] = (
    _alias,
    _cluster_url,
    _throttle_below_window,
    _raw_addresses,
    _refresh_beats_cache,
)


def check_settings(**kwargs: Any) -> list[CheckMessage]:
    return validate(user_settings())


def check_cleanup_runs(**kwargs: Any) -> list[CheckMessage]:
    """A deploy check (``manage.py check --deploy``), since it reads Redis: whether the online
    sets hold people gone for several windows, which only happens when the cleanup command
    does not run. Says nothing when Redis cannot be read or the settings are wrong."""
    from django.utils.timesince import timesince

    from whos_online import connection, dashboard, store
    from whos_online.conf import get_config
    from whos_online.results import as_datetime

    if any(message.is_serious() for message in validate(user_settings())):
        return []
    now = time.time()
    oldest = connection.call(None, store.oldest_seen)
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
