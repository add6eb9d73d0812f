"""Recording a visit: the one call (per shard) that puts a person online, in their room.

A recorded visit is the one Redis call on the request path, so this module builds its keys and
arguments from what it worked out once per Config, shard and kind (``_Recording``), rather than
anew on every request. The script itself is ``lua/record.lua``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from django.dispatch import receiver

from whos_online import counters, identity, keyspace, lua
from whos_online.conf import config_changed
from whos_online.store.keys import (
    KINDS,
    ROOM_PREFIX,
    ROOMS_INDEX,
    ROOMS_WHERE,
    member_shard,
    peak_key,
    place,
    score,
    user_key,
    visitors_key,
)
from whos_online.store.scripts import ScriptCall, run

if TYPE_CHECKING:
    from collections.abc import Mapping

    from whos_online.conf import Config
    from whos_online.connection import Client
    from whos_online.users import UserDetails


# The record script's arguments, in ARGV order; ``lua/record.lua`` says what each holds.
# ``record_calls`` fills them by name and the script reads them into Lua locals of the same names,
# so that neither side counts positions (a test checks that the two lists agree).
RECORD_ARGUMENTS: Final = (
    "member",
    "score",
    "visitor",
    "visitors_expire_at",
    "seen_ttl",
    "name",
    "url",
    "former",
    "place",
    "former_places",
    "room",
    "room_prefix",
    "mode",
    "sampling",
    "online_since",
    "counter_prefix",
    "precisions",
    "may_stop",
    "second",
)


@dataclass(frozen=True)
class Visit:
    """One visit to record.

    ``kind`` is the set the visitor joins ("users", "guests" or "bots"; a user also gives
    ``user``, whose ``hidden`` moves them to "hidden"). ``former`` is who the visitor was until
    this visit, taken off the online sets in the same step: the guest's (or bot's) member when a
    user logs in, the user's pk when they log out ("" for none). ``visitor`` is what the day's
    unique-visitor HyperLogLog receives ("" adds nothing).
    """

    kind: str
    member: str
    now: float
    user: UserDetails | None = None
    former: str = ""
    visitor: str = ""
    #: The room the visit is in ("" for none: the visitor leaves the room they were in).
    room: str = ""
    #: How the visit places the visitor (``rooms.GO``, ``KEEP`` or ``STAY``).
    room_mode: str = "go"


#: The sets a former identity leaves: a user's pk leaves both user sets, a guest's (or bot's)
#: member both anonymous sets.
_FORMER_SETS: Final = {
    "users": ("guests", "bots"),
    "hidden": ("guests", "bots"),
    "guests": ("users", "hidden"),
    "bots": ("users", "hidden"),
}


@dataclass(frozen=True)
class _ShardLayout:
    """The keys and arguments that every visit of one kind to one shard sends alike."""

    joined: str
    #: For a user, the user set they are not in ("hidden" for one who is not hidden).
    other_user_set: str
    rooms: tuple[str, str]
    room_prefix: str
    #: What the visitor's field in the HASH of who is in which room begins with (see ``place``).
    place_prefix: str
    #: With one shard, the keys that sampling the counts reads and writes.
    counts: tuple[str, ...]


@dataclass(frozen=True)
class _Recording:
    """What every recorded visit under one Config sends alike, and, per shard and kind, the keys
    and arguments its visits share: worked out once and kept, rather than made again on every
    recorded request."""

    peak: str
    known: str
    counter_prefix: str
    precisions: str
    may_stop: str
    last_seen: int
    #: Whether a visit samples the online counts itself: only when one shard holds everybody.
    samples: bool
    _layouts: dict[tuple[int, str], _ShardLayout] = field(default_factory=dict, compare=False)

    def layout(self, shard: keyspace.Shard, kind: str) -> _ShardLayout:
        found = self._layouts.get((shard.index, kind))
        if found is None:
            found = self._layouts[shard.index, kind] = _ShardLayout(
                joined=shard.key(kind),
                other_user_set=shard.key("hidden" if kind == "users" else "users"),
                rooms=(shard.key(ROOMS_WHERE), shard.key(ROOMS_INDEX)),
                room_prefix=shard.key(ROOM_PREFIX),
                place_prefix=place(kind, ""),
                counts=(*(shard.key(name) for name in KINDS), self.peak, self.known)
                if self.samples
                else (),
            )
        return found


def _recording(config: Config) -> _Recording:
    precisions = config.counter_precisions
    return _Recording(
        peak=peak_key(config),
        known=counters.known_key(config),
        counter_prefix=counters.counter_prefix(config),
        precisions=counters.precisions_arg(precisions),
        may_stop="".join("1" if flag else "0" for flag in _may_stop(precisions)),
        last_seen=config.last_seen_days * 86400,
        samples=config.shards == 1,
    )


recording_of: Final = keyspace.PerConfig(_recording)


@functools.lru_cache(maxsize=64)
def _day_visitors_key(shard: keyspace.Shard, day_number: int) -> str:
    return visitors_key(shard, identity.utc_day(day_number * 86400))


def _former_places(kind: str, former: str) -> str:
    """The fields of the identity a visitor leaves: a guest's or bot's, or a user's."""
    return ",".join(dict.fromkeys(place(name, former) for name in _FORMER_SETS[kind]))


def record_calls(
    config: Config,
    visit: Visit,
    *,
    hits: Mapping[tuple[str, int], int] | None = None,
    batch: tuple[str, int] | None = None,
) -> list[ScriptCall]:
    """The calls that record ``visit``: one, to the visitor's shard, unless the visitor's former
    identity lives in another shard.

    ``hits`` ride along only when the visit samples (one shard), as the ``batch`` (process token,
    number) they were taken as (see ``hits``); the caller keeps them otherwise.
    """
    user, member, now = visit.user, visit.member, visit.now
    kind = visit.kind if user is None else ("hidden" if user.hidden else "users")
    fixed = recording_of(config)
    shard = member_shard(config, kind, member)
    layout = fixed.layout(shard, kind)
    day_number = int(now // 86400)
    keys = [layout.joined]
    if visit.visitor:
        keys.append(_day_visitors_key(shard, day_number))
    if user is not None:
        keys += (layout.other_user_set, user_key(shard, member))
    former = former_places = ""
    calls = []
    if visit.former:
        former_sets = _FORMER_SETS[kind]
        former_shard = member_shard(config, former_sets[0], visit.former)
        former_keys = [former_shard.key(name) for name in former_sets]
        places = _former_places(kind, visit.former)
        if former_shard == shard:
            keys += former_keys
            former, former_places = visit.former, places
        else:
            calls.append(
                ScriptCall(
                    lua.LEAVE,
                    [*former_keys, former_shard.key(ROOMS_WHERE)],
                    [visit.former, former_shard.key(ROOM_PREFIX), places],
                )
            )
    keys += layout.rooms
    arguments: dict[str, str | int | float] = {
        "member": member,
        "score": score(now),
        "visitor": visit.visitor,
        # The day's HyperLogLog lives LAST_SEEN_DAYS after the day ends.
        "visitors_expire_at": (day_number + 1) * 86400 + fixed.last_seen,
        "seen_ttl": "" if user is None else fixed.last_seen,
        "name": "" if user is None else user.name,
        "url": "" if user is None else user.url,
        "former": former,
        "place": layout.place_prefix + member,
        "former_places": former_places,
        "room": visit.room,
        "room_prefix": layout.room_prefix,
        "mode": visit.room_mode,
        "sampling": "0",
    }
    extra: list[str | int | float] = []
    if fixed.samples:
        keys += layout.counts
        arguments.update(
            sampling=_sampling.flag(int(now)),
            online_since=score(now - config.window),
            counter_prefix=fixed.counter_prefix,
            precisions=fixed.precisions,
            may_stop=fixed.may_stop,
            second=int(now),
        )
        extra = [*counters.batch_args(config, batch), *counters.increment_args(hits or {})]
    # Those after ``sampling`` are left out when it is '0'; a name missing before them fails here.
    args = [arguments[name] for name in RECORD_ARGUMENTS[: len(arguments)]]
    return [ScriptCall(lua.RECORD, keys, args + extra), *calls]


def record(client: Client, config: Config, visit: Visit) -> Any:
    """Record one visit (see ``record_calls``); returns 1 if the visitor was not online until
    now, else 0."""
    return run(client, record_calls(config, visit))[0]


class _SamplingSeconds:
    """Which second this process last sampled the counts in, so that its first visit of each
    second samples them whoever the visitor is ('1'), and the others only for someone new ('?').

    Two threads may both take the same second as their first: they sample twice, which is
    harmless (each slice keeps the largest count).
    """

    def __init__(self) -> None:
        self.last = -1

    def flag(self, second: int) -> str:
        if second == self.last:
            return "?"
        self.last = second
        return "1"


_sampling: Final = _SamplingSeconds()


@receiver(config_changed, dispatch_uid="whos_online.store.visits.reset")
def reset(**kwargs: object) -> None:
    _sampling.last = -1


@functools.lru_cache(maxsize=8)
def _may_stop(precisions: tuple[int, ...]) -> tuple[bool, ...]:
    # A slice contains the current slice of every finer precision only if it is a multiple of it.
    return tuple(
        all(coarser % precision == 0 for coarser in precisions[index + 1 :])
        for index, precision in enumerate(precisions)
    )
