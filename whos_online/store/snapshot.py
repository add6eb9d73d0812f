"""One read of the site, or of a room, in one round trip; the site-wide figures alone and their
samples with several shards (``sample``); and the rooms' titles for people.

Each shard is asked for a share of the names, so that the read stays small as shards are added
("Reading" in docs/how-it-works.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from whos_online.backend import keyspace
from whos_online.backend.keyspace import (
    KINDS,
    ROOM_PREFIX,
    ROOMS_INDEX,
    ROOMS_WHERE,
    epoch_key,
    member_shard,
    peak_key,
    room_key,
    score,
    utc_day,
    visitors_key,
)
from whos_online.store import lua, scripts
from whos_online.store.record import recording_of
from whos_online.store.results import OnlineCounts, Snapshot
from whos_online.store.scripts import ScriptCall, replies, run

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from datetime import date

    from redis.client import Pipeline
    from redis.cluster import ClusterPipeline

    from whos_online.backend.clients import Client
    from whos_online.backend.keyspace import Person
    from whos_online.config.settings import Config


def snapshot_call(
    config: Config,
    shard: keyspace.Shard,
    *,
    limit: int | None,
    now: float,
    room: str = "",
    readers: Sequence[Person] = (),
) -> ScriptCall:
    """One shard's part of a snapshot of the site, or of ``room`` (its four sets only: a room
    has no visitors of the day or peak of its own), and whether it counts each of ``readers``
    (all of this shard)."""
    if room:
        keys = [*(room_key(shard, room, kind) for kind in KINDS), epoch_key(shard)]
    else:
        keys = [*(shard.key(kind) for kind in KINDS), epoch_key(shard)]
        keys.append(visitors_key(shard, utc_day(now)))
        if shard.is_base:
            keys.append(peak_key(config))
    args: list[str | int | float] = [
        score(now - config.window),
        -1 if limit is None else limit,
        shard.key("user:"),
    ]
    for reader in readers:
        args += [reader.member, KINDS.index(reader.kind) + 1]
    return ScriptCall(lua.SNAPSHOT, keys, args)


def parse_snapshot(
    raw: Sequence[Any],
    limit: int | None,
    shard: keyspace.Shard,
    readers: Sequence[Person] = (),
) -> Snapshot:
    visible, hidden, guests, bots, rows, peak_fields, visitors, epoch, held = raw
    peak, peak_at = peak_fields if peak_fields else (None, None)
    return Snapshot(
        epochs={shard.tag: keyspace.text(epoch)},
        visible=int(visible),
        hidden=int(hidden),
        guests=int(guests),
        bots=int(bots),
        rows=rows,
        peak_people=int(peak or 0),
        peak_at=float(peak_at) if peak_at is not None else None,
        visitors=int(visitors),
        limit=limit,
        readers={reader.key: bool(int(one)) for reader, one in zip(readers, held, strict=True)},
    )


def readers_of(config: Config, shard: keyspace.Shard, readers: Sequence[Person]) -> list[Person]:
    """Those of ``readers`` whose shard is ``shard``."""
    return [
        reader
        for reader in readers
        if member_shard(config, reader.kind, reader.member).tag == shard.tag
    ]


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
        epochs={tag: epoch for part in parts for tag, epoch in part.epochs.items()},
        readers={key: held for part in parts for key, held in part.readers.items()},
    )


def snapshot(
    client: Client, config: Config, *, limit: int | None, now: float, room: str = ""
) -> Snapshot:
    """Counts, the newest ``limit`` visible users, the peak and the day's visitors of the whole
    site: one call per shard, in one round trip on one Redis (a second one, for the few shards
    that need it, when the first could not tell the newest names; see ``shard_limit``)."""
    return snapshot_after(client, config, (), limit=limit, now=now, room=room)[1]


def snapshot_after(
    client: Client,
    config: Config,
    before: Sequence[ScriptCall],
    *,
    limit: int | None,
    now: float,
    room: str = "",
) -> tuple[list[Any], Snapshot]:
    """``snapshot``, after the calls ``before`` (a flush of the process's queue) in the same
    round trip on one Redis: their replies (an error in the place of a call that failed, such as
    a write refused by a full Redis, which the read may survive), and the snapshot."""
    written, found = snapshots_after(client, config, before, limit=limit, now=now, rooms=[room])
    return written, found[0]


def snapshots_after(
    client: Client,
    config: Config,
    before: Sequence[ScriptCall],
    *,
    limit: int | None,
    now: float,
    rooms: Sequence[str],
    readers: Mapping[str, Sequence[Person]] | None = None,
) -> tuple[list[Any], list[Snapshot]]:
    """``snapshot_after`` of each of ``rooms`` ("" for the site) at once: every shard's call for
    every room in the same round trip, so that a page showing a room and the site (or a refresh
    of several widgets) reads Redis once. The snapshots come in the order of ``rooms``; each
    says whether it counts the ``readers`` looked for in its room (``Snapshot.counts_reader``).
    """
    shards = keyspace.layout(config)
    asked = shard_limit(limit, len(shards))
    sought = {
        (room, shard.tag): readers_of(config, shard, (readers or {}).get(room, ()))
        for room in rooms
        for shard in shards
    }
    calls = [
        snapshot_call(
            config, shard, limit=asked, now=now, room=room, readers=sought[room, shard.tag]
        )
        for room in rooms
        for shard in shards
    ]
    answered = replies(client, [*before, *calls])
    written, read = answered[: len(before)], answered[len(before) :]
    for reply in read:
        if isinstance(reply, Exception):
            raise reply
    found = []
    for position, room in enumerate(rooms):
        raws = read[position * len(shards) : (position + 1) * len(shards)]
        parts = [
            parse_snapshot(raw, asked, shard, sought[room, shard.tag])
            for raw, shard in zip(raws, shards, strict=True)
        ]
        again = unfinished(parts, limit, asked)
        if again:
            more = [
                snapshot_call(
                    config,
                    shards[index],
                    limit=limit,
                    now=now,
                    room=room,
                    readers=sought[room, shards[index].tag],
                )
                for index in again
            ]
            for index, raw in zip(again, run(client, more), strict=True):
                shard = shards[index]
                parts[index] = parse_snapshot(raw, limit, shard, sought[room, shard.tag])
        found.append(combine(parts, limit))
    return written, found


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


def recent_rooms(
    client: Client, config: Config, *, now: float, per_shard: int
) -> dict[str, OnlineCounts]:
    """The rooms people were seen in last, ``per_shard`` of each shard's, each with who is in it
    now, over every shard: one ``lua/recent_rooms.lua`` call per shard, in one round trip on one
    Redis, each bounded by ``per_shard``."""
    calls = [
        ScriptCall(
            lua.RECENT_ROOMS,
            [shard.key(ROOMS_INDEX)],
            [shard.key(ROOM_PREFIX), score(now - config.window), per_shard],
        )
        for shard in keyspace.layout(config)
    ]
    found: dict[str, list[int]] = {}
    for rows in run(client, calls):
        for room, *counts in rows:
            sums = found.setdefault(keyspace.text(room), [0, 0, 0, 0])
            for index, count in enumerate(counts):
                sums[index] += int(count)
    return {
        room: OnlineCounts(
            users=users + hidden, guests=guests, bots=bots, total=users + hidden + guests
        )
        for room, (users, hidden, guests, bots) in found.items()
    }


#: The HASH's suffix: the scripts name it from the HASH of who is where, beside it.
ROOMS_TITLES: Final = ROOMS_WHERE.removesuffix("where") + "titles"


def room_titles(client: Client, config: Config, rooms: Iterable[str]) -> dict[str, str]:
    """The titles of ``rooms`` that have one, from every shard, in one round trip (a room is in
    the shards of the people in it; its title is the same in each)."""
    wanted = list(rooms)
    if not wanted:
        return {}
    shards = keyspace.layout(config)
    pipe = client.pipeline(transaction=False)
    for shard in shards:
        pipe.hmget(shard.key(ROOMS_TITLES), wanted)
    found: dict[str, str] = {}
    for titles in pipe.execute():
        for room, title in zip(wanted, titles, strict=True):
            if title and room not in found:
                found[room] = keyspace.text(title)
    return found


def sample(client: Client, config: Config, snapshot: Snapshot, *, now: float) -> None:
    """Raise the peak and sample the online counters from ``snapshot``, counted over every
    shard (the cleanup command does so when a visit cannot: with several shards)."""
    fixed = recording_of(config)
    users = snapshot.visible + snapshot.hidden
    scripts.call(
        client,
        lua.SAMPLE,
        list(fixed.site_keys[:2]),
        args=[
            score(now),
            fixed.counter_prefix,
            fixed.precisions,
            fixed.may_stop,
            int(now),
            users,
            snapshot.guests,
            snapshot.bots,
        ],
    )


def read_peak(client: Client, config: Config) -> tuple[int, float | None]:
    count, at = client.hmget(peak_key(config), ["count", "at"])
    return _peak(count, at)


def ask_peak(
    pipe: Pipeline | ClusterPipeline, config: Config
) -> Callable[[list[Any]], tuple[int, float | None]]:
    """``read_peak``'s command, queued on ``pipe``; returns what makes its answer of the reply
    (the API sends it in the round trip that writes the process's queue)."""
    pipe.hmget(peak_key(config), ["count", "at"])
    return lambda replies: _peak(*replies[0])


def _peak(count: Any, at: Any) -> tuple[int, float | None]:
    return int(count or 0), (float(at) if at is not None else None)


def reset_peak(client: Client, config: Config) -> None:
    client.delete(peak_key(config))


def unique_visitors(client: Client, config: Config, day: date) -> int:
    """The day's visitors: the shards' HyperLogLogs hold different people, so their estimates
    add up. One PFCOUNT per shard (redis-py keeps PFCOUNT out of cluster pipelines)."""
    return sum(int(client.pfcount(visitors_key(shard, day))) for shard in keyspace.layout(config))


def ask_unique_visitors(
    pipe: Pipeline | ClusterPipeline, config: Config, day: date
) -> Callable[[list[Any]], int]:
    """``unique_visitors``' commands, queued on the pipeline of one Redis (a cluster's refuses
    PFCOUNT); returns what makes its answer of their replies."""
    for shard in keyspace.layout(config):
        pipe.pfcount(visitors_key(shard, day))
    return lambda replies: sum(int(count) for count in replies)
