"""Recording visits: the batches of ``lua/record.lua``, one call per shard, that put people
online, in their rooms (a call's answer is ``results.Reply``).

Queued visits become entries in their shards, and a shard's entries its call; what every call of
a Config sends alike is worked out once (``_Recording``), not on every flush.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, NamedTuple

from whos_online.backend import keyspace
from whos_online.backend.keyspace import (
    GONE_PREFIX,
    KINDS,
    ROOM_PREFIX,
    ROOMS_INDEX,
    ROOMS_WHERE,
    USER_KINDS,
    epoch_key,
    layouts_key,
    peak_key,
    score,
    utc_day,
    visitors_key,
)
from whos_online.config.process import PerProcess
from whos_online.store import counters, lua
from whos_online.store.items import (
    ENTRY_ARGUMENTS,
    FORMER_KIND,
    GO,
    KEEP,
    VISIT,
    Entry,
    day_end,
    entries_of,
)
from whos_online.store.results import Reply, parse_reply
from whos_online.store.scripts import ScriptCall, run

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config
    from whos_online.store.items import Visit


#: The values of a batch's header, in the order sent (an entry's: ``items.ENTRY_ARGUMENTS``). A
#: call sends these names first: ``lua/record.lua`` refuses a call whose names are not those it
#: reads.
# Words split from a string: a name per line would make the list longer than the protocol.
HEADER_ARGUMENTS: Final = tuple(
    "now online_since seen_ttl user_prefix room_prefix sampling "  # noqa: SIM905
    "counter_prefix precisions may_stop second epoch layout visitors_ttl window leave_grace "
    "gone_prefix count views others plain_hll plain_day_end".split()
)
_NAMES: Final = (",".join(HEADER_ARGUMENTS), ",".join(ENTRY_ARGUMENTS))
#: Entries of one call at most: about as many milliseconds of Redis time, so that a long backlog
#: (sent after an outage) does not stall Redis for its other clients. A shard's entries beyond it
#: go in further calls of the same round trip.
MAX_ENTRIES_PER_CALL: Final = 500


#: Where an entry's values are in ``Entry.fields``.
_OP, _KIND, _MEMBER, _SCORE, _VISITOR, _HLL, _NAME, _URL, _FORMER, _ROOM, _MODE, _TITLE = (
    ENTRY_ARGUMENTS.index(name)
    for name in "op kind member score visitor hll name url former room mode title".split()  # noqa: SIM905
)


@dataclass(frozen=True)
class Extras:
    """What only the shard whose slot holds the site-wide keys receives in a flush: the layout
    to register ('' for none), and the page hits riding along, as the ``batch`` (process token,
    number) they were taken as (see ``hits``)."""

    layout: str = ""
    hits: Mapping[tuple[str, int], int] | None = None
    batch: tuple[str, int] | None = None


class Calls(NamedTuple):
    """The calls that write a shard's entries, and those entries in the order the calls write
    them, ``MAX_ENTRIES_PER_CALL`` to each: what a call answers of its entries (who arrived,
    the room changes) is in that order."""

    calls: list[ScriptCall]
    entries: list[Entry]


class _Lanes(NamedTuple):
    """A shard's entries as its calls send them: those recorded one by one, in the order given,
    then the plain page views and the plain other requests (``lua/includes/record_plain``)."""

    general: list[Entry]
    views: list[Entry]
    others: list[Entry]


def _person(kind: str, member: str) -> str:
    """Who an entry names, as the plain lanes tell people apart: a user by their pk whatever
    their set, a guest or bot by their member (a guest and a bot of one member count as one)."""
    return ("u:" if kind in USER_KINDS else "a:") + member


_PLAIN_MODES: Final = {GO: True, KEEP: False}


def _lanes(entries: Sequence[Entry]) -> _Lanes:
    """Which of ``entries`` are plain: a visit with no former person, a page view (``GO``) or
    another request (``KEEP``), of someone no other entry names, its visitor of the same day as
    the other plain ones'. A room's title is written in the order of the entries: so if any
    entry recorded one by one carries a title, so do all the titled page views."""
    named: dict[str, int] = {}
    for entry in entries:
        fields = entry.fields
        key = _person(fields[_KIND], fields[_MEMBER])
        named[key] = named.get(key, 0) + 1
        if fields[_FORMER]:
            key = _person(FORMER_KIND[fields[_KIND]], fields[_FORMER])
            named[key] = named.get(key, 0) + 1
    lanes: list[int] = []  # by entry: 0 recorded one by one, 1 a plain view, 2 another
    day: int | None = None
    titled = False
    for entry in entries:
        fields = entry.fields
        view = _PLAIN_MODES.get(fields[_MODE])
        if (
            view is None
            or fields[_OP] != VISIT
            or fields[_FORMER]
            or named[_person(fields[_KIND], fields[_MEMBER])] > 1
            or (entry.day is not None and day is not None and entry.day != day)
        ):
            lanes.append(0)
            titled = titled or bool(fields[_TITLE])
            continue
        if entry.day is not None:
            day = entry.day
        lanes.append(1 if view else 2)
    if titled:
        lanes = [
            0 if lane == 1 and entry.fields[_TITLE] else lane
            for entry, lane in zip(entries, lanes, strict=True)
        ]
    general: list[Entry] = []
    views: list[Entry] = []
    others: list[Entry] = []
    by_lane = (general, views, others)
    for entry, lane in zip(entries, lanes, strict=True):
        by_lane[lane].append(entry)
    return _Lanes(general, views, others)


def batch_calls(
    config: Config,
    shard: keyspace.Shard,
    entries: Sequence[Entry],
    *,
    now: float,
    epoch: str,
    extras: Extras | None = None,
) -> Calls:
    """The calls that write ``entries`` in ``shard``: one, unless there are more than
    ``MAX_ENTRIES_PER_CALL``; ``extras`` go with the first, on the base shard only. ``now`` is
    the time of the flush; the counts are sampled as of the latest visit's."""
    now = max((entry.at for entry in entries), default=0.0) or now
    lanes = _lanes(entries)
    ordered = [*lanes.general, *lanes.views, *lanes.others]
    # Where each lane ends in ``ordered``: a call takes what of each lies in its slice.
    ends = (len(lanes.general), len(lanes.general) + len(lanes.views), len(ordered))
    calls = []
    for index, start in enumerate(range(0, max(len(ordered), 1), MAX_ENTRIES_PER_CALL)):
        stop = start + MAX_ENTRIES_PER_CALL
        general = ordered[start : min(stop, ends[0])]
        views = ordered[max(start, ends[0]) : min(stop, ends[1])]
        others = ordered[max(start, ends[1]) : min(stop, ends[2])]
        first = extras if index == 0 and shard.is_base else None
        chunk = _Lanes(general, views, others)
        calls.append(_call(config, shard, chunk, now=now, epoch=epoch, extras=first))
    return Calls(calls, ordered)


def _call(
    config: Config,
    shard: keyspace.Shard,
    lanes: _Lanes,
    *,
    now: float,
    epoch: str,
    extras: Extras | None,
) -> ScriptCall:
    fixed = recording_of(config)
    shard_keys = fixed.of(shard)
    keys = list(shard_keys.keys)
    sampling = "0"
    if shard.is_base and fixed.samples and any(lanes):
        sampling = _sampling.get().flag(int(now))
    hll_index: dict[int, int] = {}

    def hll_of(day: int) -> int:
        index = hll_index.get(day)
        if index is None:
            keys.append(_day_visitors_key(shard, day))
            index = hll_index[day] = len(keys)
        return index

    plain_day = next(
        (entry.day for entry in (*lanes.views, *lanes.others) if entry.day is not None), None
    )
    header: dict[str, str | int | float] = {
        "now": score(now),
        "online_since": score(now - config.window),
        "seen_ttl": fixed.last_seen,
        "user_prefix": shard_keys.user_prefix,
        "room_prefix": shard_keys.room_prefix,
        "sampling": sampling,
        "counter_prefix": fixed.counter_prefix,
        "precisions": fixed.precisions,
        "may_stop": fixed.may_stop,
        "second": int(now),
        "epoch": epoch,
        "layout": (extras.layout if extras is not None else "") or "0" if shard.is_base else "",
        # A day's HyperLogLog lives LAST_SEEN_DAYS after its day ends.
        "visitors_ttl": fixed.last_seen,
        "window": config.window,
        "leave_grace": config.leave_grace,
        "gone_prefix": shard_keys.gone_prefix,
        "count": len(lanes.general),
        "views": len(lanes.views),
        "others": len(lanes.others),
        "plain_hll": 0 if plain_day is None else hll_of(plain_day),
        "plain_day_end": day_end(plain_day or 0),
    }
    args = [*_NAMES, *(header[name] for name in HEADER_ARGUMENTS)]
    for entry in lanes.general:
        start = len(args)
        args += entry.fields
        if entry.day is not None:
            args[start + _HLL] = hll_of(entry.day)
    for lane, view in ((lanes.views, True), (lanes.others, False)):
        for entry in lane:
            fields = entry.fields
            args += (fields[_KIND], fields[_MEMBER], fields[_SCORE], fields[_VISITOR])
            if view:
                args += (fields[_ROOM], fields[_TITLE])
            if fields[_KIND] in USER_KINDS:
                args += (fields[_NAME], fields[_URL])
    if shard.is_base:
        hits = extras.hits if extras is not None else None
        batch = extras.batch if extras is not None else None
        args += [*counters.batch_args(config, batch), *counters.increment_args(hits or {})]
    return ScriptCall(lua.RECORD, keys, args)


def entries_in(call: ScriptCall) -> int:
    """How many entries a call of ``batch_calls`` writes."""
    header = len(_NAMES)
    return sum(
        int(call.args[header + HEADER_ARGUMENTS.index(name)])
        for name in ("count", "views", "others")
    )


def record(
    client: Client, config: Config, visits: Sequence[Visit], *, epoch: str = "-"
) -> list[Reply]:
    """Write ``visits`` at once, each shard's in one call, all in one round trip on one Redis:
    for the benchmarks and for tools that record visits without a process's queue. ``epoch`` is
    what a shard with none takes."""
    groups: dict[str, tuple[keyspace.Shard, list[Entry]]] = {}
    for visit in visits:
        for entry in entries_of(config, visit):
            groups.setdefault(entry.shard.tag, (entry.shard, []))[1].append(entry)
    now = max((visit.seen_at for visit in visits), default=0.0)
    calls = [
        call
        for shard, entries in groups.values()
        for call in batch_calls(config, shard, entries, now=now, epoch=epoch).calls
    ]
    return [parse_reply(raw) for raw in run(client, calls)]


@dataclass(frozen=True)
class _ShardKeys:
    """The keys and prefixes every batch of one shard sends alike."""

    keys: tuple[str, ...]
    user_prefix: str
    room_prefix: str
    gone_prefix: str


@dataclass(frozen=True)
class _Recording:
    """What every batch under one Config sends alike, and per shard its keys, worked out once
    and kept rather than made again on every flush."""

    counter_prefix: str
    precisions: str
    may_stop: str
    last_seen: int
    #: Whether a batch samples the online counts itself: only when one shard holds everybody.
    samples: bool
    #: The site-wide keys that the base shard's batches declare after the shard's own: the peak,
    #: the known counters and the layouts seen.
    site_keys: tuple[str, str, str]
    #: By shard tag (a layout of another SHARDS, being erased, has tags of its own).
    _shards: dict[str, _ShardKeys] = field(default_factory=dict, compare=False)

    def of(self, shard: keyspace.Shard) -> _ShardKeys:
        found = self._shards.get(shard.tag)
        if found is None:
            keys = (
                *(shard.key(kind) for kind in KINDS),
                shard.key(ROOMS_WHERE),
                shard.key(ROOMS_INDEX),
                epoch_key(shard),
            )
            found = self._shards[shard.tag] = _ShardKeys(
                keys=keys + self.site_keys if shard.is_base else keys,
                user_prefix=shard.key("user:"),
                room_prefix=shard.key(ROOM_PREFIX),
                gone_prefix=shard.key(GONE_PREFIX),
            )
        return found


def _recording(config: Config) -> _Recording:
    precisions = config.counter_precisions
    return _Recording(
        counter_prefix=counters.counter_prefix(config),
        precisions=counters.precisions_arg(precisions),
        may_stop="".join("1" if flag else "0" for flag in _may_stop(precisions)),
        last_seen=config.last_seen_days * 86400,
        samples=config.shards == 1,
        site_keys=(peak_key(config), counters.known_key(config), layouts_key(config)),
    )


recording_of: Final = keyspace.PerConfig(_recording)


@functools.lru_cache(maxsize=64)
def _day_visitors_key(shard: keyspace.Shard, day_number: int) -> str:
    return visitors_key(shard, utc_day(day_number * 86400))


class _SamplingSeconds:
    """Which second this process last sampled the counts in, so that its first batch of each
    second samples them whoever the visitors are ('1'), and the others only for someone new
    ('?').

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


_sampling: Final = PerProcess(_SamplingSeconds)


@functools.lru_cache(maxsize=8)
def _may_stop(precisions: tuple[int, ...]) -> tuple[bool, ...]:
    # A slice contains the current slice of every finer precision only if it is a multiple of it.
    return tuple(
        all(coarser % precision == 0 for coarser in precisions[index + 1 :])
        for index, precision in enumerate(precisions)
    )
