"""What a ``WHOS_ONLINE`` value may hold and what it becomes: the parts of the table of settings
(``settings.Config``), a row of which ``setting`` makes.

Each check returns what is wrong with its own value, so that every problem is reported at once;
those that weigh two settings are in ``validation``. The rules on users that settings name
(``name_audience``, ``is_staff``) and ``redact_url`` live here too.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.module_loading import import_string

from whos_online.config.room_rules import callable_problem, entry_problems

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser


GUEST_IDENTITIES: Final = ("hashed-ip", "ip")
REDIS_URL_SCHEMES: Final = ("redis", "rediss", "unix")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def whole(
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


def whole_or_none(minimum: int, *, wanted: str) -> Callable[[Any], list[str]]:
    """None, or what ``whole(minimum)`` takes; ``wanted`` says so in the setting's terms."""
    check = whole(minimum, wanted=wanted)

    def problems(value: Any) -> list[str]:
        return [] if value is None else check(value)

    return problems


def seconds_up_to(maximum: float) -> Callable[[Any], list[str]]:
    """A number of seconds from 0 to ``maximum``."""

    def problems(value: Any) -> list[str]:
        if _is_number(value) and 0 <= value <= maximum:
            return []
        return [f"must be a number of seconds from 0 to {maximum:g}, not {value!r}"]

    return problems


#: Longest FLUSH_INTERVAL: what a crash may lose, and how late other processes see a visit.
MAX_FLUSH_INTERVAL: Final = 10
#: Longest LEAVE_GRACE: a reload takes seconds, and a reader who closed the page should not count
#: there for long.
MAX_LEAVE_GRACE: Final = 60
#: Longest STOP_TIMEOUT: gunicorn's graceful timeout and Kubernetes' grace period, by default.
MAX_STOP_TIMEOUT: Final = 30


def seconds(value: Any) -> list[str]:
    if _is_number(value) and value >= 0:
        return []
    return [f"must be a non-negative number of seconds, not {value!r}"]


def boolean(value: Any) -> list[str]:
    return [] if isinstance(value, bool) else [f"must be True or False, not {value!r}"]


def redis_url(value: Any) -> list[str]:
    # "" counts as unset, like get_config() reads it, for settings built from the environment.
    if value in (None, ""):
        return []
    if isinstance(value, str) and urlsplit(value).scheme in REDIS_URL_SCHEMES:
        return []
    return [f"must be a redis://, rediss:// or unix:// URL, not {value!r}"]


def key_prefix(value: Any) -> list[str]:
    if isinstance(value, str) and value and not any(c in value for c in "{} \r\n"):
        return []
    return [f"must be a non-empty string without braces or spaces, not {value!r}"]


def guest_identity(value: Any) -> list[str]:
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


def ignore_paths(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Sequence):
        return [f"must be a list of regular expressions, not {value!r}"]
    return [
        f"holds an invalid regular expression {pattern!r}: {problem}"
        for pattern in value
        if (problem := _regex_problem(pattern))
    ]


def optional_regex(value: Any) -> list[str]:
    problem = None if value is None else _regex_problem(value)
    return [f"must be a valid regular expression or None: {problem}"] if problem else []


def optional_callable(value: Any) -> list[str]:
    problem = None if value is None else callable_problem(value)
    return [problem] if problem else []


def audience(value: Any) -> list[str]:
    if value is None:
        return ["must not be None"]
    if isinstance(value, str) and "." not in value:
        return [] if value in NAME_AUDIENCES else [f"is not a known audience: {value!r}"]
    return optional_callable(value)


def precisions(value: Any) -> list[str]:
    if (
        isinstance(value, (str, bytes))
        or not isinstance(value, Sequence)
        or not value
        or not all(_is_int(p) and p >= 1 for p in value)
        or len(set(value)) != len(value)
    ):
        return [f"must be a non-empty list of distinct positive integers (seconds), not {value!r}"]
    return []


CALLABLE_HINT: Final = (
    "Give the dotted path of a function that takes the user, such as 'myapp.online.hide_user'."
)


def rooms_problems(value: Any) -> list[str]:
    """What is wrong with a value of ``ROOMS``: a dict of URL names to entries
    (``room_rules``)."""
    if not isinstance(value, Mapping):
        return [f"must be a dict of URL names to room patterns, not {value!r}"]
    problems = []
    for name, entry in value.items():
        if not isinstance(name, str) or not name:
            problems.append(f"has a key that is not a URL name: {name!r}")
        else:
            problems.extend(f"[{name!r}] {problem}" for problem in entry_problems(entry))
    return problems


#: Crawlers, monitors and HTTP libraries that are counted as bots rather than guests.
DEFAULT_BOT_USER_AGENTS: Final = (
    r"(?i)bot\b|crawl|spider|slurp|bingpreview|facebookexternalhit|embedly|quora link preview"
    r"|pinterestbot|whatsapp|telegrambot|discord|slack|skype|vkshare|w3c_validator|lighthouse"
    r"|headlesschrome|phantomjs|python-requests|python-urllib|aiohttp|httpx|curl/|wget/"
    r"|go-http-client|java/|okhttp|libwww|apache-httpclient|uptime|pingdom|statuscake"
    r"|monitor|scrapy|feedfetcher|feedly|ahrefs|semrush|mj12|dotbot|petalbot|yandex|baidu"
)

#: Most shards a layout may have: choosing their hash tags costs about a millisecond per shard,
#: once per process.
MAX_SHARDS: Final = 128


@dataclass(frozen=True)
class Setting:
    """One row of the table: a key of ``WHOS_ONLINE`` and all that is known of it."""

    key: str
    default: Any
    #: The system check that reports a value ``problems`` finds wrong (None: checked elsewhere).
    check_id: str | None
    problems: Callable[[Any], list[str]] | None
    #: Said with each problem; ``{default}`` stands for the default.
    hint: str
    #: The field's value made of the site's value.
    build: Callable[[Any], Any]

    @property
    def hint_text(self) -> str:
        return self.hint.replace("{default}", repr(self.default))


def setting(
    key: str,
    default: Any,
    check_id: str | None = None,
    problems: Callable[[Any], list[str]] | None = None,
    *,
    hint: str = "The default is {default}.",
    build: Callable[[Any], Any] = lambda value: value,
) -> Any:
    """A field of ``Config`` that is the setting ``key`` (see the module's docstring)."""
    row = Setting(key, default, check_id, problems, hint, build)
    return dataclasses.field(metadata={"setting": row})


def text_or_none(value: Any) -> Any:
    # "" counts as unset, for settings built from the environment.
    return value or None


def patterns(value: Sequence[str] | None) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in (default_ignore_paths() if value is None else value))


def pattern_or_none(value: str | None) -> re.Pattern[str] | None:
    return re.compile(value) if value else None


def sorted_tuple(value: Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(value))


def import_callable(value: str | Callable[..., Any] | None) -> Any:
    """A setting's callable, given as itself or as its dotted path."""
    if value is None or callable(value):
        return value
    return import_string(value)


def default_ignore_paths() -> list[str]:
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


#: The named values of ``SHOW_NAMES_TO``; anything else is a dotted path or a callable.
NAME_AUDIENCES: Final = ("staff", "authenticated", "everyone")


def is_staff(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_active and getattr(user, "is_staff", False))


def is_authenticated(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_authenticated)


def name_audience(value: str | Callable[..., Any]) -> Any:
    """The rule ``SHOW_NAMES_TO`` names; None means everyone, so that the user need not be
    loaded to decide."""
    if value == "everyone":
        return None
    if value == "staff":
        return is_staff
    if value == "authenticated":
        return is_authenticated
    return value if callable(value) else import_string(value)


def redact_url(url: str) -> str:
    """Hide passwords, given before the host or as ``?password=``, from log lines."""
    parts = urlsplit(url)
    if parts.password:
        parts = parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@"))
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return parts._replace(query=query).geturl()
