"""What whos_online stores about a user, and how a stored primary key becomes the user's again.

A user is stored by primary key, as text, with a display HASH (name, profile URL, last seen) that
the site's ``DISPLAY_NAME`` and ``HIDE_USER`` decide. Those run when the user is recorded, never
when the list is read, so that rendering the list costs no SQL query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from whos_online.store.text import clean_name, linkable_url

if TYPE_CHECKING:
    from collections.abc import Iterable

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

    from whos_online.config.settings import Config

#: Longest display name stored; longer names are cut, so one user cannot bloat the list.
MAX_DISPLAY_NAME_LENGTH: Final = 150


@dataclass(frozen=True)
class UserDetails:
    """What a user's display HASH holds, and whether they are counted but not named."""

    pk: str
    hidden: bool
    name: str
    url: str


def pk_text(user: AbstractBaseUser | AnonymousUser | object) -> str:
    """A user's primary key as stored: a user, or a primary key given as it is."""
    return str(getattr(user, "pk", user))


def pk_values(texts: Iterable[str]) -> list[object]:
    """Primary keys as the user model has them, from their stored text (kept as text if the
    model would not take it). The model's field is looked up once for the whole list."""
    to_python = get_user_model()._meta.pk.to_python
    values = []
    for text in texts:
        try:
            values.append(to_python(text))
        except ValidationError:
            values.append(text)
    return values


def display_name(user: AbstractBaseUser | AnonymousUser, config: Config) -> str:
    name = config.display_name(user) if config.display_name else user.get_username()
    # A lone surrogate cannot be sent to Redis; replace it rather than fail the request.
    # Cleaned after the cut, which could leave a bidirectional run open.
    cut = str(name)[:MAX_DISPLAY_NAME_LENGTH]
    return clean_name(cut.encode("utf-8", "replace").decode())


def profile_url(user: AbstractBaseUser | AnonymousUser) -> str:
    """The user's ``get_absolute_url()``, if a link to it cannot run script (else "")."""
    get_absolute_url = getattr(user, "get_absolute_url", None)
    return linkable_url(str(get_absolute_url())) if callable(get_absolute_url) else ""


def details(user: AbstractBaseUser | AnonymousUser, config: Config) -> UserDetails:
    """What is stored about a user: runs the site's ``HIDE_USER`` and ``DISPLAY_NAME``."""
    return UserDetails(
        pk=pk_text(user),
        hidden=bool(config.hide_user and config.hide_user(user)),
        name=display_name(user, config),
        url=profile_url(user),
    )
