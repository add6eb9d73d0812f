"""What reading whos_online returns: the values of the Python API, and the ``Snapshot`` that the
template tags, the JSON view, the dashboard and the metrics read from; and what a call of the
record script answers (``Reply``).

Everything shown of the site at one moment comes from one snapshot, so that a page never mixes
two moments; its properties make API values only when a page asks for them.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Final, NamedTuple

from whos_online.backend import keyspace
from whos_online.store.users import linkable_url

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from whos_online.store.users import UserDetails


@dataclass(frozen=True)
class OnlineUser:
    pk: object
    name: str
    url: str
    last_seen: datetime

    def __str__(self) -> str:
        return self.name


class OnlineCounts(NamedTuple):
    users: int
    guests: int
    bots: int
    #: People online: users (hidden ones included) and guests, not bots.
    total: int


EMPTY_COUNTS: Final = OnlineCounts(0, 0, 0, 0)


class Peak(NamedTuple):
    """The most people (users and guests, not bots) ever online at once, and when."""

    people: int
    #: None until someone has been recorded (or since the peak was reset).
    when: datetime | None


NO_PEAK: Final = Peak(0, None)


class Presence(NamedTuple):
    online: bool
    #: When the user was last recorded, or None (never, or longer ago than LAST_SEEN_DAYS).
    last_seen: datetime | None


UNKNOWN_PRESENCE: Final = Presence(online=False, last_seen=None)


def as_timestamp(now: float | datetime | None) -> float:
    """A time the API was given (Unix seconds, an aware datetime, or None for now)."""
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        return now.timestamp()
    return float(now)


def as_utc_date(day: date | datetime | None, now: float) -> date:
    """A day the API was given: a date, the UTC day of an aware datetime, or None for ``now``'s."""
    if day is None:
        return as_datetime(now).date()
    if isinstance(day, datetime):
        return as_datetime(day.timestamp()).date() if day.tzinfo else day.date()
    return day


def as_datetime(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc)


def as_peak(people: int, at: float | None) -> Peak:
    if not people or at is None:
        return NO_PEAK
    return Peak(people, as_datetime(at))


class ListedUser(NamedTuple):
    """One listed user as the snapshot read it (a tuple: up to DISPLAY_LIMIT made per render)."""

    pk: str
    seen: float
    name: str
    url: str


@dataclass(frozen=True)
class Snapshot:
    visible: int
    hidden: int
    guests: int
    bots: int
    #: The listed users as the snapshot script returns them, (pk, score, name, url) flattened.
    rows: Sequence[bytes | str] = ()
    peak_people: int = 0
    #: When the peak was reached (Unix time), or None before anyone was recorded.
    peak_at: float | None = None
    #: Approximate distinct users and guests of the snapshot's UTC day.
    visitors: int = 0
    #: How many names were asked for (None: everyone), so that a kept snapshot can tell whether
    #: it answers a later read.
    limit: int | None = 0
    #: When it was read (Unix time): visits written since are not in it.
    read_at: float = 0.0
    #: The epoch of each shard it was read from, by hash tag (see ``whos_online.store.epochs``).
    epochs: Mapping[str, str] = field(default_factory=dict)
    #: Whether it counts each reader it was asked about, by person key (``counts_reader``).
    readers: Mapping[str, bool] = field(default_factory=dict)

    def counts_reader(self, person: str) -> bool | None:
        """Whether it counts the person whose key is ``person``: None when the read did not
        look for them."""
        return self.readers.get(person)

    @functools.cached_property
    def listed(self) -> list[ListedUser]:
        """The newest visible users, read from ``rows`` on first use: a page that only counts
        (``{% online_count %}``) never pays for the up to DISPLAY_LIMIT of them."""
        text = keyspace.text
        fields = iter(self.rows)
        return [
            # A URL stored by an older version, or by another app, is checked again here.
            ListedUser(text(pk), float(seen), text(name), linkable_url(text(url)))
            for pk, seen, name, url in zip(fields, fields, fields, fields, strict=True)
        ]

    @functools.cached_property
    def users(self) -> list[OnlineUser]:
        """The listed users as the API returns them, primary keys typed as the user model's."""
        from whos_online.store.users import pk_values

        pks = pk_values(row.pk for row in self.listed)
        return [
            OnlineUser(pk=pk, name=row.name, url=row.url, last_seen=as_datetime(row.seen))
            for pk, row in zip(pks, self.listed, strict=True)
        ]

    @property
    def more(self) -> int:
        """Visible users online beyond those listed; hidden users are never part of it."""
        return max(self.visible - len(self.listed), 0)

    @property
    def counts(self) -> OnlineCounts:
        users = self.visible + self.hidden
        return OnlineCounts(
            users=users, guests=self.guests, bots=self.bots, total=users + self.guests
        )

    @property
    def peak(self) -> Peak:
        return as_peak(self.peak_people, self.peak_at)

    def answers(self, limit: int | None) -> bool:
        """Whether this snapshot holds everything a read of ``limit`` names would."""
        if self.limit is None:
            return True
        return limit is not None and limit <= self.limit

    def with_one_more(self, kind: str, user: UserDetails | None = None) -> Snapshot:
        """This snapshot with one more of ``kind`` ("users", "hidden", "guests" or "bots"); a
        visible user is listed first, as the one seen last, and the names stay within
        ``limit`` (the last one listed becomes one of "N more")."""
        if kind == "hidden":
            return replace(self, hidden=self.hidden + 1)
        if kind == "guests":
            return replace(self, guests=self.guests + 1)
        if kind == "bots":
            return replace(self, bots=self.bots + 1)
        rows: Sequence[bytes | str] = self.rows
        if user is not None and self.limit != 0:
            rows = [user.pk, repr(self.read_at), user.name, user.url, *rows]
            if self.limit is not None:
                rows = rows[: 4 * self.limit]
        return replace(self, visible=self.visible + 1, rows=rows)

    def cut(self, limit: int | None) -> Snapshot:
        """This snapshot with at most ``limit`` listed users (one that ``answers`` it)."""
        if limit is None or 4 * limit >= len(self.rows):
            return self
        return replace(self, rows=self.rows[: 4 * limit], limit=limit)


#: What readers show while Redis cannot be read: nobody online, no peak, no visitors.
EMPTY_SNAPSHOT: Final = Snapshot(visible=0, hidden=0, guests=0, bots=0)


#: The values of each room change in the reply's flat list (``lua/record.lua``'s Output).
CHANGE_FIELDS: Final = ("entry", "who", "left", "entered")


class RoomChange(NamedTuple):
    """A room an entry of a batch left or entered: ``entry`` is its index in the call (from
    0); ``who`` is "" for the entry's own member, or ``<kind>:<member>`` for another identity a
    step of the entry took out of its room (a visit's former identity, a leaving identity's);
    ``left`` and ``entered`` are rooms, "" for none."""

    entry: int
    who: str
    left: str
    entered: str


@dataclass(frozen=True)
class Reply:
    """What a batch's call answers: the shard's epoch, whether each entry's visitor was not
    online until then ('1') or was ('0'), on the base shard how many layouts are recorded (a
    site that changed ``SHARDS``), and the batch's room changes."""

    epoch: str
    arrived: str
    layouts: int
    changes: tuple[RoomChange, ...] = ()


def parse_reply(raw: Sequence[object]) -> Reply:
    """Read the record script's reply: its epoch, arrived, layouts and room changes."""
    epoch, arrived, layouts, flat = raw
    assert isinstance(flat, (list, tuple))
    assert isinstance(layouts, (int, str, bytes))
    changes = tuple(
        RoomChange(
            int(flat[start]) - 1,
            keyspace.text(flat[start + 1]),
            keyspace.text(flat[start + 2]),
            keyspace.text(flat[start + 3]),
        )
        for start in range(0, len(flat) - len(CHANGE_FIELDS) + 1, len(CHANGE_FIELDS))
    )
    return Reply(_text(epoch), _text(arrived), int(layouts), changes)


def _text(value: object) -> str:
    assert isinstance(value, (bytes, str))
    return keyspace.text(value)
