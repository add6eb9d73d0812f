"""The one place that reads ``settings.WHOS_ONLINE``, and the table of its keys.

Each key is one field of ``Config``, from which the defaults, the checks and the ``Config`` are
made, so that a new setting is one edit here. The ``Config`` is made once per process and dropped
when a setting it reads changes.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import Signal, receiver

from whos_online.config import process, rules, validation
from whos_online.config.room_rules import RoomRule, rules_of
from whos_online.config.rules import name_audience, redact_url

if TYPE_CHECKING:
    import re
    from collections.abc import Callable, Mapping

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.core.checks import CheckMessage
    from django.http import HttpRequest

    AnyUser = AbstractBaseUser | AnonymousUser


@dataclass(frozen=True)
class Config:
    """The settings as the code reads them: one field per key of ``WHOS_ONLINE``."""

    redis_alias: str = rules.setting("REDIS_ALIAS", "default")
    redis_url: str | None = rules.setting(
        "REDIS_URL",
        None,
        "whos_online.E003",
        rules.redis_url,
        hint="For example 'redis://127.0.0.1:6379/0', or leave it unset to use the django-redis "
        "cache named by REDIS_ALIAS.",
        build=rules.text_or_none,
    )
    redis_cluster: bool = rules.setting(
        "REDIS_CLUSTER",
        False,
        "whos_online.E025",
        rules.boolean,
        hint="True when REDIS_URL names a node of a Redis Cluster.",
    )
    #: Under tests (unless ``ISOLATE_TESTS`` is False), one of the test process's own.
    key_prefix: str = rules.setting(
        "KEY_PREFIX",
        "whos_online",
        "whos_online.E004",
        rules.key_prefix,
        hint="The prefix becomes a Redis Cluster hash tag, {prefix}, so it cannot hold braces.",
    )
    isolate_tests: bool = rules.setting(
        "ISOLATE_TESTS",
        True,
        "whos_online.E035",
        rules.boolean,
        hint="True (the default) gives each test process keys of its own, removed as it ends; "
        "False lets the site's tests write the live presence data.",
    )
    window: int = rules.setting(
        "WINDOW",
        600,
        "whos_online.E005",
        rules.whole(1, wanted="a positive integer of seconds"),
        hint="The default is {default} (ten minutes).",
    )
    throttle: int = rules.setting(
        "THROTTLE",
        120,
        "whos_online.E006",
        rules.whole(0, wanted="a non-negative integer of seconds"),
        hint="The default is {default}; 0 records every request.",
    )
    track_guests: bool = rules.setting("TRACK_GUESTS", True, "whos_online.E007", rules.boolean)
    guest_identity: str = rules.setting(
        "GUEST_IDENTITY",
        "hashed-ip",
        "whos_online.E008",
        rules.guest_identity,
        hint="{default} (the default) stores no IP address in Redis.",
    )
    guest_ipv6_prefix: int = rules.setting(
        "GUEST_IPV6_PREFIX",
        64,
        "whos_online.E028",
        rules.whole(1, 128),
        hint="The default, {default}, counts each IPv6 network of a household or device as one "
        "guest, since devices rotate their addresses inside it; 128 uses the whole address.",
    )
    trusted_proxy_count: int = rules.setting(
        "TRUSTED_PROXY_COUNT",
        0,
        "whos_online.E009",
        rules.whole(0, 20),
        hint="Count the reverse proxies in front of Django that append to X-Forwarded-For; 0 uses "
        "REMOTE_ADDR only.",
    )
    #: None (the default) means "STATIC_URL and MEDIA_URL", read when the config is built.
    ignore_paths: tuple[re.Pattern[str], ...] = rules.setting(
        "IGNORE_PATHS",
        None,
        "whos_online.E010",
        rules.ignore_paths,
        hint="A list such as [r'^/static/', r'^/healthz$']: each entry is matched with re.search "
        "against request.path.",
        build=rules.patterns,
    )
    bot_user_agents: re.Pattern[str] | None = rules.setting(
        "BOT_USER_AGENTS",
        rules.DEFAULT_BOT_USER_AGENTS,
        "whos_online.E011",
        rules.optional_regex,
        hint="It is matched with re.search against the User-Agent header.",
        build=rules.pattern_or_none,
    )
    hide_user: Callable[[AnyUser], bool] | None = rules.setting(
        "HIDE_USER",
        None,
        "whos_online.E012",
        rules.optional_callable,
        hint=rules.CALLABLE_HINT,
        build=rules.import_callable,
    )
    display_name: Callable[[AnyUser], str] | None = rules.setting(
        "DISPLAY_NAME",
        None,
        "whos_online.E013",
        rules.optional_callable,
        hint=rules.CALLABLE_HINT,
        build=rules.import_callable,
    )
    display_limit: int = rules.setting("DISPLAY_LIMIT", 50, "whos_online.E014", rules.whole(0))
    counter_precisions: tuple[int, ...] = rules.setting(
        "COUNTER_PRECISIONS",
        [1, 5, 60, 300, 3600, 18000, 86400],
        "whos_online.E015",
        rules.precisions,
        build=rules.sorted_tuple,
    )
    counter_samples: int = rules.setting("COUNTER_SAMPLES", 120, "whos_online.E016", rules.whole(1))
    failure_backoff: float = rules.setting(
        "FAILURE_BACKOFF",
        10,
        "whos_online.E017",
        rules.seconds,
        hint="The default is {default}; 0 retries Redis on every request after a failure.",
        build=float,
    )
    last_seen_days: int = rules.setting("LAST_SEEN_DAYS", 90, "whos_online.E018", rules.whole(1))
    count_hits: bool = rules.setting("COUNT_HITS", False, "whos_online.E019", rules.boolean)
    #: None means everyone, so that the user need not be loaded to decide.
    show_names_to: Callable[[AnyUser], bool] | None = rules.setting(
        "SHOW_NAMES_TO",
        "staff",
        "whos_online.E022",
        rules.audience,
        hint="Who may see names in the JSON view and the live widget: {default} (the "
        "default), 'authenticated', 'everyone', or (the dotted path of) a function "
        "(user) -> bool.",
        build=name_audience,
    )
    refresh_interval: int = rules.setting(
        "REFRESH_INTERVAL", 30, "whos_online.E023", rules.whole(1)
    )
    live_updates: bool = rules.setting("LIVE_UPDATES", True, "whos_online.E036", rules.boolean)
    json_max_age: int = rules.setting("JSON_MAX_AGE", 10, "whos_online.E024", rules.whole(0))
    max_streams: int | None = rules.setting(
        "MAX_STREAMS",
        None,
        "whos_online.E037",
        rules.whole_or_none(1, wanted="None or an integer of at least 1"),
        hint="None (the default) opens at most half as many streams as the process may open "
        "files (RLIMIT_NOFILE), leaving the other half to pages, Redis and the database.",
    )
    max_streams_per_client: int | None = rules.setting(
        "MAX_STREAMS_PER_CLIENT",
        8,
        "whos_online.E038",
        rules.whole_or_none(1, wanted="None or an integer of at least 1"),
        hint="The default, {default}, is more tabs of one site than a person keeps shown side by "
        "side (a hidden tab closes its stream); None sets no cap per session.",
    )
    max_streams_per_address: int | None = rules.setting(
        "MAX_STREAMS_PER_ADDRESS",
        64,
        "whos_online.E039",
        rules.whole_or_none(1, wanted="None or an integer of at least 1"),
        hint="Counts only requests without a session, which may be many people behind one "
        "address (an office's NAT): the default is {default}; None sets no cap per address.",
    )
    shards: int = rules.setting(
        "SHARDS",
        1,
        "whos_online.E026",
        rules.whole(1, rules.MAX_SHARDS),
        hint="1 keeps every key in one slot; on a Redis Cluster, a few shards per master spread "
        "the people online over the masters.",
    )
    snapshot_max_age: float = rules.setting(
        "SNAPSHOT_MAX_AGE",
        2,
        "whos_online.E027",
        rules.seconds,
        hint="The default is {default}; 0 reads Redis for every render.",
        build=float,
    )
    #: Seconds a process may hold recorded visits before writing them.
    flush_interval: float = rules.setting(
        "FLUSH_INTERVAL",
        0.1,
        "whos_online.E033",
        rules.seconds_up_to(rules.MAX_FLUSH_INTERVAL),
        hint="The default is {default}; 0 writes each recorded visit in its own request, for "
        "platforms that freeze a process between requests.",
        build=float,
    )
    #: Seconds a reader who left a page (closed it, or the page said so) still counts in its
    #: room: long enough for a reload to say they are still there.
    leave_grace: float = rules.setting(
        "LEAVE_GRACE",
        5,
        "whos_online.E041",
        rules.seconds_up_to(rules.MAX_LEAVE_GRACE),
        hint="The default is {default}; 0 takes a reader out of the room the moment their page "
        "closes, and a reload then shows them leaving and coming back.",
        build=float,
    )
    #: Seconds a stopping process tries to write what it holds (``flushing.schedule``).
    stop_timeout: float = rules.setting(
        "STOP_TIMEOUT",
        5,
        "whos_online.E040",
        rules.seconds_up_to(rules.MAX_STOP_TIMEOUT),
        hint="The default is {default}; keep it well below the server's graceful timeout "
        "(gunicorn's --graceful-timeout, 30 s by default) and the process manager's stop "
        "timeout. 0 tries once.",
        build=float,
    )
    #: The room of a page view, by its URL name (``room_rules``).
    rooms: Mapping[str, RoomRule] = rules.setting(
        "ROOMS",
        {},
        "whos_online.E029",
        rules.rooms_problems,
        hint="For example {'forum:topic': 'topic:{pk}'}: keys are URL names as reverse() takes "
        "them; values are patterns formatted with the URL's keyword arguments (or positional "
        "captures, '{0}'), {'room': pattern, 'title': pattern}, or {'call': 'dotted.path'} of "
        "a function (request) -> room.",
        build=rules_of,
    )
    room_access: Callable[[HttpRequest, str], bool] | None = rules.setting(
        "ROOM_ACCESS",
        None,
        "whos_online.E030",
        rules.optional_callable,
        hint="Give the dotted path of a function (request, room) -> bool, such as "
        "'forum.online.may_read_room', or leave it unset to let the signed URLs that the tags "
        "render decide.",
        build=rules.import_callable,
    )
    room_token_max_age: int = rules.setting(
        "ROOM_TOKEN_MAX_AGE",
        3600,
        "whos_online.E034",
        rules.whole(60),
        hint="Seconds a room's token lets its viewer read the room after the page was rendered "
        "(the default is {default}); a page left open fetches a new one as its token runs out.",
    )

    @functools.cached_property
    def redis_target(self) -> str:
        """Names the Redis server in log lines and keys its breakers; cached, as every call
        reads it and redacting the URL parses it (the Config is frozen)."""
        if self.redis_url:
            where = redact_url(self.redis_url)
            return f"cluster {where}" if self.redis_cluster else where
        return f"cache alias {self.redis_alias!r}"


def user_settings() -> Mapping[str, Any]:
    raw = getattr(settings, "WHOS_ONLINE", None)
    return raw if raw is not None else {}


#: The table: every setting, in the order ``Config`` declares them.
SETTINGS: Final = tuple(
    (field.name, field.metadata["setting"]) for field in dataclasses.fields(Config)
)
DEFAULTS: Final[Mapping[str, Any]] = {row.key: row.default for _, row in SETTINGS}


def validate(raw: object) -> list[CheckMessage]:
    """Every problem of ``WHOS_ONLINE``, each with a hint: for ``manage.py check``, and for
    ``get_config``, which refuses settings with errors even where nobody runs the checks."""
    return validation.problems(raw, [row for _, row in SETTINGS])


def get_config() -> Config:
    """The process's ``Config``; raises ``ImproperlyConfigured`` on invalid settings. Under
    tests each process has its own (``process.run_keys``), and keeps it until it exits, so that
    what it writes after the teardown (its queue) goes where its tests wrote, and is removed."""
    if _under_tests or _test_run_began():
        return _config_under_tests(os.getpid())
    return _config()


@process.per_settings
def secret_key() -> str:
    """``SECRET_KEY``, read once per settings: the keyed hashes of a recorded visit (its
    pseudonyms, its room's tag) each ask for it, and reading a setting costs a request about a
    quarter of a microsecond."""
    return str(settings.SECRET_KEY)


#: Whether this process has been seen under tests (``process.in_test_environment``).
_under_tests = False


def _test_run_began() -> bool:
    global _under_tests  # noqa: PLW0603 - once per process
    if not process.in_test_environment():
        return False
    _under_tests = True
    if _config.cache_info().currsize:
        # Something read the settings before the tests began: drop what was made of them.
        reset()
    return True


@functools.cache
def _config() -> Config:
    return _build(isolated=False)


@functools.cache
def _config_under_tests(pid: int) -> Config:
    return _build(isolated=True)


def _build(*, isolated: bool) -> Config:
    raw = user_settings()
    errors = [message for message in validate(raw) if message.is_serious()]
    if errors:
        details = "; ".join(f"{message.id}: {message.msg}" for message in errors)
        raise ImproperlyConfigured(f"Invalid WHOS_ONLINE setting. {details}")
    merged = {**DEFAULTS, **raw}
    fields = {name: row.build(merged[row.key]) for name, row in SETTINGS}
    if isolated and fields["isolate_tests"]:
        fields["key_prefix"] = process.run_keys().prefix(fields["key_prefix"])
    return Config(**fields)


#: Sent when the ``Config`` is dropped, after the process's state (``process.reset_home``).
config_changed = Signal()

#: Settings a ``Config`` (or something cached from one) is read from.
_READ_SETTINGS: Final = frozenset(
    {
        "WHOS_ONLINE",
        "CACHES",
        "SECRET_KEY",
        "SECRET_KEY_FALLBACKS",
        "SESSION_COOKIE_NAME",
        "STATIC_URL",
        "MEDIA_URL",
    }
)


@receiver(setting_changed, dispatch_uid="whos_online.config.settings.reset")
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in _READ_SETTINGS:
        reset()


def reset() -> None:
    """Forget the config, and the process's state made under it (its queue, clients, memory)."""
    _config.cache_clear()
    _config_under_tests.cache_clear()
    process.reset_home()
    config_changed.send(sender=Config)
