"""The Redis keys and commands of presence: who is online, the peak and the daily visitors.

Keys are made by ``keyspace``: the people online under the hash tag of their shard, the site-wide
keys under the base tag; the counters have their own module.

Writes that belong together go out in one round trip: a Lua script where the work must be atomic
or reads what it writes, a pipeline otherwise. Nothing here is O(number of people online) except
``prune_chunk``, which is bounded by its chunk size, and ``snapshot(limit=None)``, which the API
documents as a full listing.

Functions take the client explicitly: the request path passes its short-timeout client and lets
the caller fail open; the cleanup command passes a patient one and lets errors surface.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from django.dispatch import receiver
from redis.exceptions import NoScriptError

from whos_online import counters, identity, keyspace, lua
from whos_online.conf import config_changed
from whos_online.connection import execute, is_cluster
from whos_online.results import Snapshot

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from datetime import date

    from whos_online.conf import Config
    from whos_online.connection import Client

#: Per shard: the HASH of who is in which room, the sorted set of rooms by their latest visit,
#: and how the keys of a room's sets begin (``room:<name>:<kind>``).
ROOMS_WHERE: Final = "rooms:where"
ROOMS_INDEX: Final = "rooms"
ROOM_PREFIX: Final = "room:"

#: The sorted sets of people and bots, by kind. ``hidden`` holds users who are counted, not named.
KINDS: Final = ("users", "hidden", "guests", "bots")

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
    "sampling",
    "online_since",
    "counter_prefix",
    "precisions",
    "may_stop",
    "second",
)

#: Rooms of one shard read from its index per step of the cleanup.
ROOMS_PAGE_SIZE: Final = 500

#: Members removed per prune call: about a millisecond of Redis time each.
PRUNE_CHUNK_SIZE: Final = 1000


def key(config: Config, suffix: str) -> str:
    """A site-wide key (under the base tag)."""
    return keyspace.key(config, suffix)


def user_key(shard: keyspace.Shard, pk: str) -> str:
    return shard.key(f"user:{pk}")


def visitors_key(shard: keyspace.Shard, day: date | str) -> str:
    text = day if isinstance(day, str) else day.isoformat()
    return shard.key(f"visitors:{text}")


@functools.lru_cache(maxsize=64)
def _day_visitors_key(shard: keyspace.Shard, day_number: int) -> str:
    return visitors_key(shard, identity.utc_day(day_number * 86400))


def _score(now: float) -> str:
    return f"{now:.3f}"


def user_shard(config: Config, pk: str) -> keyspace.Shard:
    return keyspace.shard_of(config, keyspace.user_identity(pk))


def member_shard(config: Config, kind: str, member: str) -> keyspace.Shard:
    """The shard of a member of ``kind``'s set: users by their pk, guests and bots by member."""
    if kind in {"users", "hidden"}:
        return user_shard(config, member)
    return keyspace.shard_of(config, member)


@dataclass(frozen=True)
class UserDetails:
    """What a user's display HASH holds, and whether they are counted but not named."""

    pk: str
    hidden: bool
    name: str
    url: str


@dataclass(frozen=True)
class ScriptCall:
    """One script to run on one shard: what ``run`` sends, in one pipeline or one by one."""

    source: str
    keys: list[str]
    args: list[str | int | float]


def run(client: Client, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run ``calls`` and return their replies, in one round trip where the client allows.

    On one Redis (plain or Sentinel-managed) several calls go out in one pipeline of EVALSHAs;
    scripts the server does not know yet are loaded and the pipeline is sent once more. A cluster
    client runs each call on its own (redis-py refuses EVALSHA in cluster pipelines), following
    MOVED and ASK replies, so a call costs one round trip to the node of its shard.
    """
    if len(calls) == 1 or is_cluster(client):
        return [_run_one(client, call) for call in calls]
    scripts = [keyspace.script(client, call.source) for call in calls]
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for script, call in zip(scripts, calls, strict=True):
            pipe.evalsha(script.sha, len(call.keys), *call.keys, *call.args)
        replies = pipe.execute(raise_on_error=False)
        missing = [
            script
            for script, reply in zip(scripts, replies, strict=True)
            if isinstance(reply, NoScriptError)
        ]
        if not missing or attempt:
            break
        for script in {script.sha: script for script in missing}.values():
            client.script_load(script.script)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return list(replies)


def _run_one(client: Client, call: ScriptCall) -> Any:
    """EVALSHA, or EVAL (which also loads the script) if the server lacks it.

    Not redis-py's ``Script``: its call costs about 9 µs more than the EVALSHA itself, which is
    on every recorded visit. And not its reload on a cluster, which sends SCRIPT LOAD to every
    primary, so that a master that is down would make every node that has not run the script yet
    fail too. Sent by ``connection.execute``, which spares one Redis redis-py's per-call work.
    """
    numkeys = len(call.keys)
    try:
        return execute(client, "EVALSHA", sha1_of(call.source), numkeys, *call.keys, *call.args)
    except NoScriptError:
        return execute(client, "EVAL", call.source, numkeys, *call.keys, *call.args)


@functools.cache
def sha1_of(source: str) -> str:
    """A script's SHA1, as EVALSHA names it (worked out once per script and process)."""
    return hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()


#: The sorted set each kind of visit joins, by its position in ``KINDS``.
KIND_INDEX: Final = {kind: index for index, kind in enumerate(KINDS, start=1)}
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


_recording_of: Final = keyspace.PerConfig(_recording)


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


def place(kind: str, member: str) -> str:
    """A person's field in the HASH of who is in which room: users by pk, whether hidden or not."""
    return f"u:{member}" if kind in {"users", "hidden"} else f"{kind}:{member}"


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
    fixed = _recording_of(config)
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
        "score": _score(now),
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
        "sampling": "0",
    }
    extra: list[str | int | float] = []
    if fixed.samples:
        keys += layout.counts
        arguments.update(
            sampling=_sampling.flag(int(now)),
            online_since=_score(now - config.window),
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


@receiver(config_changed, dispatch_uid="whos_online.store.reset")
def reset(**kwargs: object) -> None:
    _sampling.last = -1


@functools.lru_cache(maxsize=8)
def _may_stop(precisions: tuple[int, ...]) -> tuple[bool, ...]:
    # A slice contains the current slice of every finer precision only if it is a multiple of it.
    return tuple(
        all(coarser % precision == 0 for coarser in precisions[index + 1 :])
        for index, precision in enumerate(precisions)
    )


def peak_key(config: Config) -> str:
    return key(config, "peak")


def remove_user(
    client: Client, config: Config, pk: str, *, erase: bool = False, shards: int | None = None
) -> None:
    """Take a user off the online list and out of their room, in one call; with ``erase``, also
    drop their last-seen record.

    ``shards`` names another layout than the configured one (the cleanup's old layouts).
    """
    shard = _shard_in(config, keyspace.user_identity(pk), shards)
    keys = [shard.key("users"), shard.key("hidden"), shard.key(ROOMS_WHERE)]
    if erase:
        keys.append(user_key(shard, pk))
    run(client, [ScriptCall(lua.LEAVE, keys, [pk, shard.key(ROOM_PREFIX), place("users", pk)])])


def _shard_in(config: Config, person: str, shards: int | None) -> keyspace.Shard:
    if shards is None or shards == config.shards:
        return keyspace.shard_of(config, person)
    layout = keyspace.layout(config, shards)
    return layout[keyspace.bucket(person, len(layout))]


def room_key(shard: keyspace.Shard, room: str, kind: str) -> str:
    return shard.key(f"{ROOM_PREFIX}{room}:{kind}")


def snapshot_call(
    config: Config, shard: keyspace.Shard, *, limit: int | None, now: float, room: str = ""
) -> ScriptCall:
    """One shard's part of a snapshot of the site, or of ``room`` (its four sets only: a room
    has no visitors of the day or peak of its own)."""
    if room:
        keys = [room_key(shard, room, kind) for kind in KINDS]
    else:
        keys = [shard.key(kind) for kind in KINDS] + [visitors_key(shard, identity.utc_day(now))]
        if shard.is_base:
            keys.append(peak_key(config))
    args: list[str | int | float] = [
        _score(now - config.window),
        -1 if limit is None else limit,
        shard.key("user:"),
    ]
    return ScriptCall(lua.SNAPSHOT, keys, args)


def parse_snapshot(raw: Sequence[Any], limit: int | None) -> Snapshot:
    visible, hidden, guests, bots, rows, peak_fields, visitors = raw
    peak, peak_at = peak_fields if peak_fields else (None, None)
    return Snapshot(
        visible=int(visible),
        hidden=int(hidden),
        guests=int(guests),
        bots=int(bots),
        rows=rows,
        peak_people=int(peak or 0),
        peak_at=float(peak_at) if peak_at is not None else None,
        visitors=int(visitors),
        limit=limit,
    )


def combine(parts: Sequence[Snapshot], limit: int | None) -> Snapshot:
    """One snapshot of the whole site from one per shard: counts and visitors add up (the shards
    hold different people), the names are the newest ``limit`` of all, the peak is shard 0's."""
    if len(parts) == 1:
        return parts[0]
    listed = sorted((row for part in parts for row in part.listed), key=lambda row: -row.seen)
    if limit is not None:
        listed = listed[:limit]
    peak = max(parts, key=lambda part: part.peak_people)
    return Snapshot(
        visible=sum(part.visible for part in parts),
        hidden=sum(part.hidden for part in parts),
        guests=sum(part.guests for part in parts),
        bots=sum(part.bots for part in parts),
        rows=[field for row in listed for field in (row.pk, repr(row.seen), row.name, row.url)],
        peak_people=peak.peak_people,
        peak_at=peak.peak_at,
        visitors=sum(part.visitors for part in parts),
        limit=limit,
    )


def snapshot(
    client: Client, config: Config, *, limit: int | None, now: float, room: str = ""
) -> Snapshot:
    """Counts, the newest ``limit`` visible users, the peak and the day's visitors of the whole
    site: one call per shard, in one round trip on one Redis (a second one, for the few shards
    that need it, when the first could not tell the newest names; see ``shard_limit``)."""
    shards = keyspace.layout(config)
    asked = shard_limit(limit, len(shards))
    calls = [snapshot_call(config, shard, limit=asked, now=now, room=room) for shard in shards]
    parts = [parse_snapshot(raw, asked) for raw in run(client, calls)]
    again = unfinished(parts, limit, asked)
    if again:
        more = [
            snapshot_call(config, shards[index], limit=limit, now=now, room=room) for index in again
        ]
        for index, raw in zip(again, run(client, more), strict=True):
            parts[index] = parse_snapshot(raw, limit)
    return combine(parts, limit)


def shard_limit(limit: int | None, shards: int) -> int | None:
    """How many names to ask each of ``shards`` shards for, to list the newest ``limit``.

    The newest people are spread over the shards by a hash, so each shard holds about
    limit / shards of them: asking each for twice that (and two more) gives every name needed
    nearly always, at a fraction of the cost of asking each for ``limit``. ``unfinished`` tells
    when it did not.
    """
    if limit is None or shards == 1:
        return limit
    return min(limit, 2 * -(-limit // shards) + 2)


def unfinished(parts: Sequence[Snapshot], limit: int | None, asked: int | None) -> list[int]:
    """The shards whose names beyond the ``asked`` they returned could be among the newest
    ``limit`` of all: those that returned all they were asked for, the last of them no older than
    the ``limit``-th newest name of all returned (or fewer than ``limit`` names came back)."""
    if limit is None or asked is None or asked >= limit:
        return []
    seen = sorted((row.seen for part in parts for row in part.listed), reverse=True)
    threshold = seen[limit - 1] if len(seen) >= limit else float("-inf")
    return [
        index
        for index, part in enumerate(parts)
        if part.listed and len(part.listed) >= asked and part.listed[-1].seen >= threshold
    ]


def user_presence(client: Client, config: Config, pk: str) -> tuple[float | None, float | None]:
    """Return (score in the online sets, last seen from the HASH) for one user."""
    return users_presence(client, config, [pk])[0]


def users_presence(
    client: Client, config: Config, pks: Sequence[str]
) -> list[tuple[float | None, float | None]]:
    """``user_presence`` of each of ``pks``, in one pipeline (one round trip on one Redis)."""
    pipe = client.pipeline(transaction=False)
    for pk in pks:
        shard = user_shard(config, pk)
        pipe.zscore(shard.key("users"), pk)
        pipe.zscore(shard.key("hidden"), pk)
        pipe.hget(user_key(shard, pk), "seen")
    replies = iter(pipe.execute())
    found = []
    for visible, hidden, seen in zip(replies, replies, replies, strict=True):
        score = visible if visible is not None else hidden
        found.append((score, float(seen) if seen is not None else None))
    return found


def online_user_pks(client: Client, config: Config, *, now: float, limit: int) -> list[str]:
    """The primary keys of up to ``limit`` users online (hidden ones included), newest first
    within each set: O(log N + limit) per set and shard, never the whole of a large set."""
    pipe = client.pipeline(transaction=False)
    for shard in keyspace.layout(config):
        for kind in ("users", "hidden"):
            pipe.zrevrangebyscore(shard.key(kind), "+inf", _score(now - config.window), 0, limit)
    pks = [keyspace.text(pk) for members in pipe.execute() for pk in members]
    return pks[:limit] if len(pks) > limit else pks


def oldest_seen(client: Client, config: Config) -> float | None:
    """When the longest-unseen member of any online set was last seen (None: the sets are
    empty): one ZRANGE of the first member per set and shard, O(log N) each. Members older than
    the window stay until the cleanup command removes them, so this tells whether it runs."""
    pipe = client.pipeline(transaction=False)
    for shard in keyspace.layout(config):
        for kind in KINDS:
            pipe.zrange(shard.key(kind), 0, 0, withscores=True)
    scores = [float(score) for first in pipe.execute() for _member, score in first]
    return min(scores, default=None)


def count_stale(
    client: Client, config: Config, *, now: float, shards: int | None = None
) -> dict[str, int]:
    cutoff = "(" + _score(now - config.window)
    layout = keyspace.layout(config, shards)
    pipe = client.pipeline(transaction=False)
    for shard in layout:
        for kind in KINDS:
            pipe.zcount(shard.key(kind), "-inf", cutoff)
    found = [int(count) for count in pipe.execute()]
    return {kind: sum(found[index :: len(KINDS)]) for index, kind in enumerate(KINDS)}


def prune_chunk(
    client: Client,
    config: Config,
    kind: str,
    *,
    now: float,
    shard: keyspace.Shard | None = None,
) -> list[str]:
    """Remove up to ``PRUNE_CHUNK_SIZE`` members of ``kind`` last seen before the window, from
    ``shard`` (by default the first of the configured layout)."""
    shard = keyspace.layout(config)[0] if shard is None else shard
    removed = keyspace.script(client, lua.PRUNE_CHUNK)(
        keys=[shard.key(kind)], args=[_score(now - config.window), PRUNE_CHUNK_SIZE]
    )
    return [keyspace.text(member) for member in removed]


def sample(client: Client, config: Config, snapshot: Snapshot, *, now: float) -> None:
    """Raise the peak and sample the online counters from ``snapshot``, counted over every
    shard (the cleanup command does so when a visit cannot: with several shards)."""
    fixed = _recording_of(config)
    users = snapshot.visible + snapshot.hidden
    keyspace.script(client, lua.SAMPLE)(
        keys=[fixed.peak, fixed.known],
        args=[
            _score(now),
            fixed.counter_prefix,
            fixed.precisions,
            fixed.may_stop,
            int(now),
            users,
            snapshot.guests,
            snapshot.bots,
        ],
    )


#: The shard counts of the layouts the cleanup command has seen, so that it can empty an old one.
def layouts_key(config: Config) -> str:
    return key(config, "layouts")


def layouts_seen(client: Client, config: Config) -> list[int]:
    """Register the configured layout and return every layout seen, the configured one first.

    The one-shard layout counts as seen: it is where every site starts. A site that never
    changed ``SHARDS`` from 1 keeps no record at all.
    """
    if config.shards != 1:
        client.sadd(layouts_key(config), 1, config.shards)
    return layouts_known(client, config)


def layouts_known(client: Client, config: Config) -> list[int]:
    """Every layout that may hold data: the configured one and those the cleanup has seen."""
    seen = {int(each) for each in client.smembers(layouts_key(config))}
    return [config.shards, *sorted(seen - {config.shards})]


def layout_is_empty(client: Client, config: Config, shards: int) -> bool:
    """Whether no sorted set of people, and nothing of a room, is left in the layout of
    ``shards`` shards."""
    pipe = client.pipeline(transaction=False)
    for shard in keyspace.layout(config, shards):
        for name in (*KINDS, ROOMS_INDEX, ROOMS_WHERE):
            pipe.exists(shard.key(name))
    return not any(pipe.execute())


def forget_layout(client: Client, config: Config, shards: int) -> None:
    client.srem(layouts_key(config), shards)


def read_peak(client: Client, config: Config) -> tuple[int, float | None]:
    count, at = client.hmget(peak_key(config), ["count", "at"])
    return int(count or 0), (float(at) if at is not None else None)


def reset_peak(client: Client, config: Config) -> None:
    client.delete(peak_key(config))


def unique_visitors(client: Client, config: Config, day: date) -> int:
    """The day's visitors: the shards' HyperLogLogs hold different people, so their estimates
    add up. One PFCOUNT per shard (redis-py keeps PFCOUNT out of cluster pipelines)."""
    return sum(int(client.pfcount(visitors_key(shard, day))) for shard in keyspace.layout(config))


def rooms_of(client: Client, shard: keyspace.Shard) -> Iterator[str]:
    """The rooms the index of ``shard`` names: those with someone in them, or left since the
    cleanup last ran. A page at a time (ZSCAN, which may name a room twice)."""
    for room, _score in client.zscan_iter(shard.key(ROOMS_INDEX), count=ROOMS_PAGE_SIZE):
        yield keyspace.text(room)


def prune_room_chunk(
    client: Client, config: Config, shard: keyspace.Shard, room: str, *, now: float
) -> tuple[int, bool]:
    """Take up to ``PRUNE_CHUNK_SIZE`` people gone for over the window out of ``room`` in
    ``shard``; returns how many, and whether the room is gone (emptied, and out of the index)."""
    keys = [room_key(shard, room, kind) for kind in KINDS]
    keys += [shard.key(ROOMS_WHERE), shard.key(ROOMS_INDEX)]
    removed, gone = keyspace.script(client, lua.PRUNE_ROOM)(
        keys=keys, args=[_score(now - config.window), PRUNE_CHUNK_SIZE, room]
    )
    return int(removed), bool(gone)
