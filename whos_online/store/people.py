"""A person online, and the one place that spells the strings naming them.

A person is a member of one of the online sets: a user by primary key (in ``users``, or
``hidden`` for those ``HIDE_USER`` hides), a guest or a bot by the pseudonym of their address.
Besides the member itself, one more string names them: their *key*, ``u:<pk>`` for a user
whichever set holds them, ``<kind>:<member>`` otherwise. The process's queue and its memory of
recent visitors are keyed by it, the HASH of who is in which room holds it as a field, and a
user's shard is chosen by it (a guest's by the member alone), so it must be spelled the same
everywhere: here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: The sets of users, shown or hidden.
USER_KINDS: Final = frozenset({"users", "hidden"})


@dataclass(frozen=True)
class Person:
    """Someone in an online set: ``kind`` is the set ("users", "hidden", "guests" or "bots"),
    ``member`` their member in it (a user's pk as text, a guest's or bot's pseudonym)."""

    kind: str
    member: str

    @property
    def key(self) -> str:
        return person_key(self.kind, self.member)

    @property
    def is_user(self) -> bool:
        return self.kind in USER_KINDS


def person_key(kind: str, member: str) -> str:
    """The key of the member ``member`` of set ``kind`` (see the module's docstring)."""
    return user_person_key(member) if kind in USER_KINDS else f"{kind}:{member}"


def user_person_key(pk: str) -> str:
    """The key of the user whose pk is ``pk``, hidden or not."""
    return f"u:{pk}"


def former_guest_keys(member: str) -> list[str]:
    """The keys a guest (or a bot) with ``member`` was known by, before they logged in."""
    return [person_key("guests", member), person_key("bots", member)]
