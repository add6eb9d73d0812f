"""Settings of the test site as tests/test_load.py serves it through gunicorn.

The test settings, plus what a deployment has and a test process does not: a real Redis (from
``REDIS_URL``), one trusted proxy in front (the load clients send ``X-Forwarded-For``), a database
file that every worker process shares, and errors written to stderr.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["WHOS_ONLINE_LOAD_DB"],
        # Workers wait for each other's writes (logins) instead of failing at once.
        "OPTIONS": {"timeout": 20},  # type: ignore [dict-item]
    }
}

WHOS_ONLINE = {
    "REDIS_URL": os.environ["REDIS_URL"],
    "TRUSTED_PROXY_COUNT": int(os.environ.get("TRUSTED_PROXY_COUNT", "1")),
    "COUNT_HITS": True,
}
if "FLUSH_INTERVAL" in os.environ:
    # A long one, for tests that must find only what a process wrote as it ended.
    WHOS_ONLINE["FLUSH_INTERVAL"] = float(os.environ["FLUSH_INTERVAL"])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django.request": {"handlers": ["stderr"], "level": "ERROR"},
        "whos_online": {"handlers": ["stderr"], "level": "WARNING"},
    },
}
