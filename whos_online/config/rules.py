"""What each ``WHOS_ONLINE`` key may hold: one ``Rule`` per key, with its check id and hint.

Each rule's ``problems`` returns what is wrong with a value (nothing, or the phrases that finish
"WHOS_ONLINE['KEY'] …"), so that ``validation.validate`` can report every problem at once. A rule
looks at its own key only; the checks that weigh two settings against each other are in
``validation``.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from django.utils.module_loading import import_string

from whos_online.config.audiences import NAME_AUDIENCES
from whos_online.config.defaults import DEFAULTS, MAX_SHARDS

if TYPE_CHECKING:
    from collections.abc import Callable

GUEST_IDENTITIES: Final = ("hashed-ip", "ip")
REDIS_URL_SCHEMES: Final = ("redis", "rediss", "unix")


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


#: Longest FLUSH_INTERVAL: what a crash may lose, and how late other processes see a visit.
MAX_FLUSH_INTERVAL: Final = 10


def _flush_interval(value: Any) -> list[str]:
    if _is_number(value) and 0 <= value <= MAX_FLUSH_INTERVAL:
        return []
    return [f"must be a number of seconds from 0 to {MAX_FLUSH_INTERVAL}, not {value!r}"]


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


def room_pattern_fields(pattern: str) -> list[str]:
    """The argument names a room pattern is formatted with (``"topic:{pk}"``: ``["pk"]``);
    ValueError if it is no format string."""
    return [
        field.split(".", 1)[0].split("[", 1)[0]
        for _, field, _, _ in string.Formatter().parse(pattern)
        if field is not None
    ]


def _room_pattern_problem(pattern: object) -> str | None:
    """What is wrong with one room pattern: it is formatted with keyword arguments only."""
    if not isinstance(pattern, str) or not pattern:
        return f"is not a non-empty string: {pattern!r}"
    try:
        fields = room_pattern_fields(pattern)
    except ValueError as exc:
        return f"{pattern!r} is not a format string: {exc}"
    positional = [field for field in fields if not field.isidentifier()]
    if positional:
        return f"{pattern!r} names {positional[0]!r}, which is not a keyword argument's name"
    return None


def rooms_problems(value: Any) -> list[str]:
    """What is wrong with a value of ``ROOMS``: a dict of URL names to room patterns."""
    if not isinstance(value, Mapping):
        return [f"must be a dict of URL names to room patterns, not {value!r}"]
    problems = []
    for name, pattern in value.items():
        if not isinstance(name, str) or not name:
            problems.append(f"has a key that is not a URL name: {name!r}")
        elif problem := _room_pattern_problem(pattern):
            problems.append(f"[{name!r}] {problem}")
    return problems


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
        "FLUSH_INTERVAL",
        "whos_online.E033",
        _flush_interval,
        "The default is 0.1; 0 writes each recorded visit in its own request, for platforms that "
        "freeze a process between requests.",
    ),
    Rule(
        "GUEST_IPV6_PREFIX",
        "whos_online.E028",
        _whole(1, 128),
        "64 counts each IPv6 network of a household or device as one guest, since devices "
        "rotate their addresses inside it; 128 uses the whole address.",
    ),
    Rule(
        "ROOMS",
        "whos_online.E029",
        rooms_problems,
        "For example {'forum:topic': 'topic:{pk}'}: keys are URL names as reverse() takes "
        "them, values are formatted with the URL's keyword arguments.",
    ),
    Rule(
        "ROOM_ACCESS",
        "whos_online.E030",
        _optional_callable,
        "Give the dotted path of a function (request, room) -> bool, such as "
        "'forum.online.may_read_room', or leave it unset to let the signed URLs that the tags "
        "render decide.",
    ),
    Rule(
        "ROOM_TOKEN_MAX_AGE",
        "whos_online.E034",
        _whole(60),
        "Seconds a room's token lets its viewer read the room after the page was rendered; a page "
        "left open fetches a new one as its token runs out.",
    ),
)
