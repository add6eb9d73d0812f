"""Settings of the bench site: sessions and auth, one small template view, and the middleware of
one variant, ``WHOS_ONLINE_BENCH_VARIANT`` (each variant is this site plus one middleware).

One trusted proxy stands in front: the load generator writes each client's address into
``X-Forwarded-For``, as a reverse proxy would, so that many clients share one loopback connection.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

WHOS_ONLINE_MIDDLEWARE: Final = "whos_online.middleware.WhosOnlineMiddleware"
NAIVE_MIDDLEWARE: Final = "bench.naive.NaiveZaddMiddleware"


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    apps: tuple[str, ...] = ()
    middleware: tuple[str, ...] = ()
    #: WHOS_ONLINE settings beyond the site's own; None where whos_online is not installed.
    whos_online: dict[str, Any] | None = None
    #: Requests carry the throttle cookie that a first, recorded visit handed out.
    throttled: bool = False
    #: A third-party module that must import for the variant to run; it records users only.
    module: str | None = None


def whos_online(name: str, label: str, *, throttled: bool = False, **settings: Any) -> Variant:
    apps, middleware = ("whos_online",), (WHOS_ONLINE_MIDDLEWARE,)
    return Variant(name, label, apps, middleware, settings, throttled)


def competitor(name: str, label: str, middleware: str) -> Variant:
    return Variant(
        name, label, (name,), (f"{name}.middleware.{middleware}",), module=f"{name}.middleware"
    )


ALL_RECORDED: Final = "whos_online, every request recorded"
VARIANTS: Final = (
    Variant("bare", "bare Django (sessions, auth, a small template)"),
    whos_online("throttled", "whos_online, throttle cookie present (defaults)", throttled=True),
    whos_online(
        "recording",
        f"{ALL_RECORDED} (`THROTTLE=0`), queued and written within the default `FLUSH_INTERVAL`",
        THROTTLE=0,
    ),
    whos_online(
        "recording_at_once",
        f"{ALL_RECORDED} and written before its response (`THROTTLE=0`, `FLUSH_INTERVAL=0`)",
        THROTTLE=0,
        FLUSH_INTERVAL=0,
    ),
    whos_online(
        "recording_hits",
        f"{ALL_RECORDED} and its page hit counted (`THROTTLE=0`, `COUNT_HITS=True`)",
        THROTTLE=0,
        COUNT_HITS=True,
    ),
    Variant(
        "naive", "one plain ZADD per request (the naive middleware)", middleware=(NAIVE_MIDDLEWARE,)
    ),
    competitor(
        "online_users",
        "django-online-users 0.3 (an SQL write per authenticated request)",
        "OnlineNowMiddleware",
    ),
    competitor("online_status", "django-online-status 0.1.0", "OnlineStatusMiddleware"),
    # The live streams' benches: thousands of streams from this machine's one address.
    whos_online(
        "streams",
        "whos_online with live updates",
        LIVE_UPDATES=True,
        MAX_STREAMS=1_000_000,
        MAX_STREAMS_PER_ADDRESS=None,
        ROOM_TOKEN_MAX_AGE=int(os.environ.get("WHOS_ONLINE_BENCH_STREAM_SECONDS", "3600")),
    ),
)
BY_NAME: Final = {variant.name: variant for variant in VARIANTS}
VARIANT = BY_NAME[os.environ.get("WHOS_ONLINE_BENCH_VARIANT", "throttled")]

SECRET_KEY = "whos-online-bench-only"  # noqa: S105 (a throw-away site on loopback)
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True
ROOT_URLCONF = "bench.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    *VARIANT.apps,
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    *VARIANT.middleware,
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("WHOS_ONLINE_BENCH_DB", ":memory:"),
        # Workers wait for each other's writes (logins, django-online-users) instead of failing.
        "OPTIONS": {"timeout": 20},
    }
}
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
            ]
        },
    }
]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STATIC_URL = "/static/"


def whos_online_settings(variant: Variant) -> dict[str, Any]:
    """Every whos_online variant under its own key prefix, behind one trusted proxy."""
    base = {"REDIS_URL": os.environ.get("REDIS_URL", ""), "TRUSTED_PROXY_COUNT": 1}
    return {**base, "KEY_PREFIX": f"bench-{variant.name}", **(variant.whos_online or {})}


WHOS_ONLINE = whos_online_settings(VARIANT)
# Errors and whos_online's warnings go to the server's log, where the benches look for them.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler", "level": "WARNING"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
}
