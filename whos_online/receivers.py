"""Receivers that keep the online list exact across logins, logouts and deleted users.

A login is recorded at once (with the process's next flush, like any recorded request) and moves
the visitor from the guests to the users; a logout moves them back at once. Neither waits for the
throttle cookie to expire.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from whos_online import api
from whos_online.reading import snapshots
from whos_online.recording import logins

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.http import HttpRequest


def record_login(
    sender: object, request: HttpRequest | None, user: AbstractBaseUser, **kwargs: Any
) -> None:
    logins.user_logged_in(user, request)


def remove_logout(
    sender: object,
    request: HttpRequest | None,
    user: AbstractBaseUser | None,
    **kwargs: Any,
) -> None:
    logins.user_logged_out(user, request)
    # What this process last read still lists them: the next page it renders reads again.
    snapshots.invalidate()


def forget_deleted_user(sender: object, instance: AbstractBaseUser, **kwargs: Any) -> None:
    # A deleted account has nothing left to show; erase it rather than list a dangling name.
    api.forget_user(instance)
