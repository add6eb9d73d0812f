"""A visit to record, and how it places its person among the rooms; a connection entering or
leaving a room; the person a request speaks for; and the entries of a batch they become.

What the recording side makes (``recording.visits``), the process queues (``flushing.queue``),
and a flush turns into entries (``Entry``), which the record script's calls send
(``store.record``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple

from whos_online.backend.keyspace import (
    Shard,
    member_shard,
    person_key,
    score,
    user_person_key,
    user_shard,
)
from whos_online.store import users

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

    from whos_online.config.settings import Config
    from whos_online.store.users import UserDetails

    AnyUser = AbstractBaseUser | AnonymousUser

#: How a visit places its person (``Visit.room_mode``): into its room (out of theirs for a
#: visit in none), a page view's; wherever they are, any other request's; into its room unless
#: they are in another, a page's own "still here" (``views.presence``).
GO: Final = "go"
KEEP: Final = "keep"
STAY: Final = "stay"


@dataclass(frozen=True)
class Placement:
    """Where a recorded visit puts its person (see ``GO``, ``KEEP`` and ``STAY``)."""

    room: str = ""
    mode: str = GO


#: A request that is not a page view: its person stays where they are.
STAYS_PUT: Final = Placement(mode=KEEP)


@dataclass(slots=True)
class Visit:
    """One visit to record (with slots: a process may queue 20 000 of them during an outage,
    and a visit without a ``__dict__`` takes an eighth less memory there). Not frozen: a frozen
    dataclass sets each field through ``object.__setattr__``, which made a recorded request's
    visit take 1.3 µs rather than 0.5; nothing changes a visit once made (a merge makes another).

    ``unhidden_kind`` says whether the person is a user, a guest or a bot ("users", "guests" or
    "bots"); ``kind``, the set they join, is the same but for a user whose ``hidden`` moves them
    to "hidden". ``former`` is who the visitor was until
    this visit, taken off the online sets in the same step: the guest's (or bot's) member when a
    user logs in, the user's pk when they log out ("" for none). ``daily_id`` is what the day's
    unique-visitor HyperLogLog receives ("" adds nothing).
    """

    unhidden_kind: str
    member: str
    seen_at: float
    user: UserDetails | None = None
    former: str = ""
    daily_id: str = ""
    #: The room the visit is in ("" for none: the visitor leaves the room they were in).
    room: str = ""
    #: How the visit places the visitor (``GO``, ``KEEP`` or ``STAY``).
    room_mode: str = GO
    #: The room's title for people, written as the visitor enters it ("" for none).
    title: str = ""

    @property
    def kind(self) -> str:
        """The set the visitor joins: a user's depends on whether they are hidden."""
        if self.user is None:
            return self.unhidden_kind
        return "hidden" if self.user.hidden else "users"

    @property
    def person(self) -> str:
        """Who the visit is of, the same whichever set a user is in (``u:<pk>``)."""
        return person_key(self.kind, self.member)


@dataclass(frozen=True, slots=True)
class Link:
    """A connection of a person entering (or renewing) ``room``, or ``leaving`` it, at ``seen_at``.

    ``connection`` is the caller's id of one connection (a Channels consumer's
    ``channel_name``). A person is in a room while any of their connections there was renewed
    within ``WINDOW``, whatever their page room (``lua/record.lua``); entering is also a visit
    that keeps them where they are, so ``kind`` is the set they join ("users", "hidden", "guests"),
    with ``user`` for a user and ``daily_id`` for the day's HyperLogLog, as a ``Visit``'s.
    """

    kind: str
    member: str
    room: str
    connection: str
    seen_at: float
    leaving: bool = False
    user: UserDetails | None = None
    daily_id: str = ""

    @property
    def person(self) -> str:
        return person_key(self.kind, self.member)


class Visitor:
    """Who makes a request, as they are recorded: a user, or a guest's or bot's set and member.

    Their shard is worked out with them, since recording them asks it at every step. A user's
    details (display name, profile URL, whether ``HIDE_USER`` hides them) are worked out when
    first asked, once: only a write or a page that lists its viewer needs them."""

    __slots__ = ("_details", "key", "kind", "member", "shard", "user")

    def __init__(
        self,
        *,
        shard: Shard,
        user: AnyUser | None = None,
        kind: str = "",
        member: str = "",
        key: str = "",
    ) -> None:
        self.shard = shard
        self.user = user
        #: "guests" or "bots" for an anonymous visitor; see ``kind_of`` for a user's.
        self.kind = kind
        self.member = member
        #: Their key in the process's queue and memory (``backend.keyspace``).
        self.key = key
        self._details: UserDetails | None = None

    @classmethod
    def of_user(cls, user: AnyUser, config: Config) -> Visitor:
        pk = users.pk_text(user)
        return cls(shard=user_shard(config, pk), user=user, member=pk, key=user_person_key(pk))

    @classmethod
    def of_guest(cls, kind: str, member: str, config: Config) -> Visitor:
        shard = member_shard(config, kind, member)
        return cls(shard=shard, kind=kind, member=member, key=person_key(kind, member))

    def details(self, config: Config) -> UserDetails | None:
        """A user's details (None for a guest or a bot)."""
        if self.user is None:
            return None
        if self._details is None:
            self._details = users.details(self.user, config)
        return self._details

    def kind_of(self, config: Config) -> str:
        """The set they are counted in: "users", "hidden", "guests" or "bots"."""
        details = self.details(config)
        if details is None:
            return self.kind
        return "hidden" if details.hidden else "users"


#: What an entry of a batch is (``lua/record.lua``): a visit, an identity leaving the online sets
#: and rooms of its shard, a page's reader leaving its room, a connection entering (or renewing)
#: its room, a connection leaving it.
VISIT: Final = "v"
LEAVE: Final = "l"
LEAVE_ROOM: Final = "r"
ENTER: Final = "e"
EXIT: Final = "x"
#: The values of an entry, in the order an entry recorded one by one sends them (a plain visit
#: sends some of them: ``store.record``). A call sends these names first: ``lua/record.lua``
#: refuses a call whose names are not those it reads.
# Words split from a string: a name per line would make the list longer than the protocol.
ENTRY_ARGUMENTS: Final = tuple(
    "op kind member score visitor hll day_end name url former "  # noqa: SIM905
    "room mode title connection".split()
)


class Entry(NamedTuple):
    """One entry of a shard's batch: its shard, the day of its visitors HyperLogLog (None for
    none), its arguments (with "0" for that HyperLogLog's index in the call's keys, which the
    call sets), and for a visit, when it was made (0 for the other entries).

    A tuple, made and read once per visit on every flush: cheaper than a frozen dataclass."""

    shard: Shard
    day: int | None
    fields: tuple[str, ...]
    at: float = 0.0


def _entry(**named: str) -> tuple[str, ...]:
    """An entry's arguments in ``ENTRY_ARGUMENTS`` order ("" for those not named)."""
    return tuple(named.get(name, "") for name in ENTRY_ARGUMENTS)


#: The sets a former person leaves: a user's pk leaves both user sets, a guest's (or bot's)
#: member both anonymous sets; by the kind of the visitor.
FORMER_KIND: Final = {"users": "guests", "hidden": "guests", "guests": "users", "bots": "users"}


def entries_of(config: Config, visit: Visit) -> list[Entry]:
    """The entries that record ``visit``: one in the visitor's shard, and one more, in its own
    shard, for a former person who lives in another."""
    kind, user, member, now = visit.kind, visit.user, visit.member, visit.seen_at
    shard = member_shard(config, kind, member)
    former = visit.former
    entries = []
    if former:
        former_kind = FORMER_KIND[kind]
        former_shard = member_shard(config, former_kind, former)
        if former_shard != shard:
            entries.append(_leaving(former_shard, former_kind, former, now))
            former = ""
    daily_id = visit.daily_id
    day = int(now // 86400) if daily_id else None
    # In ENTRY_ARGUMENTS order, written out: this runs for every visit of every flush.
    fields = (
        VISIT,
        kind,
        member,
        score(now),
        daily_id,
        "0",
        day_end(day or 0),
        "" if user is None else user.name,
        "" if user is None else user.url,
        former,
        visit.room,
        visit.room_mode,
        visit.title,
        "",
    )
    entries.append(Entry(shard, day, fields, now))
    return entries


def link_entry(config: Config, link: Link) -> Entry:
    """The entry of a connection entering (or renewing) its room, or leaving it, in the shard
    of its person."""
    shard = member_shard(config, link.kind, link.member)
    if link.leaving:
        fields = _entry(
            op=EXIT,
            kind=link.kind,
            member=link.member,
            score=score(link.seen_at),
            hll="0",
            room=link.room,
            connection=link.connection,
        )
        return Entry(shard, None, fields)
    user = link.user
    day = int(link.seen_at // 86400) if link.daily_id else None
    fields = _entry(
        op=ENTER,
        kind=link.kind,
        member=link.member,
        score=score(link.seen_at),
        visitor=link.daily_id,
        hll="0",
        day_end=day_end(day or 0),
        name="" if user is None else user.name,
        url="" if user is None else user.url,
        room=link.room,
        mode=KEEP,
        connection=link.connection,
    )
    return Entry(shard, day, fields, link.seen_at)


@functools.lru_cache(maxsize=4)
def day_end(day: int) -> str:
    """When the UTC day ``day`` (days since the epoch) ends, as an entry sends it."""
    return str((day + 1) * 86400)


def _leaving(shard: Shard, kind: str, member: str, now: float) -> Entry:
    fields = _entry(op=LEAVE, kind=kind, member=member, score=score(now), hll="0")
    return Entry(shard, None, fields, now)


def leaving_entry(config: Config, pk: str, now: float) -> Entry:
    """The entry that takes user ``pk`` off the online list as of ``now`` (a logout), in this
    layout of shards, unless they were seen since."""
    return _leaving(member_shard(config, "users", pk), "users", pk, now)


def leave_room_entry(config: Config, kind: str, member: str, room: str, *, at: float) -> Entry:
    """The entry of a page's reader leaving ``room`` at ``at``: they count in it a few seconds
    more (``LEAVE_GRACE``), if it is still theirs."""
    shard = member_shard(config, kind, member)
    fields = _entry(op=LEAVE_ROOM, kind=kind, member=member, score=score(at), hll="0", room=room)
    return Entry(shard, None, fields)
