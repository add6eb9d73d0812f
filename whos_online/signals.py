"""Signals whos_online sends, for code of the site that reacts to presence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.dispatch import Signal

from whos_online.recording.throttle import recent
from whos_online.store.people import USER_KINDS, person_key
from whos_online.store.users import pk_values

if TYPE_CHECKING:
    from collections.abc import Callable

#: Sent by the cleanup (``prune``) with ``user_ids``: primary keys of the users it took off the
#: online list because they were last seen before the window. Sent once per chunk of removals.
users_went_offline = Signal()


def reporter(sender: object) -> Callable[[str, list[str]], None]:
    """What hears of the members a prune took off the online sets, a chunk at a time: this
    process forgets that it recorded them (so that their next visit is written), and
    ``users_went_offline`` tells the site of the users, from ``sender``."""

    def gone(kind: str, members: list[str]) -> None:
        recent.forget(person_key(kind, member) for member in members)
        if kind in USER_KINDS:
            users_went_offline.send(sender=sender, user_ids=pk_values(members))

    return gone
