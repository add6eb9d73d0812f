"""Settings of the example site: ``python3 scripts/dev.py example`` runs it.

Not for production: DEBUG is on and the secret key is public unless the environment says
otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)

DEBUG = os.environ.get("DEBUG", "1").lower() not in {"0", "false", "no", "off", ""}
SECRET_KEY = os.environ.get("SECRET_KEY", "django-insecure-whos-online-example-do-not-deploy")
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "whos_online",
    "example_project",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # After AuthenticationMiddleware, which sets request.user.
    "whos_online.middleware.WhosOnlineMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"
ASGI_APPLICATION = "example_project.asgi.application"

# The chat relays its messages between the sockets of this one process (uvicorn, one worker); a
# site with several processes uses channels_redis.
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.debug",
                # The {% whos_online %} tag keeps its one Redis read on the request.
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": VAR_DIR / "example.sqlite3",
    }
}

# whos_online uses the connection of this django-redis cache (its REDIS_ALIAS, "default").
# The short timeouts keep a missing Redis from slowing pages down: the app fails open.
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
    }
}

# A short window and throttle, so that the demo shows people arriving and leaving quickly; the
# live widget refreshes every 5 s, and logged-in members (not only staff) see who is online.
WHOS_ONLINE = {
    # Each topic is a room, by its URL's name: no decorator on the view.
    "ROOMS": {"topic": "topic:{pk}"},
    "WINDOW": 300,
    "THROTTLE": 60,
    "COUNT_HITS": True,
    "SHOW_NAMES_TO": "authenticated",
    "REFRESH_INTERVAL": 5,
    "JSON_MAX_AGE": 2,
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "{levelname} {name}: {message}", "style": "{"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        # Shows the one warning per Redis outage, e.g. when the example runs without Redis.
        "whos_online": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}
