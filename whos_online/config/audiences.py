"""Who ``SHOW_NAMES_TO`` shows names to, as a rule on a user; and who counts as staff.

Kept apart from the views that apply the rules (``whos_online.reading.visibility``), so that the
settings can be turned into a ``Config`` without importing what reads a request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

#: The named values of ``SHOW_NAMES_TO``; anything else is a dotted path or a callable.
NAME_AUDIENCES: Final = ("staff", "authenticated", "everyone")


def is_staff(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_active and getattr(user, "is_staff", False))


def is_authenticated(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_authenticated)


def name_audience(value: str | Callable[..., Any]) -> Any:
    """The rule ``SHOW_NAMES_TO`` names; None means everyone, so that the user need not be
    loaded to decide."""
    if value == "everyone":
        return None
    if value == "staff":
        return is_staff
    if value == "authenticated":
        return is_authenticated
    return value if callable(value) else import_string(value)
