"""Signals whos_online sends, for code of the site that reacts to presence.

``came_online``, ``entered_room`` and ``left_room`` are sent by each process's flushing thread,
once per change its flushes wrote, never on a request (``whos_online.flushing.changes`` says what
each carries, and what a retried flush sends); ``went_offline`` and ``users_went_offline`` by
the cleanup (the command, or ``prune``), once per chunk of people whose window ran out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.dispatch import Signal

from whos_online.flushing.changes import came_online, entered_room, left_room, went_offline
from whos_online.recording.throttle import recent
from whos_online.store.keys import USER_KINDS, person_key
from whos_online.store.users import pk_values

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "came_online",
    "entered_room",
    "left_room",
    "reporter",
    "users_went_offline",
    "went_offline",
]

#: Sent by the cleanup (``prune``) with ``user_ids``: primary keys of the users it took off the
#: online list because they were last seen before the window. Sent once per chunk of removals.
users_went_offline = Signal()


def reporter(sender: object) -> Callable[[str, list[str]], None]:
    """What hears of the members a prune took off the online sets, a chunk at a time: this
    process forgets that it recorded them (so that their next visit is written), and
    ``went_offline`` (everyone) and ``users_went_offline`` (users) tell the site, from
    ``sender``."""

    def gone(kind: str, members: list[str]) -> None:
        recent.forget(person_key(kind, member) for member in members)
        user_ids = pk_values(members) if kind in USER_KINDS else []
        went_offline.send(sender=sender, kind=kind, members=members, user_ids=user_ids)
        if kind in USER_KINDS:
            users_went_offline.send(sender=sender, user_ids=user_ids)

    return gone
