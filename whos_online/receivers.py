"""Receivers that keep the online list exact across logins, logouts and deleted users.

A login is recorded at once and moves the visitor from the guests to the users; a logout moves them
back at once. Neither waits for the throttle cookie to expire.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from whos_online import api, recording
from whos_online.conf import get_config

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.http import HttpRequest


def record_login(
    sender: object, request: HttpRequest | None, user: AbstractBaseUser, **kwargs: Any
) -> None:
    config = get_config()
    now = time.time()
    former_guest = recording.guest_member(request, config, now) if request is not None else ""
    api.record_user(user, now=now, former_guest=former_guest)


def remove_logout(
    sender: object,
    request: HttpRequest | None,
    user: AbstractBaseUser | None,
    **kwargs: Any,
) -> None:
    recording.user_logged_out(user, request)


def forget_deleted_user(sender: object, instance: AbstractBaseUser, **kwargs: Any) -> None:
    # A deleted account has nothing left to show; erase it rather than list a dangling name.
    api.forget_user(instance)
