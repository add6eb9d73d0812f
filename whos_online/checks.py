"""System checks: every WHOS_ONLINE key, and the middleware's place in MIDDLEWARE."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.utils.module_loading import import_string

from whos_online.conf import (
    AUTH_MIDDLEWARE_PATH,
    MIDDLEWARE_PATH,
    user_settings,
    validate,
)


def check_settings(**kwargs: Any) -> list[CheckMessage]:
    return validate(user_settings())


def _index_of_subclass(middleware: list[str], base_path: str) -> int | None:
    """Index of the first entry that is ``base_path`` or a subclass of it (admin checks do so)."""
    try:
        base = import_string(base_path)
    except ImportError:  # pragma: no cover - Django's own middleware always imports
        return None
    for index, path in enumerate(middleware):
        if path == base_path:
            return index
        try:
            candidate = import_string(path)
        except ImportError:
            continue
        if isinstance(candidate, type) and issubclass(candidate, base):
            return index
    return None


def check_middleware(**kwargs: Any) -> list[CheckMessage]:
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    ours = [index for index, path in enumerate(middleware) if path == MIDDLEWARE_PATH]
    if not ours:
        return [
            Warning(
                f"{MIDDLEWARE_PATH} is not in MIDDLEWARE, so nobody is recorded as online.",
                hint=f"Add it to MIDDLEWARE right after {AUTH_MIDDLEWARE_PATH}.",
                id="whos_online.W003",
            )
        ]
    if len(ours) > 1:
        return [
            Error(
                f"{MIDDLEWARE_PATH} is listed {len(ours)} times in MIDDLEWARE.",
                hint="Keep one entry, right after AuthenticationMiddleware.",
                id="whos_online.E020",
            )
        ]
    auth = _index_of_subclass(middleware, AUTH_MIDDLEWARE_PATH)
    if auth is None or auth > ours[0]:
        return [
            Error(
                f"{MIDDLEWARE_PATH} must come after {AUTH_MIDDLEWARE_PATH} in MIDDLEWARE.",
                hint="It needs request.user to tell users from guests; move it just below "
                "AuthenticationMiddleware.",
                id="whos_online.E021",
            )
        ]
    return []
