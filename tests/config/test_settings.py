from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings

from whos_online.config.rules import DEFAULT_BOT_USER_AGENTS, is_authenticated, is_staff
from whos_online.config.settings import DEFAULTS, get_config, reset
from whos_online.middleware import WhosOnlineMiddleware

if TYPE_CHECKING:
    from whos_online.config.settings import Config

#: The settings table of the product's contract, key by key, then those of the views (README),
#: then those of scaling out.
DOCUMENTED_DEFAULTS: dict[str, Any] = {
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
    "LIVE_UPDATES": True,
    "JSON_MAX_AGE": 10,
    "MAX_STREAMS": None,
    "MAX_STREAMS_PER_CLIENT": 8,
    "MAX_STREAMS_PER_ADDRESS": 64,
    "SHARDS": 1,
    "SNAPSHOT_MAX_AGE": 2,
    "FLUSH_INTERVAL": 0.1,
    "STOP_TIMEOUT": 5,
    "LEAVE_GRACE": 5,
    "ROOMS": {},
    "ROOM_ACCESS": None,
    "ROOM_TOKEN_MAX_AGE": 3600,
    "ISOLATE_TESTS": True,
}

#: The prefix a process under tests writes under by default (``config.process``).
TEST_PREFIX = re.compile(r"test_whos_online_[0-9a-f]{8}")


def hide_staff(user: Any) -> bool:
    return bool(getattr(user, "is_staff", False))


def shout_name(user: Any) -> str:
    return str(user.get_username()).upper()


def ignored(config: Config, path: str) -> bool:
    return any(pattern.search(path) for pattern in config.ignore_paths)


def ok_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def test_defaults_cover_exactly_the_spec_keys():
    assert dict(DEFAULTS) == DOCUMENTED_DEFAULTS


def test_get_config_defaults_match_spec(settings):
    del settings.WHOS_ONLINE
    reset()  # deleting a setting sends no setting_changed
    config = get_config()
    assert config.redis_alias == "default"
    assert config.redis_url is None
    # KEY_PREFIX's default, "whos_online", under a test process's own prefix (ISOLATE_TESTS).
    assert TEST_PREFIX.fullmatch(config.key_prefix)
    assert config.isolate_tests is True
    assert config.window == 600
    assert config.throttle == 120
    assert config.track_guests is True
    assert config.guest_identity == "hashed-ip"
    assert config.trusted_proxy_count == 0
    assert config.bot_user_agents is not None
    assert config.bot_user_agents.pattern == DEFAULT_BOT_USER_AGENTS
    assert config.hide_user is None
    assert config.display_name is None
    assert config.display_limit == 50
    assert config.counter_precisions == (1, 5, 60, 300, 3600, 18000, 86400)
    assert config.counter_samples == 120
    assert config.failure_backoff == 10.0
    assert config.last_seen_days == 90
    assert config.count_hits is False
    assert config.show_names_to is is_staff
    assert config.refresh_interval == 30
    assert config.json_max_age == 10
    assert config.redis_target == "cache alias 'default'"


@pytest.mark.parametrize("empty", [{}, None])
def test_empty_or_none_setting_means_defaults(settings, empty):
    settings.WHOS_ONLINE = empty
    config = get_config()
    assert config.window == 600
    assert config.throttle == 120
    assert TEST_PREFIX.fullmatch(config.key_prefix)


def test_user_values_are_merged_over_defaults(settings):
    settings.WHOS_ONLINE = {
        "WINDOW": 300,
        "KEY_PREFIX": "site-a",
        "COUNT_HITS": True,
        "COUNTER_PRECISIONS": [3600, 60],
        "ISOLATE_TESTS": False,
    }
    config = get_config()
    assert config.window == 300
    assert config.key_prefix == "site-a"
    assert config.isolate_tests is False
    assert config.count_hits is True
    assert config.counter_precisions == (60, 3600)
    # Keys left out keep their defaults.
    assert config.throttle == 120
    assert config.display_limit == 50
    assert config.guest_identity == "hashed-ip"


def test_config_is_cached_until_settings_change(settings):
    settings.WHOS_ONLINE = {"WINDOW": 300}
    first = get_config()
    assert get_config() is first
    settings.WHOS_ONLINE = {"WINDOW": 400}
    assert get_config() is not first
    assert get_config().window == 400


def test_settings_fixture_change_is_seen_at_once(settings):
    settings.WHOS_ONLINE = {"THROTTLE": 0}
    assert get_config().throttle == 0
    settings.WHOS_ONLINE = {"THROTTLE": 30}
    assert get_config().throttle == 30


def test_override_settings_is_seen_at_once_and_undone():
    assert get_config().display_limit == 50
    with override_settings(WHOS_ONLINE={"DISPLAY_LIMIT": 5}):
        assert get_config().display_limit == 5
    assert get_config().display_limit == 50


@pytest.mark.parametrize(
    ("overrides", "code", "key"),
    [
        ({"WINDOW": 0}, "whos_online.E005", "WINDOW"),
        ({"THROTTLE": 600}, "whos_online.E006", "THROTTLE"),
        ({"KEY_PREFIX": "{x}"}, "whos_online.E004", "KEY_PREFIX"),
        ({"REDIS_ALIAS": "missing"}, "whos_online.E002", "REDIS_ALIAS"),
        (
            {"HIDE_USER": "tests.config.test_settings.no_such_function"},
            "whos_online.E012",
            "HIDE_USER",
        ),
        ({"IGNORE_PATHS": ["("]}, "whos_online.E010", "IGNORE_PATHS"),
        ({"MAX_STREAMS": 0}, "whos_online.E037", "MAX_STREAMS"),
        ({"MAX_STREAMS_PER_CLIENT": "8"}, "whos_online.E038", "MAX_STREAMS_PER_CLIENT"),
        ({"MAX_STREAMS_PER_ADDRESS": True}, "whos_online.E039", "MAX_STREAMS_PER_ADDRESS"),
    ],
)
def test_invalid_setting_raises_improperly_configured_naming_the_key(
    settings, overrides, code, key
):
    settings.WHOS_ONLINE = overrides
    with pytest.raises(ImproperlyConfigured) as excinfo:
        get_config()
    assert code in str(excinfo.value)
    assert f"WHOS_ONLINE[{key!r}]" in str(excinfo.value)


def test_the_caps_of_live_streams_may_be_none(settings):
    settings.WHOS_ONLINE = {
        "MAX_STREAMS": 500,
        "MAX_STREAMS_PER_CLIENT": None,
        "MAX_STREAMS_PER_ADDRESS": None,
    }
    config = get_config()
    assert (config.max_streams, config.max_streams_per_client) == (500, None)
    assert config.max_streams_per_address is None


def test_every_invalid_key_is_named_in_one_error(settings):
    settings.WHOS_ONLINE = {"WINDOW": -1, "DISPLAY_LIMIT": "many"}
    with pytest.raises(ImproperlyConfigured) as excinfo:
        get_config()
    message = str(excinfo.value)
    assert "whos_online.E005" in message
    assert "WINDOW" in message
    assert "whos_online.E014" in message
    assert "DISPLAY_LIMIT" in message


def test_not_a_dict_raises(settings):
    settings.WHOS_ONLINE = ["WINDOW", 600]
    with pytest.raises(ImproperlyConfigured, match=r"whos_online\.E001.*must be a dict"):
        get_config()


def test_warnings_alone_do_not_stop_get_config(settings):
    settings.WHOS_ONLINE = {"WINDOWS": 5, "GUEST_IDENTITY": "ip"}
    config = get_config()
    assert config.guest_identity == "ip"
    assert config.window == 600


def test_a_fixed_setting_is_accepted_after_a_failure(settings):
    settings.WHOS_ONLINE = {"WINDOW": 0}
    with pytest.raises(ImproperlyConfigured):
        get_config()
    settings.WHOS_ONLINE = {"WINDOW": 60, "THROTTLE": 30}
    assert get_config().window == 60


def test_default_ignore_paths_come_from_static_and_media_urls(settings):
    settings.STATIC_URL = "/static/"
    settings.MEDIA_URL = "/uploads/"
    config = get_config()
    assert ignored(config, "/static/app.css")
    assert ignored(config, "/uploads/avatar.png")
    assert ignored(config, "/favicon.ico")
    assert not ignored(config, "/")
    assert not ignored(config, "/plain/")
    assert not ignored(config, "/staticky/")
    assert not ignored(config, "/blog/static/")
    assert not ignored(config, "/favicon.ico.html")
    assert not ignored(config, "/media/avatar.png")


def test_static_url_change_is_seen_at_once(settings):
    settings.STATIC_URL = "/static/"
    assert ignored(get_config(), "/static/app.css")
    settings.STATIC_URL = "/assets/"
    assert ignored(get_config(), "/assets/app.css")
    assert not ignored(get_config(), "/static/app.css")


def test_static_url_is_matched_literally(settings):
    settings.STATIC_URL = "/static.v2/"
    config = get_config()
    assert ignored(config, "/static.v2/app.css")
    assert not ignored(config, "/staticXv2/app.css")


def test_relative_static_url_is_ignored_from_the_root(settings):
    settings.STATIC_URL = "static/"
    assert ignored(get_config(), "/static/app.css")


def test_cdn_static_url_is_skipped_and_favicon_still_ignored(settings):
    settings.STATIC_URL = "https://cdn.example.com/static/"
    settings.MEDIA_URL = "/media/"
    config = get_config()
    assert not ignored(config, "/static/app.css")
    assert not ignored(config, "/")
    assert ignored(config, "/media/photo.jpg")
    assert ignored(config, "/favicon.ico")


def test_root_media_url_does_not_ignore_every_path(settings):
    settings.STATIC_URL = "https://cdn.example.com/static/"
    settings.MEDIA_URL = "/"
    config = get_config()
    assert not ignored(config, "/")
    assert not ignored(config, "/plain/")
    assert ignored(config, "/favicon.ico")


def test_explicit_ignore_paths_replace_the_defaults(settings):
    settings.WHOS_ONLINE = {"IGNORE_PATHS": [r"^/healthz$", r"^/api/"]}
    config = get_config()
    assert ignored(config, "/healthz")
    assert ignored(config, "/api/v1/items")
    assert not ignored(config, "/healthz/deep")
    assert not ignored(config, "/static/app.css")
    assert not ignored(config, "/favicon.ico")


def test_empty_ignore_paths_ignores_nothing(settings):
    settings.WHOS_ONLINE = {"IGNORE_PATHS": []}
    assert get_config().ignore_paths == ()


def test_ignore_paths_with_inline_flags_work(settings):
    # Each pattern compiles on its own, so the checks accept it; the config must too.
    settings.WHOS_ONLINE = {"IGNORE_PATHS": [r"(?i)^/healthz$", r"^/api/"]}
    config = get_config()
    assert ignored(config, "/HEALTHZ")
    assert ignored(config, "/api/x")
    assert not ignored(config, "/plain/")


def test_bot_user_agents_none_or_empty_disables_bots(settings):
    settings.WHOS_ONLINE = {"BOT_USER_AGENTS": None}
    assert get_config().bot_user_agents is None
    settings.WHOS_ONLINE = {"BOT_USER_AGENTS": ""}
    assert get_config().bot_user_agents is None


@pytest.mark.parametrize(
    "value", ["tests.config.test_settings.hide_staff", hide_staff], ids=["dotted-path", "callable"]
)
def test_hide_user_accepts_dotted_path_or_callable(settings, value):
    settings.WHOS_ONLINE = {"HIDE_USER": value}
    assert get_config().hide_user is hide_staff


@pytest.mark.parametrize(
    "value", ["tests.config.test_settings.shout_name", shout_name], ids=["dotted-path", "callable"]
)
def test_display_name_accepts_dotted_path_or_callable(settings, value):
    settings.WHOS_ONLINE = {"DISPLAY_NAME": value}
    assert get_config().display_name is shout_name


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("staff", is_staff),
        ("authenticated", is_authenticated),
        ("everyone", None),
        ("tests.config.test_settings.hide_staff", hide_staff),
        (hide_staff, hide_staff),
    ],
)
def test_show_names_to_becomes_a_rule(settings, value, expected):
    settings.WHOS_ONLINE = {"SHOW_NAMES_TO": value}
    assert get_config().show_names_to is expected


def test_staff_rule_needs_an_active_staff_user(django_user_model):
    staff = django_user_model(username="s", is_staff=True)
    assert is_staff(staff) is True
    staff.is_active = False
    assert is_staff(staff) is False
    assert is_staff(django_user_model(username="u")) is False
    assert is_staff(AnonymousUser()) is False


def test_authenticated_rule(django_user_model):
    assert is_authenticated(django_user_model(username="u")) is True
    assert is_authenticated(AnonymousUser()) is False


def test_display_name_lambda_is_used_as_is(settings):
    def name(user: Any) -> str:
        return "someone"

    settings.WHOS_ONLINE = {"DISPLAY_NAME": name}
    assert get_config().display_name is name


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("redis://:s3cret@redis.internal:6379/0", "redis://:***@redis.internal:6379/0"),
        ("redis://app:s3cret@redis.internal:6379/2", "redis://app:***@redis.internal:6379/2"),
        ("rediss://app:s3cret@redis.internal:6380/0", "rediss://app:***@redis.internal:6380/0"),
        ("unix://:s3cret@/run/redis.sock?db=1", "unix://:***@/run/redis.sock?db=1"),
        ("redis://redis.internal:6379/0", "redis://redis.internal:6379/0"),
        ("redis://app@redis.internal:6379/0", "redis://app@redis.internal:6379/0"),
    ],
)
def test_redis_target_redacts_the_password(settings, url, target):
    settings.WHOS_ONLINE = {"REDIS_URL": url}
    assert get_config().redis_target == target
    assert "s3cret" not in get_config().redis_target


def test_redis_target_redacts_a_password_given_in_the_query_string(settings):
    # redis-py reads ?password=... as the password, so it is as secret as the userinfo one.
    settings.WHOS_ONLINE = {"REDIS_URL": "redis://redis.internal:6379/0?password=s3cret"}
    target = get_config().redis_target
    assert "s3cret" not in target
    assert target.startswith("redis://redis.internal:6379/0")


def test_redis_target_names_the_alias_without_url(settings):
    settings.CACHES = {
        **settings.CACHES,
        "sessions": {**settings.CACHES["default"]},
    }
    settings.WHOS_ONLINE = {"REDIS_ALIAS": "sessions"}
    assert get_config().redis_target == "cache alias 'sessions'"


def test_user_setting_is_never_mutated(settings):
    user_value: dict[str, Any] = {
        "WINDOW": 300,
        "THROTTLE": 60,
        "COUNTER_PRECISIONS": [3600, 1, 60],
        "IGNORE_PATHS": [r"^/healthz$"],
        "HIDE_USER": "tests.config.test_settings.hide_staff",
        "UNKNOWN": {"nested": [1, 2]},
    }
    snapshot = copy.deepcopy(user_value)
    settings.WHOS_ONLINE = user_value
    config = get_config()
    assert config.counter_precisions == (1, 60, 3600)
    assert user_value == snapshot
    assert user_value["COUNTER_PRECISIONS"] == [3600, 1, 60]
    assert set(user_value) == set(snapshot)
    assert "KEY_PREFIX" not in user_value


def test_invalid_user_setting_is_not_mutated_either(settings):
    user_value: dict[str, Any] = {"WINDOW": 0, "COUNTER_PRECISIONS": [5, 5]}
    snapshot = copy.deepcopy(user_value)
    settings.WHOS_ONLINE = user_value
    with pytest.raises(ImproperlyConfigured):
        get_config()
    assert user_value == snapshot


def test_middleware_init_raises_on_bad_settings(settings):
    settings.WHOS_ONLINE = {"THROTTLE": 900, "WINDOW": 600}
    with pytest.raises(ImproperlyConfigured, match=re.escape("WHOS_ONLINE['THROTTLE']")):
        WhosOnlineMiddleware(ok_view)


def test_middleware_init_accepts_good_settings(settings):
    settings.WHOS_ONLINE = {"THROTTLE": 0}
    middleware = WhosOnlineMiddleware(ok_view)
    assert middleware.get_response is ok_view
    assert middleware.async_mode is False


def test_server_start_up_fails_on_bad_settings(settings):
    # The handler builds the middleware chain on its first request, as a server does at start-up.
    settings.WHOS_ONLINE = {"KEY_PREFIX": "has space"}
    with pytest.raises(ImproperlyConfigured, match=r"whos_online\.E004"):
        Client().get("/plain/")
