"""System checks: every ``WHOS_ONLINE`` key, the middleware's place in ``MIDDLEWARE``, the URL
names of ``ROOMS``, and (on ``check --deploy``) whether the cleanup command runs.

The settings are checked by ``validation.validate`` (each key by its row of ``key_rules.RULES``,
then the keys that depend on each other); ``get_config`` runs the same function, and refuses to
build a ``Config`` from settings with errors.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.utils.module_loading import import_string

from whos_online.conf import user_settings
from whos_online.key_rules import room_pattern_fields, rooms_problems
from whos_online.validation import validate

MIDDLEWARE_PATH: Final = "whos_online.middleware.WhosOnlineMiddleware"
AUTH_MIDDLEWARE_PATH: Final = "django.contrib.auth.middleware.AuthenticationMiddleware"


def check_settings(**kwargs: Any) -> list[CheckMessage]:
    return validate(user_settings())


def check_room_urls(**kwargs: Any) -> list[CheckMessage]:
    """Each key of ``ROOMS`` names a URL of the site's URLconf, and each field of its pattern is
    a keyword argument that every URL of that name captures. Says nothing of a ``ROOMS`` that
    ``check_settings`` reports as malformed."""
    from whos_online.urlnames import url_keywords

    raw: object = user_settings()
    rooms = raw.get("ROOMS") if isinstance(raw, Mapping) else None
    if not isinstance(rooms, Mapping) or rooms_problems(rooms):
        return []
    known = url_keywords()
    messages: list[CheckMessage] = []
    for name, pattern in rooms.items():
        if name not in known:
            messages.append(
                Error(
                    f"WHOS_ONLINE['ROOMS'] names the URL {name!r}, which the URLconf does not "
                    "have.",
                    hint="Use the name as reverse() takes it, with its namespaces, such as "
                    "'forum:topic'.",
                    id="whos_online.E031",
                )
            )
            continue
        missing = sorted(set(room_pattern_fields(pattern)) - known[name])
        if missing:
            captured = ", ".join(sorted(known[name])) or "none"
            messages.append(
                Error(
                    f"WHOS_ONLINE['ROOMS'][{name!r}] is {pattern!r}, but the URL {name!r} does "
                    f"not capture {', '.join(missing)} (it captures: {captured}).",
                    hint="A room pattern is formatted with the keyword arguments the URL passes "
                    "to its view.",
                    id="whos_online.E032",
                )
            )
    return messages


def check_cleanup_runs(**kwargs: Any) -> list[CheckMessage]:
    """A deploy check (``manage.py check --deploy``), since it reads Redis: whether the online
    sets hold people gone for several windows, which only happens when the cleanup command
    does not run. Says nothing when Redis cannot be read or the settings are wrong."""
    from django.utils.timesince import timesince

    from whos_online import connection, dashboard, store
    from whos_online.conf import get_config
    from whos_online.results import as_datetime

    if any(message.is_serious() for message in validate(user_settings())):
        return []
    now = time.time()
    oldest = connection.call(None, store.presence.oldest_seen)
    late_since = dashboard.cleanup_late_since(oldest, get_config(), now=now)
    if late_since is None:
        return []
    since = timesince(late_since, as_datetime(now))
    return [
        Warning(
            f"People last seen {since} ago are still in whos_online's sets: the "
            "cleanup command has not run since then, and the sets grow until it does.",
            hint="Run 'manage.py whos_online_cleanup' from cron every few minutes, with the "
            "virtual environment's python.",
            id="whos_online.W005",
        )
    ]


def _indexes_of_subclasses(middleware: list[str], base_path: str) -> list[int]:
    """Indexes of the entries that are ``base_path`` or a subclass of it, as Django's admin
    checks find its middleware: a site may extend ours, or Django's."""
    try:
        base = import_string(base_path)
    except ImportError:  # pragma: no cover - both bases always import
        return []
    found = []
    for index, path in enumerate(middleware):
        if path == base_path:
            found.append(index)
            continue
        try:
            candidate = import_string(path)
        except ImportError:
            continue
        if isinstance(candidate, type) and issubclass(candidate, base):
            found.append(index)
    return found


def check_middleware(**kwargs: Any) -> list[CheckMessage]:
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    ours = _indexes_of_subclasses(middleware, MIDDLEWARE_PATH)
    if not ours:
        return [
            Warning(
                f"{MIDDLEWARE_PATH} is not in MIDDLEWARE, so nobody is recorded as online.",
                hint=f"Add it (or a subclass of it) to MIDDLEWARE right after "
                f"{AUTH_MIDDLEWARE_PATH}.",
                id="whos_online.W003",
            )
        ]
    if len(ours) > 1:
        return [
            Error(
                f"{MIDDLEWARE_PATH} (or a subclass) is listed {len(ours)} times in MIDDLEWARE.",
                hint="Keep one entry, right after AuthenticationMiddleware.",
                id="whos_online.E020",
            )
        ]
    auth = _indexes_of_subclasses(middleware, AUTH_MIDDLEWARE_PATH)
    if not auth or auth[0] > ours[0]:
        return [
            Error(
                f"{MIDDLEWARE_PATH} must come after {AUTH_MIDDLEWARE_PATH} in MIDDLEWARE.",
                hint="It needs request.user to tell users from guests; move it just below "
                "AuthenticationMiddleware.",
                id="whos_online.E021",
            )
        ]
    return []
