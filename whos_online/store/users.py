"""What whos_online stores about a user, and how a stored primary key becomes the user's again.

``DISPLAY_NAME`` and ``HIDE_USER`` run when the user is recorded, never when the list is read, so
that the list costs no SQL; names and URLs are cleaned first, so that neither can change the page
around them nor run script.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

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


#: Combining marks kept on one base character. Vietnamese, Hebrew and Indic scripts stack up to
#: three or four; stacking beyond that is decoration at the expense of the page.
MAX_COMBINING_MARKS: Final = 4

#: Bidirectional formatting characters that open a run, and the character that closes it.
_OPENERS: Final = {
    "\u202a": "\u202c",  # LEFT-TO-RIGHT EMBEDDING … POP DIRECTIONAL FORMATTING
    "\u202b": "\u202c",  # RIGHT-TO-LEFT EMBEDDING
    "\u202d": "\u202c",  # LEFT-TO-RIGHT OVERRIDE
    "\u202e": "\u202c",  # RIGHT-TO-LEFT OVERRIDE
    "\u2066": "\u2069",  # LEFT-TO-RIGHT ISOLATE … POP DIRECTIONAL ISOLATE
    "\u2067": "\u2069",  # RIGHT-TO-LEFT ISOLATE
    "\u2068": "\u2069",  # FIRST STRONG ISOLATE
}
_CLOSERS: Final = frozenset(_OPENERS.values())
_WHITESPACE_CONTROLS: Final = frozenset("\t\n\v\f\r\x1c\x1d\x1e\x1f\x85")
LINKED_SCHEMES: Final = frozenset({"http", "https"})


def clean_name(name: str) -> str:
    """``name`` with control characters, unpaired bidirectional controls and excess combining
    marks removed (see the module's docstring)."""
    if name.isascii() and name.isprintable():
        return name  # the common case, at the cost of two C loops
    kept: list[str] = []
    open_runs: list[tuple[int, str]] = []  # (index in kept, the closer it waits for)
    marks = 0
    for char in name:
        category = unicodedata.category(char)
        if category == "Cc":
            if char in _WHITESPACE_CONTROLS:
                kept.append(" ")
            marks = 0
            continue
        if category in {"Mn", "Me"}:
            marks += 1
            if marks > MAX_COMBINING_MARKS:
                continue
        else:
            marks = 0
        if char in _OPENERS:
            open_runs.append((len(kept), _OPENERS[char]))
        elif char in _CLOSERS:
            if not open_runs or open_runs[-1][1] != char:
                continue  # closes nothing: dropped
            open_runs.pop()
        kept.append(char)
    for index, _closer in reversed(open_runs):
        del kept[index]  # never closed: dropped
    return "".join(kept)


def linkable_url(url: str) -> str:
    """``url`` if a link to it cannot run script (``http``, ``https``, or a path on this site),
    else ``""``. Browsers ignore tabs and line breaks inside a scheme (``java\\tscript:``), and
    read ``/\\host`` as ``//host``, so a URL holding either is not linked at all."""
    if not url or not url.isprintable() or "\\" in url or url != url.strip():
        return ""
    if url.startswith("/"):
        return "" if url.startswith("//") else url  # "//host" may be any host
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return url if parts.scheme.lower() in LINKED_SCHEMES and parts.netloc else ""
