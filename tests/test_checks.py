from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.core import checks as django_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django_redis.cache import RedisCache

from whos_online import checks
from whos_online.middleware import WhosOnlineMiddleware

if TYPE_CHECKING:
    from django.core.checks import CheckMessage

SESSION = "django.contrib.sessions.middleware.SessionMiddleware"
AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"
OURS = "whos_online.middleware.WhosOnlineMiddleware"
COMMON = "django.middleware.common.CommonMiddleware"

#: Not callable, for HIDE_USER / DISPLAY_NAME.
NOT_CALLABLE = "just a string"


class MyAuthenticationMiddleware(AuthenticationMiddleware):
    """A project's own authentication middleware, as admin's checks also accept."""


class MyWhosOnlineMiddleware(WhosOnlineMiddleware):
    """A project's own extension of the middleware."""


MINE = "tests.test_checks.MyWhosOnlineMiddleware"


class InstrumentedRedisCache(RedisCache):  # type: ignore[misc]
    """A project's django-redis cache with extras; get_redis_connection() works with it."""


def hide_nobody(user: Any) -> bool:
    return False


def check_messages() -> list[CheckMessage]:
    return [*checks.check_settings(), *checks.check_middleware()]


def check_error_codes() -> list[str]:
    return [message.id for message in check_messages() if message.id is not None]


def test_clean_default_config_gives_no_messages():
    assert check_messages() == []


def test_full_valid_config_gives_no_messages(settings):
    settings.WHOS_ONLINE = {
        "REDIS_ALIAS": "default",
        "REDIS_URL": None,
        "KEY_PREFIX": "site-a",
        "WINDOW": 300,
        "THROTTLE": 0,
        "TRACK_GUESTS": False,
        "GUEST_IDENTITY": "hashed-ip",
        "TRUSTED_PROXY_COUNT": 20,
        "IGNORE_PATHS": (r"^/healthz$", r"^/static/"),
        "BOT_USER_AGENTS": None,
        "HIDE_USER": "tests.test_checks.hide_nobody",
        "DISPLAY_NAME": hide_nobody,
        "DISPLAY_LIMIT": 0,
        "COUNTER_PRECISIONS": (60, 1),
        "COUNTER_SAMPLES": 1,
        "FAILURE_BACKOFF": 0.5,
        "LAST_SEEN_DAYS": 1,
        "COUNT_HITS": True,
        "SHOW_NAMES_TO": "tests.test_checks.hide_nobody",
        "REFRESH_INTERVAL": 1,
        "JSON_MAX_AGE": 0,
    }
    assert check_messages() == []


@pytest.mark.parametrize("value", [["WINDOW", 600], "WINDOW=600", 600])
def test_e001_not_a_dict(settings, value):
    settings.WHOS_ONLINE = value
    assert check_error_codes() == ["whos_online.E001"]


def test_none_setting_counts_as_empty(settings):
    settings.WHOS_ONLINE = None
    assert check_error_codes() == []


def test_e002_alias_missing(settings):
    settings.WHOS_ONLINE = {"REDIS_ALIAS": "sessions"}
    assert check_error_codes() == ["whos_online.E002"]


def test_e002_alias_not_a_string(settings):
    settings.WHOS_ONLINE = {"REDIS_ALIAS": 0}
    assert check_error_codes() == ["whos_online.E002"]


def test_e002_alias_with_another_backend(settings):
    settings.CACHES = {
        **settings.CACHES,
        "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    settings.WHOS_ONLINE = {"REDIS_ALIAS": "local"}
    assert check_error_codes() == ["whos_online.E002"]
    assert "LocMemCache" in check_messages()[0].msg


def test_e002_default_cache_with_django_builtin_redis_backend(settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:6379",
        }
    }
    assert check_error_codes() == ["whos_online.E002"]


def test_no_e002_when_redis_url_is_set(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.WHOS_ONLINE = {"REDIS_ALIAS": "missing", "REDIS_URL": "redis://127.0.0.1:6379/0"}
    assert check_error_codes() == []


def test_alias_with_a_django_redis_subclass_is_accepted(settings):
    settings.CACHES = {
        **settings.CACHES,
        "instrumented": {
            **settings.CACHES["default"],
            "BACKEND": "tests.test_checks.InstrumentedRedisCache",
        },
    }
    settings.WHOS_ONLINE = {"REDIS_ALIAS": "instrumented"}
    assert check_error_codes() == []


@pytest.mark.parametrize(
    "value",
    ["http://127.0.0.1:6379/0", "127.0.0.1:6379", "localhost", 6379, b"redis://x"],
)
def test_e003_bad_redis_url(settings, value):
    settings.WHOS_ONLINE = {"REDIS_URL": value}
    assert check_error_codes() == ["whos_online.E003"]


@pytest.mark.parametrize(
    "value",
    ["redis://127.0.0.1:6379/0", "rediss://:pw@cache.internal:6380/1", "unix:///run/redis.sock"],
)
def test_redis_url_schemes_accepted(settings, value):
    settings.WHOS_ONLINE = {"REDIS_URL": value}
    assert check_error_codes() == []


@pytest.mark.parametrize("value", ["", "{app}", "a{b", "a}b", "my app", "a\nb", 5, None])
def test_e004_bad_key_prefix(settings, value):
    settings.WHOS_ONLINE = {"KEY_PREFIX": value}
    assert check_error_codes() == ["whos_online.E004"]


@pytest.mark.parametrize("value", [0, -1, True, "600", 600.0, None])
def test_e005_bad_window(settings, value):
    settings.WHOS_ONLINE = {"WINDOW": value}
    assert check_error_codes() == ["whos_online.E005"]


@pytest.mark.parametrize(
    "overrides",
    [
        {"THROTTLE": -1},
        {"THROTTLE": "120"},
        {"THROTTLE": True},
        {"THROTTLE": 1.5},
        {"THROTTLE": 600},
        {"THROTTLE": 601},
        {"THROTTLE": 60, "WINDOW": 60},
        {"THROTTLE": 61, "WINDOW": 60},
    ],
)
def test_e006_bad_throttle(settings, overrides):
    settings.WHOS_ONLINE = overrides
    assert check_error_codes() == ["whos_online.E006"]


@pytest.mark.parametrize(
    "overrides", [{"THROTTLE": 0}, {"THROTTLE": 599}, {"THROTTLE": 59, "WINDOW": 60}]
)
def test_throttle_below_window_accepted(settings, overrides):
    settings.WHOS_ONLINE = overrides
    assert check_error_codes() == []


def test_e006_message_names_both_values(settings):
    settings.WHOS_ONLINE = {"THROTTLE": 60, "WINDOW": 60}
    [message] = check_messages()
    assert message.msg == "WHOS_ONLINE['THROTTLE'] (60) must be smaller than WINDOW (60)."


@pytest.mark.parametrize(
    ("key", "code"), [("TRACK_GUESTS", "whos_online.E007"), ("COUNT_HITS", "whos_online.E019")]
)
@pytest.mark.parametrize("value", [1, 0, "yes", "False", None])
def test_e007_e019_not_a_bool(settings, key, code, value):
    settings.WHOS_ONLINE = {key: value}
    assert check_error_codes() == [code]


@pytest.mark.parametrize("value", ["sha256", "", "IP", None])
def test_e008_unknown_guest_identity(settings, value):
    settings.WHOS_ONLINE = {"GUEST_IDENTITY": value}
    assert check_error_codes() == ["whos_online.E008"]


def test_w002_raw_ip_identity_is_a_privacy_warning(settings):
    settings.WHOS_ONLINE = {"GUEST_IDENTITY": "ip"}
    [message] = check_messages()
    assert message.id == "whos_online.W002"
    assert message.level == django_checks.WARNING
    assert not message.is_serious()
    assert "personal data" in (message.hint or "")


@pytest.mark.parametrize("value", [-1, 21, 100, True, "1", 1.0, None])
def test_e009_bad_trusted_proxy_count(settings, value):
    settings.WHOS_ONLINE = {"TRUSTED_PROXY_COUNT": value}
    assert check_error_codes() == ["whos_online.E009"]


@pytest.mark.parametrize("value", [0, 1, 20])
def test_trusted_proxy_count_bounds_accepted(settings, value):
    settings.WHOS_ONLINE = {"TRUSTED_PROXY_COUNT": value}
    assert check_error_codes() == []


@pytest.mark.parametrize(
    "value", ["^/static/", {"^/static/": True}, 5, ["(unclosed"], ["^/ok$", 7], [None]]
)
def test_e010_bad_ignore_paths(settings, value):
    settings.WHOS_ONLINE = {"IGNORE_PATHS": value}
    assert check_error_codes() == ["whos_online.E010"]


def test_e010_reports_each_bad_pattern(settings):
    settings.WHOS_ONLINE = {"IGNORE_PATHS": ["^/ok$", "(", "[", 3]}
    assert check_error_codes() == ["whos_online.E010"] * 3


@pytest.mark.parametrize("value", ["(unclosed", "*bot", 5, ["bot"]])
def test_e011_bad_bot_user_agents(settings, value):
    settings.WHOS_ONLINE = {"BOT_USER_AGENTS": value}
    assert check_error_codes() == ["whos_online.E011"]


@pytest.mark.parametrize("value", [None, "", r"(?i)crawler|spider"])
def test_bot_user_agents_accepted(settings, value):
    settings.WHOS_ONLINE = {"BOT_USER_AGENTS": value}
    assert check_error_codes() == []


@pytest.mark.parametrize(
    ("key", "code"), [("HIDE_USER", "whos_online.E012"), ("DISPLAY_NAME", "whos_online.E013")]
)
@pytest.mark.parametrize(
    "value",
    [
        "tests.test_checks.no_such_function",
        "tests.no_such_module.function",
        "nodots",
        "tests.test_checks.NOT_CALLABLE",
        5,
        ["tests.test_checks.hide_nobody"],
    ],
)
def test_e012_e013_bad_callable(settings, key, code, value):
    settings.WHOS_ONLINE = {key: value}
    assert check_error_codes() == [code]


@pytest.mark.parametrize("key", ["HIDE_USER", "DISPLAY_NAME"])
@pytest.mark.parametrize("value", ["tests.test_checks.hide_nobody", hide_nobody, None])
def test_callables_accepted(settings, key, value):
    settings.WHOS_ONLINE = {key: value}
    assert check_error_codes() == []


@pytest.mark.parametrize(
    ("key", "code", "below_minimum"),
    [
        ("DISPLAY_LIMIT", "whos_online.E014", -1),
        ("COUNTER_SAMPLES", "whos_online.E016", 0),
        ("LAST_SEEN_DAYS", "whos_online.E018", 0),
        ("REFRESH_INTERVAL", "whos_online.E023", 0),
        ("JSON_MAX_AGE", "whos_online.E024", -1),
    ],
)
@pytest.mark.parametrize("kind", ["below-minimum", "string", "bool", "float", "none"])
def test_bad_integer(settings, key, code, below_minimum, kind):
    value = {
        "below-minimum": below_minimum,
        "string": "10",
        "bool": True,
        "float": 10.0,
        "none": None,
    }[kind]
    settings.WHOS_ONLINE = {key: value}
    assert check_error_codes() == [code]


@pytest.mark.parametrize(
    ("key", "minimum"),
    [
        ("DISPLAY_LIMIT", 0),
        ("COUNTER_SAMPLES", 1),
        ("LAST_SEEN_DAYS", 1),
        ("REFRESH_INTERVAL", 1),
        ("JSON_MAX_AGE", 0),
    ],
)
def test_integer_minimum_accepted(settings, key, minimum):
    settings.WHOS_ONLINE = {key: minimum}
    # (A one-second REFRESH_INTERVAL is valid, and warned about beside the default JSON_MAX_AGE.)
    assert [code for code in check_error_codes() if code != "whos_online.W004"] == []


@pytest.mark.parametrize(
    "value", [[], (), [0], [1, -5], [60, 60], [1, "5"], [True], [1.0], "60", 60, None, {1: 1}]
)
def test_e015_bad_counter_precisions(settings, value):
    settings.WHOS_ONLINE = {"COUNTER_PRECISIONS": value}
    assert check_error_codes() == ["whos_online.E015"]


@pytest.mark.parametrize("value", [-1, -0.5, "10", True, None, [10]])
def test_e017_bad_failure_backoff(settings, value):
    settings.WHOS_ONLINE = {"FAILURE_BACKOFF": value}
    assert check_error_codes() == ["whos_online.E017"]


@pytest.mark.parametrize("value", [0, 0.5, 10, 3600.0])
def test_failure_backoff_accepted(settings, value):
    settings.WHOS_ONLINE = {"FAILURE_BACKOFF": value}
    assert check_error_codes() == []


@pytest.mark.parametrize(
    "value",
    [
        "admins",
        "Staff",
        "",
        None,
        5,
        "tests.test_checks.NOT_CALLABLE",
        "tests.test_checks.no_such_function",
        ["staff"],
    ],
)
def test_e022_bad_show_names_to(settings, value):
    settings.WHOS_ONLINE = {"SHOW_NAMES_TO": value}
    assert check_error_codes() == ["whos_online.E022"]


@pytest.mark.parametrize(
    "value", ["staff", "authenticated", "everyone", "tests.test_checks.hide_nobody", hide_nobody]
)
def test_show_names_to_accepted(settings, value):
    settings.WHOS_ONLINE = {"SHOW_NAMES_TO": value}
    assert check_error_codes() == []


def test_w001_unknown_key(settings):
    settings.WHOS_ONLINE = {"WINDOWS": 600, "TROTTLE": 5}
    [message] = check_messages()
    assert message.id == "whos_online.W001"
    assert message.level == django_checks.WARNING
    assert message.msg == "WHOS_ONLINE has unknown keys: TROTTLE, WINDOWS."
    assert "WINDOW" in (message.hint or "")


def test_w001_non_string_key(settings):
    settings.WHOS_ONLINE = {1: "x"}
    assert check_error_codes() == ["whos_online.W001"]


def test_all_problems_are_reported_at_once(settings):
    settings.WHOS_ONLINE = {
        "WINDOW": 0,
        "KEY_PREFIX": "",
        "COUNT_HITS": "yes",
        "DISPLAY_LIMIT": -1,
        "EXTRA": 1,
    }
    assert sorted(check_error_codes()) == [
        "whos_online.E004",
        "whos_online.E005",
        "whos_online.E014",
        "whos_online.E019",
        "whos_online.W001",
    ]


@pytest.mark.parametrize("middleware", [[SESSION, AUTH], [], None])
def test_w003_middleware_missing(settings, middleware):
    settings.MIDDLEWARE = middleware
    assert check_error_codes() == ["whos_online.W003"]


def test_e020_listed_twice(settings):
    settings.MIDDLEWARE = [SESSION, AUTH, OURS, COMMON, OURS]
    assert check_error_codes() == ["whos_online.E020"]


def test_e021_before_authentication_middleware(settings):
    settings.MIDDLEWARE = [SESSION, OURS, AUTH]
    assert check_error_codes() == ["whos_online.E021"]


def test_e021_authentication_middleware_missing(settings):
    settings.MIDDLEWARE = [SESSION, COMMON, OURS]
    assert check_error_codes() == ["whos_online.E021"]


def test_subclass_of_authentication_middleware_counts(settings):
    settings.MIDDLEWARE = [SESSION, "tests.test_checks.MyAuthenticationMiddleware", OURS]
    assert check_error_codes() == []


def test_a_subclass_of_ours_counts(settings):
    settings.MIDDLEWARE = [SESSION, AUTH, MINE]
    assert check_error_codes() == []


def test_e020_ours_and_a_subclass_of_it(settings):
    settings.MIDDLEWARE = [SESSION, AUTH, OURS, MINE]
    assert check_error_codes() == ["whos_online.E020"]


def test_e021_a_subclass_of_ours_before_authentication_middleware(settings):
    settings.MIDDLEWARE = [SESSION, MINE, AUTH]
    assert check_error_codes() == ["whos_online.E021"]


def test_e021_subclass_of_authentication_middleware_after_ours(settings):
    settings.MIDDLEWARE = [SESSION, OURS, "tests.test_checks.MyAuthenticationMiddleware"]
    assert check_error_codes() == ["whos_online.E021"]


def test_middleware_order_with_others_in_between(settings):
    settings.MIDDLEWARE = [SESSION, AUTH, COMMON, OURS]
    assert check_error_codes() == []


def test_unimportable_middleware_entry_does_not_break_the_check(settings):
    settings.MIDDLEWARE = ["no.such.Middleware", SESSION, AUTH, OURS]
    assert check_error_codes() == []


#: One case per message id: (WHOS_ONLINE, MIDDLEWARE or None for the default, id, named key).
EVERY_MESSAGE = [
    (["x"], None, "whos_online.E001", "WHOS_ONLINE"),
    ({"REDIS_ALIAS": "nope"}, None, "whos_online.E002", "REDIS_ALIAS"),
    ({"REDIS_URL": "http://x"}, None, "whos_online.E003", "REDIS_URL"),
    ({"KEY_PREFIX": "a b"}, None, "whos_online.E004", "KEY_PREFIX"),
    ({"WINDOW": 0}, None, "whos_online.E005", "WINDOW"),
    ({"THROTTLE": -1}, None, "whos_online.E006", "THROTTLE"),
    ({"THROTTLE": 600}, None, "whos_online.E006", "THROTTLE"),
    ({"TRACK_GUESTS": 1}, None, "whos_online.E007", "TRACK_GUESTS"),
    ({"GUEST_IDENTITY": "md5"}, None, "whos_online.E008", "GUEST_IDENTITY"),
    ({"TRUSTED_PROXY_COUNT": 21}, None, "whos_online.E009", "TRUSTED_PROXY_COUNT"),
    ({"IGNORE_PATHS": "^/x"}, None, "whos_online.E010", "IGNORE_PATHS"),
    ({"IGNORE_PATHS": ["("]}, None, "whos_online.E010", "IGNORE_PATHS"),
    ({"BOT_USER_AGENTS": "("}, None, "whos_online.E011", "BOT_USER_AGENTS"),
    ({"HIDE_USER": "tests.nope.f"}, None, "whos_online.E012", "HIDE_USER"),
    ({"DISPLAY_NAME": 3}, None, "whos_online.E013", "DISPLAY_NAME"),
    ({"DISPLAY_LIMIT": -1}, None, "whos_online.E014", "DISPLAY_LIMIT"),
    ({"COUNTER_PRECISIONS": []}, None, "whos_online.E015", "COUNTER_PRECISIONS"),
    ({"COUNTER_SAMPLES": 0}, None, "whos_online.E016", "COUNTER_SAMPLES"),
    ({"FAILURE_BACKOFF": -1}, None, "whos_online.E017", "FAILURE_BACKOFF"),
    ({"LAST_SEEN_DAYS": 0}, None, "whos_online.E018", "LAST_SEEN_DAYS"),
    ({"COUNT_HITS": "no"}, None, "whos_online.E019", "COUNT_HITS"),
    ({"SHOW_NAMES_TO": "admins"}, None, "whos_online.E022", "SHOW_NAMES_TO"),
    ({"SHOW_NAMES_TO": None}, None, "whos_online.E022", "SHOW_NAMES_TO"),
    ({"REFRESH_INTERVAL": 0}, None, "whos_online.E023", "REFRESH_INTERVAL"),
    ({"JSON_MAX_AGE": -1}, None, "whos_online.E024", "JSON_MAX_AGE"),
    ({"STOP_TIMEOUT": 31}, None, "whos_online.E040", "STOP_TIMEOUT"),
    ({"LEAVE_GRACE": -1}, None, "whos_online.E041", "LEAVE_GRACE"),
    ({"NOPE": 1}, None, "whos_online.W001", "NOPE"),
    ({"GUEST_IDENTITY": "ip"}, None, "whos_online.W002", "GUEST_IDENTITY"),
    ({}, [SESSION, AUTH], "whos_online.W003", OURS),
    ({"JSON_MAX_AGE": 30}, None, "whos_online.W004", "JSON_MAX_AGE"),
    ({}, [SESSION, AUTH, OURS, OURS], "whos_online.E020", OURS),
    ({}, [SESSION, OURS, AUTH], "whos_online.E021", AUTH),
]


@pytest.mark.parametrize(
    ("whos_online", "middleware", "code", "key"),
    EVERY_MESSAGE,
    ids=[f"{case[2]}-{case[3]}" for case in EVERY_MESSAGE],
)
def test_every_message_has_a_hint_and_names_the_key(settings, whos_online, middleware, code, key):
    settings.WHOS_ONLINE = whos_online
    if middleware is not None:
        settings.MIDDLEWARE = middleware
    [message] = check_messages()
    assert message.id == code
    assert key in message.msg
    assert message.hint
    assert message.hint.strip() == message.hint
    assert message.msg.endswith(".")


def test_every_id_is_covered_by_the_table():
    codes = {case[2] for case in EVERY_MESSAGE}
    assert codes == {f"whos_online.E{n:03d}" for n in range(1, 25)} | {
        "whos_online.E040",
        "whos_online.E041",
        "whos_online.W001",
        "whos_online.W002",
        "whos_online.W003",
        "whos_online.W004",
    }


@pytest.mark.parametrize(
    ("refresh", "max_age", "warned"),
    [(30, 10, False), (30, 29, False), (30, 30, True), (5, 10, True), (1, 0, False)],
)
def test_w004_json_max_age_not_below_the_refresh_interval(settings, refresh, max_age, warned):
    settings.WHOS_ONLINE = {"REFRESH_INTERVAL": refresh, "JSON_MAX_AGE": max_age}
    assert check_error_codes() == (["whos_online.W004"] if warned else [])


def test_w004_is_not_added_to_an_error_of_either_setting(settings):
    settings.WHOS_ONLINE = {"REFRESH_INTERVAL": 0, "JSON_MAX_AGE": 5}
    assert check_error_codes() == ["whos_online.E023"]


def test_check_command_fails_on_an_error(settings):
    settings.WHOS_ONLINE = {"WINDOW": 0}
    with pytest.raises(SystemCheckError, match=r"whos_online\.E005"):
        call_command("check")


def test_check_command_fails_on_a_middleware_error(settings):
    settings.MIDDLEWARE = [SESSION, OURS, AUTH]
    with pytest.raises(SystemCheckError, match=r"whos_online\.E021"):
        call_command("check")


def test_check_command_shows_warnings_without_failing(settings):
    settings.WHOS_ONLINE = {"GUEST_IDENTITY": "ip"}
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command("check", stdout=stdout, stderr=stderr)
    assert "whos_online.W002" in stderr.getvalue()


def test_check_command_passes_on_a_clean_config():
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command("check", stdout=stdout, stderr=stderr)
    assert "no issues" in stdout.getvalue()
    assert "whos_online" not in stderr.getvalue()


def test_checks_are_registered(settings):
    settings.WHOS_ONLINE = {"WINDOW": 0}
    settings.MIDDLEWARE = [SESSION, AUTH]
    ids = {message.id for message in django_checks.run_checks()}
    assert {"whos_online.E005", "whos_online.W003"} <= ids
    tagged = {message.id for message in django_checks.run_checks(tags=["compatibility"])}
    assert {"whos_online.E005", "whos_online.W003"} <= tagged


def test_empty_redis_url_counts_as_unset(settings):
    settings.WHOS_ONLINE = {"REDIS_URL": ""}
    assert checks.check_settings() == []


def test_a_callable_whose_module_fails_to_import_is_reported(settings, tmp_path, monkeypatch):
    (tmp_path / "broken_online_hook.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.WHOS_ONLINE = {"HIDE_USER": "broken_online_hook.hide"}
    [message] = checks.check_settings()
    assert message.id == "whos_online.E012"
    assert "boom" in message.msg


@pytest.mark.parametrize("value", [0, 129, -64, True, "64", 64.0, None])
def test_guest_ipv6_prefix_must_be_an_integer_from_1_to_128(settings, value):
    settings.WHOS_ONLINE = {"GUEST_IPV6_PREFIX": value}
    assert check_error_codes() == ["whos_online.E028"]


@pytest.mark.parametrize("value", [1, 48, 56, 64, 128])
def test_guest_ipv6_prefix_accepted(settings, value):
    settings.WHOS_ONLINE = {"GUEST_IPV6_PREFIX": value}
    assert check_error_codes() == []


# Scaling out


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_redis_cluster_must_be_a_bool(settings, value):
    settings.WHOS_ONLINE = {"REDIS_CLUSTER": value}
    assert check_error_codes() == ["whos_online.E025"]


@pytest.mark.parametrize(
    "url",
    [None, "unix:///run/redis.sock", "redis://10.0.0.5:7000/3", "http://10.0.0.5:7000"],
)
def test_redis_cluster_needs_the_url_of_a_node(settings, url):
    settings.WHOS_ONLINE = {"REDIS_CLUSTER": True, "REDIS_URL": url}
    assert "whos_online.E025" in check_error_codes()


@pytest.mark.parametrize(
    "url", ["redis://10.0.0.5:7000", "redis://10.0.0.5:7000/0", "rediss://:pw@node-1:6380/"]
)
def test_redis_cluster_takes_a_node_url(settings, url):
    settings.WHOS_ONLINE = {"REDIS_CLUSTER": True, "REDIS_URL": url}
    assert check_error_codes() == []


@pytest.mark.parametrize("value", [0, -1, 129, True, "4", 4.0, None])
def test_shards_must_be_an_integer_from_1_to_128(settings, value):
    settings.WHOS_ONLINE = {"SHARDS": value}
    assert check_error_codes() == ["whos_online.E026"]


@pytest.mark.parametrize("value", [1, 3, 128])
def test_shards_accepted(settings, value):
    settings.WHOS_ONLINE = {"SHARDS": value}
    assert check_error_codes() == []


@pytest.mark.parametrize("value", [-1, -0.5, True, "2", None])
def test_snapshot_max_age_must_be_a_non_negative_number(settings, value):
    settings.WHOS_ONLINE = {"SNAPSHOT_MAX_AGE": value}
    assert check_error_codes() == ["whos_online.E027"]


@pytest.mark.parametrize("value", [0, 0.5, 2, 30.0])
def test_snapshot_max_age_accepted(settings, value):
    settings.WHOS_ONLINE = {"SNAPSHOT_MAX_AGE": value}
    assert check_error_codes() == []


@pytest.mark.parametrize("value", [-1, -0.5, 30.5, True, "5", None])
def test_stop_timeout_must_be_a_number_of_seconds_up_to_thirty(settings, value):
    settings.WHOS_ONLINE = {"STOP_TIMEOUT": value}
    assert check_error_codes() == ["whos_online.E040"]


@pytest.mark.parametrize("value", [0, 0.5, 5, 30.0])
def test_stop_timeout_accepted(settings, value):
    settings.WHOS_ONLINE = {"STOP_TIMEOUT": value}
    assert check_error_codes() == []


@pytest.mark.parametrize("value", [-1, 60.5, True, "5", None])
def test_leave_grace_must_be_a_number_of_seconds_up_to_a_minute(settings, value):
    settings.WHOS_ONLINE = {"LEAVE_GRACE": value}
    assert check_error_codes() == ["whos_online.E041"]


@pytest.mark.parametrize("value", [0, 0.5, 5, 60.0])
def test_leave_grace_accepted(settings, value):
    settings.WHOS_ONLINE = {"LEAVE_GRACE": value}
    assert check_error_codes() == []


# Deploy checks: a database of its own (W006), and Redis within reach (W007)


def redis_cache(location: str | list[str], backend: str = "django_redis.cache.RedisCache"):
    return {"BACKEND": backend, "LOCATION": location}


def deploy_check_ids() -> list[str]:
    return [
        message.id
        for message in django_checks.run_checks(include_deployment_checks=True)
        if message.id in {"whos_online.W006", "whos_online.W007"}
    ]


def test_w006_the_default_alias_shares_the_sites_cache():
    """The default settings: whos_online's data in the default cache's database."""
    [warning] = checks.check_own_database()

    assert warning.id == "whos_online.W006"
    assert "'default'" in warning.msg
    assert "clear()" in warning.msg
    assert "peak, counter history and last-seen records" in warning.msg
    assert "REDIS_ALIAS" in str(warning.hint)
    assert "redis://host:6379/1" in str(warning.hint)


def test_w006_an_alias_of_its_own_on_another_database_is_fine(settings):
    settings.CACHES = {
        "default": redis_cache("redis://cache.internal:6379/0"),
        "whos_online": redis_cache("redis://cache.internal:6379/1"),
    }
    settings.WHOS_ONLINE = {"REDIS_ALIAS": "whos_online"}

    assert checks.check_own_database() == []


@pytest.mark.parametrize(
    "location",
    [
        "redis://cache.internal:6379/0",
        "redis://cache.internal",  # port 6379 and database 0 by default
        "redis://user:secret@cache.internal:6379?db=0",
        ["redis://other.internal:6379/0", "redis://cache.internal:6379/0"],
    ],
)
def test_w006_an_alias_of_its_own_on_the_same_database_as_another_cache(settings, location):
    settings.CACHES = {
        "default": redis_cache(location),
        "whos_online": redis_cache("redis://cache.internal:6379/0"),
    }
    settings.WHOS_ONLINE = {"REDIS_ALIAS": "whos_online"}

    [warning] = checks.check_own_database()

    assert warning.id == "whos_online.W006"
    assert "'default'" in warning.msg
    assert "'whos_online'" not in warning.msg


@pytest.mark.parametrize(
    ("url", "location", "shared"),
    [
        ("redis://cache.internal:6379/0", "redis://cache.internal:6379/0", True),
        ("redis://cache.internal:6379", "redis://cache.internal:6379/0", True),
        ("redis://localhost:6379/2", "redis://127.0.0.1:6379/2", True),
        ("rediss://:pw@cache.internal:6380/3", "rediss://cache.internal:6380?db=3", True),
        ("unix:///run/redis.sock?db=1", "unix:///run/redis.sock?db=1", True),
        ("redis://cache.internal:6379/1", "redis://cache.internal:6379/0", False),
        ("redis://cache.internal:6380/0", "redis://cache.internal:6379/0", False),
        ("redis://sessions.internal:6379/0", "redis://cache.internal:6379/0", False),
        ("unix:///run/redis.sock?db=1", "unix:///run/redis.sock", False),
    ],
)
def test_w006_a_redis_url_on_the_database_of_a_cache(settings, url, location, shared):
    settings.CACHES = {"default": redis_cache(location)}
    settings.WHOS_ONLINE = {"REDIS_URL": url}

    assert [message.id for message in checks.check_own_database()] == (
        ["whos_online.W006"] if shared else []
    )


def test_w006_djangos_own_redis_cache_empties_its_database_too(settings):
    backend = "django.core.cache.backends.redis.RedisCache"
    settings.CACHES = {"default": redis_cache("redis://cache.internal:6379/0", backend)}
    settings.WHOS_ONLINE = {"REDIS_URL": "redis://cache.internal:6379/0"}

    [warning] = checks.check_own_database()

    assert warning.id == "whos_online.W006"


def test_w006_caches_that_are_not_redis_share_nothing(settings):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "files": {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache"},
    }
    settings.WHOS_ONLINE = {"REDIS_URL": "redis://cache.internal:6379/0"}

    assert checks.check_own_database() == []


def test_w006_says_nothing_about_settings_with_errors(settings):
    settings.WHOS_ONLINE = {"REDIS_ALIAS": "missing"}

    assert checks.check_own_database() == []


def test_w007_redis_within_reach_gives_no_warning(backend):
    assert checks.check_redis_reachable() == []


def test_w007_nothing_listening(redis_down):
    [warning] = checks.check_redis_reachable()

    assert warning.id == "whos_online.W007"
    assert redis_down in warning.msg
    assert "ConnectionError" in warning.msg
    assert "REDIS_URL" in str(warning.hint)


def test_w007_a_server_that_never_answers_costs_the_request_timeout(settings):
    """A socket that accepts connections and never replies, as a frozen Redis does."""
    import socket
    import time

    from whos_online.backend.clients import REQUEST_TIMEOUT

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        settings.WHOS_ONLINE = {"REDIS_URL": url}
        started = time.monotonic()
        [warning] = checks.check_redis_reachable()
        took = time.monotonic() - started

    assert warning.id == "whos_online.W007"
    assert "Timeout" in warning.msg
    assert REQUEST_TIMEOUT <= took < REQUEST_TIMEOUT + 0.5


def test_w007_says_nothing_about_settings_with_errors(settings):
    settings.WHOS_ONLINE = {"REDIS_URL": "http://x"}

    assert checks.check_redis_reachable() == []


def test_w006_and_w007_are_deploy_checks(settings, redis_down):
    from django.core.checks import registry

    assert deploy_check_ids() == ["whos_online.W007"]  # its own database, out of reach
    settings.WHOS_ONLINE = {}
    assert deploy_check_ids() == ["whos_online.W006"]  # the default cache's, within reach
    found = registry.registry.get_checks(include_deployment_checks=False)
    names = {getattr(check, "__name__", "") for check in found}
    assert not {"check_own_database", "check_redis_reachable"} & names
