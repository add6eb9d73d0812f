"""Settings of the benchmark site; ``WHOS_ONLINE_BENCH_VARIANT`` picks the middleware under test.

Every variant is the same small site (sessions and auth from the database, one template view) so
that the only difference between two of them is the middleware they add. There is one trusted
proxy in front: the load generator writes each client's address into ``X-Forwarded-For``, the
way a reverse proxy would, so that many clients come from one loopback connection.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.variants import BY_NAME

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

# One Redis for every variant, each whos_online variant under its own key prefix.
WHOS_ONLINE = {
    "REDIS_URL": os.environ.get("REDIS_URL", ""),
    "KEY_PREFIX": f"bench-{VARIANT.name}",
    "TRUSTED_PROXY_COUNT": 1,
    **(VARIANT.whos_online or {}),
}

# Errors and whos_online's warnings go to gunicorn's log, where the benchmark looks for them.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler", "level": "WARNING"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
}
