"""Helpers shared by the test modules: settings, what Redis holds, and sessions."""

from __future__ import annotations

import time
from importlib import import_module
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY

from whos_online.conf import get_config
from whos_online.identity import guest_id

if TYPE_CHECKING:
    import redis
    from django.contrib.auth.models import AbstractUser
    from django.test import AsyncClient, Client


def configure(settings: Any, **values: object) -> None:
    """Merge ``values`` into WHOS_ONLINE, keeping the REDIS_URL of the real backend.

    Changing settings drops buffered hits and cached clients (``conf.reset``), so tests
    configure first.
    """
    settings.WHOS_ONLINE = {**getattr(settings, "WHOS_ONLINE", {}), **values}


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def members(r: redis.Redis, kind: str) -> list[str]:
    """The members of one of the sorted sets of people online, sorted."""
    return sorted(text(member) for member in r.zrange(f"{{whos_online}}:{kind}", 0, -1))


def guest(ip: str) -> str:
    """The member the middleware stores today for a guest at ``ip``."""
    return guest_id(ip, get_config(), time.time())


def log_in_quietly(client: Client | AsyncClient, user: AbstractUser) -> None:
    """Give ``client`` a session of ``user`` without sending user_logged_in.

    That is a visitor who comes back with the session of an earlier visit: the middleware alone
    has to record them.
    """
    engine = import_module(django_settings.SESSION_ENGINE)
    session = engine.SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    client.cookies[django_settings.SESSION_COOKIE_NAME] = session.session_key
