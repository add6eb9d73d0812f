"""Rooms: who is on one page ("3 people are reading this topic"), besides who is on the site.

A view puts its request in a room with ``set_room`` (or the ``in_room`` decorator). A person is
in one room at a time, the room of their latest recorded request; a recorded request without a
room takes them out of theirs, and they stay online site-wide.

The throttle cookie says which room it was issued for, as a short keyed tag covered by its MAC,
so that staying in one room costs nothing (no Redis, no SQL) while moving to another is recorded
at once. A site that never names a room sends the same cookie as before.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from typing import TYPE_CHECKING, Final

from django.conf import settings

if TYPE_CHECKING:
    from django.http import HttpRequest

#: The attribute on which ``set_room`` notes the request's room.
ATTRIBUTE: Final = "_whos_online_room"
#: Longest room name, in characters: a name becomes part of Redis keys.
MAX_ROOM_LENGTH: Final = 200


def check_room(name: object) -> str:
    """``name`` if it is a room name (text of 1 to ``MAX_ROOM_LENGTH`` characters)."""
    if not isinstance(name, str):
        msg = f"A room name is text, not {type(name).__name__}."
        raise ValueError(msg)
    if not 1 <= len(name) <= MAX_ROOM_LENGTH:
        msg = f"A room name has 1 to {MAX_ROOM_LENGTH} characters, not {len(name)}."
        raise ValueError(msg)
    # A lone surrogate cannot be sent to Redis.
    return name.encode("utf-8", "replace").decode()


def set_room(request: HttpRequest, name: str) -> None:
    """Put the person making ``request`` in room ``name`` (see the module's docstring)."""
    setattr(request, ATTRIBUTE, check_room(name))


def room_of(request: HttpRequest) -> str:
    """The room ``request`` was put in, or "" for none."""
    room = getattr(request, ATTRIBUTE, "")
    return room if isinstance(room, str) else ""


def room_tag(room: str) -> str:
    """What the throttle cookie carries of ``room``: 8 characters of a keyed hash ("" for no
    room). Two rooms that share a tag (one pair in 2^48) would let a move between them wait for
    the cookie to expire, which is the cost of a cookie that grows by 9 characters only."""
    return _tag(room, settings.SECRET_KEY) if room else ""


@functools.lru_cache(maxsize=4096)
def _tag(room: str, secret: str) -> str:
    key = hashlib.blake2b(secret.encode(), person=b"whos_online.rm", digest_size=32).digest()
    digest = hashlib.blake2b(room.encode(), key=key, digest_size=6).digest()
    return base64.urlsafe_b64encode(digest).decode()
