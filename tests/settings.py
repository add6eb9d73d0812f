from __future__ import annotations

import fakeredis

SECRET_KEY = "whos-online-tests"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

INSTALLED_APPS = [
    # For the user admin with whos_online's columns (tests/test_admin.py).
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Lets the browser tests' live server serve whos_online's scripts and stylesheet.
    "django.contrib.staticfiles",
    # Token-authenticated API clients (tests/api_urls.py).
    "rest_framework",
    "rest_framework.authtoken",
    "whos_online",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "whos_online.middleware.WhosOnlineMiddleware",
    # The admin's requirements (tests/test_admin.py).
    "django.contrib.messages.middleware.MessageMiddleware",
]

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://fake-redis:6379/0",
        "OPTIONS": {
            "CONNECTION_POOL_KWARGS": {"connection_class": fakeredis.FakeRedisConnection},
        },
    }
}

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": ["tests/templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                # The admin's requirements (tests/test_admin.py).
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# Every render reads Redis, so that a test sees what it just stored however it stored it; the
# tests of the kept snapshot (tests/reading/test_snapshots.py) turn it on. Every recorded request
# writes its visit before it answers (through the same queue and batch as the default, with no
# wait), so that a test finds it in Redis; the tests of the flusher (tests/flushing/
# test_flusher.py) set one.
# And whos_online's own tests write under the prefix they name, not a test prefix of their own
# (ISOLATE_TESTS): they assert exact key names ("{whos_online}:users"), and start from an empty
# Redis each (tests/conftest.py). The tests of that isolation (tests/config/test_isolation.py)
# turn it on.
# Nor do flushes publish what they changed (LIVE_UPDATES), which the flushing thread would do
# while a test counts the round trips of a request; the tests of the live streams turn it on.
WHOS_ONLINE: dict[str, object] = {
    "SNAPSHOT_MAX_AGE": 0,
    "FLUSH_INTERVAL": 0,
    "ISOLATE_TESTS": False,
    "LIVE_UPDATES": False,
}

# A site's API authentication (tests/api_urls.py sets its own per view; the recipes of
# docs/beyond-page-views.md use these).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ]
}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STATIC_URL = "/static/"
MEDIA_URL = "/media/"
