"""What Redis spends per recorded visit by visits per script call, and what ``FLUSH_INTERVAL``
makes of a process's visits.

Run from the repository root: ``python3 scripts/dev.py bench batching`` (``--help`` for the
options), or with the other parts: ``python3 scripts/dev.py bench --only batching``.

A fresh redis-server holds ``--people`` members online, and the visits are of people online
already, as most recorded visits are (each person is recorded again every ``THROTTLE``): half
users with their display data, half guests; of every four, two are in no room, one stays in their
room (of 1 000) and one moves to another room on each visit (``bench.capacity.people_of``). Each
of them was recorded once before measuring, so that they are in their room and users have their
display HASH.

Batches. The same visits are written with ``store.record.record`` (what a flush sends) in calls of
1, 5, 20, 50 and 100 visits, one call at a time; the visits of each kind of room apart, 20 per
call; one plain ZADD per call (the naive middleware's write); and snapshot reads of 50 names.
Each repetition runs them all in another order. Per visit it takes the time of the Lua scripts
(``INFO commandstats``) and the CPU of the whole redis-server process (Linux schedstat), which
also reads each call and writes its reply: one client sending one call at a time makes that share
as large as it gets. The people online per Redis process follow from the capacity model of
``bench.capacity``: ``THROTTLE`` 120, the tag on every page, ``SNAPSHOT_MAX_AGE`` 2.

Flushes. The process's own queue and flusher thread (``whos_online.flushing.flusher``) take visits
as the request path gives them (``recording.queue`` and ``flushing.after_recording``), arriving at
random (a Poisson process) at 50, 200 and 1 000 visits a second, with ``FLUSH_INTERVAL`` 0 (each
visit written by its request) and 0.01 to 0.1 s. Per cell: the visits each round trip carried (a
flush makes a second one for what was queued while the first was on its way), Redis's Lua time and
process CPU per visit (less the CPU the idle server spent, measured in the same repetition), and how
long after it was queued each visit was written (the end of its round trip): what another process
waits to see it, and at most what a process that is killed loses. This server is fed by one process
only, so it idles between flushes and each call finds its caches cold: a call costs it several times
what it costs a busy server, so the cells' absolute figures are no capacity figures (the batches
are); their ratios to ``FLUSH_INTERVAL`` 0 and their visits per call are what carry over.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import random
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from unittest import mock

import django
import redis

from bench import capacity, servers, stats
from bench.report import Section, Target, targets_table

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config
    from whos_online.store.scripts import ScriptCall

#: Visits per script call measured.
BATCHES: Final = (1, 5, 20, 50, 100)
#: Recorded visits per second of one process, and the ``FLUSH_INTERVAL`` values, of the flushes.
RATES: Final = (50, 200, 1000)
INTERVALS: Final = (0.0, 0.01, 0.02, 0.05, 0.1)
#: The kinds of ``capacity.Person.rooms``, measured apart too.
ROOM_KINDS: Final = (
    ("", "in no room"),
    ("stay", "in a room, staying in it"),
    ("move", "in a room, moving to another"),
)
#: The targets: Redis process CPU per visit at batches of 20 or more, and people online per
#: Redis process at the model's defaults.
TARGET_US: Final = 15.0
TARGET_BATCH: Final = 20
TARGET_PEOPLE: Final = 6_000_000
#: Seconds of a flush cell at the least: slow rates get longer cells, for enough visits.
CELL_VISITS: Final = 400


def people_to_visit(config: Config, people: int, count: int, seed: int) -> list[capacity.Person]:
    """``count`` people online, half users and half guests, in a random order."""
    rng = random.Random(seed)  # noqa: S311 (picks visitors, not secrets)
    numbers = capacity.chosen(rng, people, count // 2, users=True)
    numbers += capacity.chosen(rng, people, count - len(numbers), users=False)
    rng.shuffle(numbers)
    return capacity.people_of(config, numbers)


#: The floor of a recorded visit: what no visit can do without (its score read and written in
#: the online set of its kind) and its share of one PFADD per call, in one script per call of
#: ``TARGET_BATCH`` visits; once a command per visit, once set-at-a-time. KEYS: the users set, the
#: guests set and a HyperLogLog; ARGV: (set index, score, member) per visit.
FLOOR_SCRIPTS: Final = {
    "a command per visit": """
local visitors = {}
for i = 1, #ARGV, 3 do
  local set, member = KEYS[tonumber(ARGV[i])], ARGV[i + 2]
  redis.call('ZSCORE', set, member)
  redis.call('ZADD', set, ARGV[i + 1], member)
  visitors[#visitors + 1] = member
end
redis.call('PFADD', KEYS[3], unpack(visitors))
return 0
""",
    "set-at-a-time": """
local members, scored, visitors = {{}, {}}, {{}, {}}, {}
for i = 1, #ARGV, 3 do
  local set = tonumber(ARGV[i])
  local these, pairs_of = members[set], scored[set]
  these[#these + 1] = ARGV[i + 2]
  pairs_of[#pairs_of + 1] = ARGV[i + 1]
  pairs_of[#pairs_of + 1] = ARGV[i + 2]
  visitors[#visitors + 1] = ARGV[i + 2]
end
for set = 1, 2 do
  if #members[set] > 0 then
    redis.call('ZMSCORE', KEYS[set], unpack(members[set]))
    redis.call('ZADD', KEYS[set], 'GT', unpack(scored[set]))
  end
end
redis.call('PFADD', KEYS[3], unpack(visitors))
return 0
""",
}


def floor(
    node: capacity.Watched, admin: redis.Redis, config: Config, who: Sequence[capacity.Person]
) -> dict[str, capacity.Pair]:
    """Per visit, (Lua µs, process CPU µs) of each of ``FLOOR_SCRIPTS`` in calls of
    ``TARGET_BATCH`` visits of ``who`` (the one Redis's own sets)."""
    from whos_online.backend import keyspace
    from whos_online.store.keys import score

    shard = keyspace.layout(config)[0]
    keys = [shard.key("users"), shard.key("guests"), shard.key("visitors:floor")]
    found = {}
    for name, source in FLOOR_SCRIPTS.items():
        sha = admin.script_load(source)
        calls = len(who) // TARGET_BATCH

        def call(index: int, sha: str = sha) -> None:
            now = time.time()
            args: list[str | int] = []
            for person in who[index * TARGET_BATCH : (index + 1) * TARGET_BATCH]:
                args += [1 if person.user else 2, score(now), person.member]
            admin.evalsha(sha, len(keys), *keys, *args)

        usage = capacity.measure([node], call, calls)
        found[name] = capacity.per_visit(usage, calls * TARGET_BATCH)
    return found


def naive(
    client: redis.Redis, config: Config, who: Sequence[capacity.Person]
) -> Callable[[int], None]:
    """An action whose ``index``-th call is one plain ZADD of the ``index``-th person, in the
    set of their kind, as the naive middleware writes."""
    from whos_online.store.keys import member_shard

    def write(index: int) -> None:
        person = who[index]
        kind = "users" if person.user else "guests"
        key = member_shard(config, kind, person.member).key(kind)
        client.zadd(key, {person.member: time.time()})

    return write


@dataclass
class Batches:
    """Per visit, by repetition: (Lua µs, process CPU µs) for each size of call, for the naive
    ZADD (its commandstats time), and for a snapshot read (per read)."""

    sizes: dict[int, list[capacity.Pair]] = field(default_factory=dict)
    #: Visits of one kind of ``capacity.Person.rooms`` only, ``TARGET_BATCH`` per call.
    rooms: dict[str, list[capacity.Pair]] = field(default_factory=dict)
    naive: list[capacity.Pair] = field(default_factory=list)
    read: list[capacity.Pair] = field(default_factory=list)
    #: Calls of ``TARGET_BATCH`` made with another checkout's record script (``--against``).
    against: list[capacity.Pair] = field(default_factory=list)
    #: The floor's scripts (``FLOOR_SCRIPTS``), per visit.
    floor: dict[str, list[capacity.Pair]] = field(default_factory=dict)
    #: The commands the script ran in the calls of ``TARGET_BATCH``, by repetition: per visit,
    #: (calls, µs), from ``INFO commandstats``.
    commands: defaultdict[str, list[tuple[float, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )


def zadd_usage(node: capacity.Watched, before: float) -> capacity.Usage:
    cpu = servers.cpu_seconds([node.pid]) - before
    found = node.client.info("commandstats").get("cmdstat_zadd", {})
    return capacity.Usage(int(found.get("calls", 0)), float(found.get("usec", 0)), cpu * 1e6)


def measure_batches(
    node: capacity.Watched,
    client: Client,
    admin: redis.Redis,
    config: Config,
    who: list[capacity.Person],
    *,
    repeats: int,
    reads: int,
    against: str | None = None,
) -> Batches:
    """Every size of call, the rooms' visits apart, the naive ZADD and the snapshot read,
    ``repeats`` times, each repetition in another order; with ``against`` (the source of
    another version's record script), calls of ``TARGET_BATCH`` with that script too."""
    found = Batches(
        sizes={size: [] for size in BATCHES}, rooms={name: [] for name, _ in ROOM_KINDS}
    )
    turns = iter(range(1, 1_000_000))

    def in_batches(people: Sequence[capacity.Person], size: int) -> capacity.Pair:
        usages, count = capacity.in_batches(
            [node], client, config, people, size=size, turn=next(turns)
        )
        if size == TARGET_BATCH and people is who:
            # The commands the script ran, counted since the phase began (``measure`` resets).
            for name, counted in node.client.info("commandstats").items():
                command = name.removeprefix("cmdstat_")
                if command not in {"evalsha", "config", "info"}:
                    calls, us = int(counted["calls"]), float(counted["usec"])
                    found.commands[command].append((calls / count, us / count))
        return capacity.per_visit(usages, count)

    def zadds() -> capacity.Pair:
        before = servers.cpu_seconds([node.pid])
        admin.config_resetstat()
        write = naive(admin, config, who)
        for index in range(len(who)):
            write(index)
        usage = zadd_usage(node, before)
        if usage.calls != len(who):
            raise RuntimeError(f"expected {len(who)} ZADDs, Redis counted {usage.calls}")
        return usage.script_us / len(who), usage.cpu_us / len(who)

    def snapshots() -> capacity.Pair:
        usage = capacity.measure([node], lambda _: capacity.read(client, config), reads)
        return capacity.per_call(usage, reads, 1)

    def floors() -> None:
        for name, pair in floor(node, admin, config, who).items():
            found.floor.setdefault(name, []).append(pair)

    def into(
        results: list[capacity.Pair], phase: Callable[[], capacity.Pair]
    ) -> Callable[[], None]:
        return lambda: results.append(phase())

    phases = [into(found.sizes[size], functools.partial(in_batches, who, size)) for size in BATCHES]
    for name, _ in ROOM_KINDS:
        alike = [person for person in who if person.rooms == name]
        phases.append(into(found.rooms[name], functools.partial(in_batches, alike, TARGET_BATCH)))
    phases += [into(found.naive, zadds), into(found.read, snapshots), floors]
    if against is not None:
        other = against

        def with_other_script() -> capacity.Pair:
            from whos_online.store import lua

            # What store.record sends, for this phase only.
            with mock.patch.object(lua, "RECORD", other):
                return in_batches(list(who), TARGET_BATCH)

        phases.append(into(found.against, with_other_script))
    for repeat in range(repeats):
        progress(f"batches, repetition {repeat + 1} of {repeats}…")
        for phase in stats.rotated(phases, repeat):
            phase()
    return found


@dataclass
class Cell:
    """One rate of visits with one ``FLUSH_INTERVAL``, by repetition."""

    rate: int
    interval: float
    visits: list[int] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    lua_us: list[float] = field(default_factory=list)
    #: µs of redis-server CPU over the whole cell, and the cell's length in seconds.
    cpu_us: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    #: Seconds from queued to written, every visit of every repetition.
    delays: list[float] = field(default_factory=list)
    #: The most visits one flush wrote, by repetition: what a process held at most.
    largest: list[int] = field(default_factory=list)

    def net_cpu(self, idle_us: float) -> list[float]:
        """Process CPU µs per visit, less what the idle server spends over as long a time."""
        return [
            max(cpu - idle_us * seconds, 0.0) / visits
            for cpu, seconds, visits in zip(self.cpu_us, self.seconds, self.visits, strict=True)
        ]


class WrittenAt:
    """Notes when each flush's round trip ended, its calls and how many entries it wrote: wraps
    the ``store.scripts.run`` that ``flushing`` calls, in the benchmark's process only."""

    def __init__(self) -> None:
        #: (when the replies came, calls, entries) per round trip.
        self.flushes: list[tuple[float, int, int]] = []

    @property
    def entries(self) -> int:
        return sum(entries for _, _, entries in self.flushes)

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        from whos_online.store import record as visits
        from whos_online.store import scripts

        original = scripts.run
        count_at = visits.HEADER_ARGUMENTS.index("count")

        def run(client: Client, calls: Sequence[ScriptCall]) -> list[Any]:
            replies = original(client, calls)
            entries = sum(int(call.args[count_at]) for call in calls)
            self.flushes.append((time.perf_counter(), len(calls), entries))
            return replies

        with mock.patch.object(scripts, "run", run):
            yield


def arrivals(rate: float, seconds: float, rng: random.Random) -> list[float]:
    """Offsets from the start, in seconds, of a Poisson process of ``rate`` a second."""
    found, at = [], rng.expovariate(rate)
    while at < seconds:
        found.append(at)
        at += rng.expovariate(rate)
    return found


def cell_seconds(rate: float, seconds: float) -> float:
    """Slow rates get longer cells, for ``CELL_VISITS`` visits at least."""
    return max(seconds, CELL_VISITS / rate)


def in_turns(who: Sequence[capacity.Person]) -> Iterator[tuple[capacity.Person, int]]:
    """``who`` over and over, each time round their next turn (movers change topic)."""
    turn = 1_000
    while True:
        turn += 1
        for person in who:
            yield person, turn


def run_cell(
    node: capacity.Watched,
    url: str,
    cell: Cell,
    who: Iterator[tuple[capacity.Person, int]],
    *,
    seconds: float,
    seed: int,
) -> None:
    """Record visits at ``cell.rate`` a second through the process's queue for ``seconds``,
    with the cell's ``FLUSH_INTERVAL``, and note what they cost."""
    from django.test import override_settings

    from whos_online.backend import connection
    from whos_online.config.settings import get_config
    from whos_online.flushing import flusher as flushing
    from whos_online.recording import visits as recording

    settings = {"REDIS_URL": url, "FLUSH_INTERVAL": cell.interval}
    offsets = arrivals(cell.rate, seconds, random.Random(seed))  # noqa: S311 (timing only)
    watcher = WrittenAt()
    with override_settings(WHOS_ONLINE=settings), watcher.watching():
        config = get_config()
        # The connection is made before the cell: once per process, not per visit.
        connection.call(None, lambda client, _config: client.ping())
        queued = []
        cpu_before = node.start()
        started = time.perf_counter()
        for offset in offsets:
            wait = started + offset - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            person, turn = next(who)
            at = time.perf_counter()
            if not recording.queue(config, capacity.visit_of(person, time.time(), turn)):
                raise RuntimeError("a visit could not be queued on a healthy Redis")
            if flushing.after_recording(config):
                raise RuntimeError("a flush failed on a healthy Redis")
            queued.append(at)
        # The thread's last flush comes at most an interval after the last visit.
        while watcher.entries < len(queued):
            time.sleep(0.001)
        elapsed = time.perf_counter() - started
        usage = node.usage(cpu_before)
    written = [at for at, _, entries in watcher.flushes for _ in range(entries)]
    calls = sum(calls for _, calls, _ in watcher.flushes)
    if len(written) != len(queued) or usage.calls != calls:
        raise RuntimeError(
            f"{cell.rate}/s, {cell.interval:g} s: {len(queued)} visits queued, {len(written)} "
            f"written in {calls} calls; Redis counted {usage.calls} EVALSHAs"
        )
    cell.visits.append(len(queued))
    cell.calls.append(calls)
    cell.lua_us.append(usage.script_us / len(queued))
    cell.cpu_us.append(usage.cpu_us)
    cell.seconds.append(elapsed)
    cell.delays += [done - at for done, at in zip(written, queued, strict=True)]
    cell.largest.append(max(entries for _, _, entries in watcher.flushes))


def measure_flushes(
    node: capacity.Watched, url: str, who: list[capacity.Person], *, repeats: int, seconds: float
) -> tuple[list[Cell], list[float]]:
    """Every cell of ``RATES`` × ``INTERVALS``, ``repeats`` times in rotating orders; and the
    idle server's CPU µs per second, measured as a cell of every repetition."""
    cells = [Cell(rate, interval) for rate in RATES for interval in INTERVALS]
    idle: list[float] = []
    people = in_turns(who)
    for repeat in range(repeats):
        progress(f"flushes, repetition {repeat + 1} of {repeats}…")
        order: list[Cell | None] = [None, *cells]
        for cell in stats.rotated(order, repeat):
            if cell is None:
                before = servers.cpu_seconds([node.pid])
                time.sleep(seconds)
                idle.append((servers.cpu_seconds([node.pid]) - before) * 1e6 / seconds)
            else:
                run_cell(
                    node,
                    url,
                    cell,
                    people,
                    seconds=cell_seconds(cell.rate, seconds),
                    seed=repeat,
                )
    return cells, idle


def measure(
    *,
    people: int,
    visits: int,
    reads: int,
    repeats: int,
    flush_repeats: int,
    seconds: float,
    against: Path | None = None,
) -> Section:
    """Fill a fresh redis-server, then measure the batches and the flushes on it."""
    from django.test import override_settings

    from whos_online.backend import clients
    from whos_online.config import settings as conf

    load = os.getloadavg()[0]
    with (
        servers.redis_server() as server,
        override_settings(WHOS_ONLINE={"REDIS_URL": server.url}),
    ):
        assert server.process is not None
        admin = redis.Redis.from_url(server.url)
        node = capacity.Watched(admin, server.process.pid, "one Redis")
        config = conf.get_config()
        client = clients.request_client()
        progress(f"filling one Redis with {stats.number(people)} people online…")
        capacity.fill(lambda _: admin, config, people, time.time())
        who = people_to_visit(config, people, visits, seed=1)
        progress(f"recording each of {stats.number(visits)} people once, into their rooms…")
        capacity.warm_up(client, config, who)
        capacity.read(client, config)
        other = None
        if against is not None:
            from whos_online.store import lua

            other = lua.load("record", against / "whos_online" / "store" / "lua")
        batches = measure_batches(
            node, client, admin, config, who, repeats=repeats, reads=reads, against=other
        )
        cells, idle = measure_flushes(node, server.url, who, repeats=flush_repeats, seconds=seconds)
        version = str(admin.info("server")["redis_version"])
    return report(
        batches,
        cells,
        idle,
        intro=(
            f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores (load average "
            f"{load:.1f} at the start: other work on the machine widens the ranges), "
            f"redis-server {version}. {stats.number(people)} people online (1 in "
            f"{capacity.USER_EVERY} a user); the visits are of {stats.number(visits)} of them, "
            "half users with display data and half guests, half of each in a room (of "
            f"{capacity.ROOMS}), half of those moving to another room on each visit."
        ),
        repeats=repeats,
        flush_repeats=flush_repeats,
        reads=reads,
    )


def model_batch(model: capacity.Model, people: float) -> int:
    """The visits per call the model's site flushes with ``people`` online, at the default
    ``FLUSH_INTERVAL``, rounded down to a size measured: each of its processes records people /
    THROTTLE / processes visits a second, and a flush carries those of an interval and one."""
    from whos_online.config.settings import DEFAULTS

    per_flush = 1 + people / model.throttle / model.processes * DEFAULTS["FLUSH_INTERVAL"]
    return max(size for size in BATCHES if size <= per_flush)


def people_by(pairs: Sequence[capacity.Pair], read: capacity.Pair, which: int) -> float:
    """People online per Redis process at these costs (``which``: 0 by Lua µs, 1 by CPU)."""
    return capacity.people_at_full_cpu(
        capacity.medians(pairs)[which], read[which], capacity.site_model(), "cache"
    )


def batch_table(batches: Batches) -> str:
    one = batches.sizes[1]
    read = capacity.medians(batches.read)

    def row(label: str, pairs: Sequence[capacity.Pair], baseline: bool = True) -> list[str]:
        return [
            label,
            capacity.both(pairs, 0).show(capacity.us1),
            stats.ratios([p[0] for p in pairs], [p[0] for p in one]).show(stats.ratio)
            if baseline
            else "",
            capacity.both(pairs, 1).show(capacity.us1),
            stats.ratios([p[1] for p in pairs], [p[1] for p in one]).show(stats.ratio)
            if baseline
            else "",
            " – ".join(capacity.people_label(people_by(pairs, read, k)) for k in (0, 1))
            if baseline
            else "",
        ]

    rows = [row(f"{size} per call", pairs) for size, pairs in batches.sizes.items()]
    if batches.against:
        rows.append(
            row(
                f"{TARGET_BATCH} per call, the record script of the `--against` checkout",
                batches.against,
            )
        )
    rows += [
        row(f"{TARGET_BATCH} per call, visits {label} only", batches.rooms[name])
        for name, label in ROOM_KINDS
    ]
    rows += [
        *(
            row(
                f"the floor, {TARGET_BATCH} per call: ZSCORE and ZADD per visit and one PFADD "
                f"per call ({name})",
                pairs,
                False,
            )
            for name, pairs in batches.floor.items()
        ),
        row("one plain ZADD per call (the naive middleware's write)", batches.naive, False),
        row(f"snapshot read of {capacity.NAMES} names (per read)", batches.read, False),
    ]
    return stats.table(
        [
            "visits per script call",
            "Lua µs per visit",
            "× 1 per call",
            "process CPU µs per visit",
            "× 1 per call",
            "people online per Redis process (by Lua µs – by CPU)",
        ],
        rows,
    )


def command_table(batches: Batches) -> str:
    """What the script runs per visit in calls of ``TARGET_BATCH``, and what it spends on it."""
    script = capacity.medians(batches.sizes[TARGET_BATCH])[0]
    rows = []
    spent = 0.0
    for command, found in sorted(
        batches.commands.items(), key=lambda item: -statistics.median(us for _, us in item[1])
    ):
        calls = statistics.median(calls for calls, _ in found)
        us = statistics.median(us for _, us in found)
        spent += us
        rows.append([command.upper(), f"{calls:.2f}", f"{us:.2f}", f"{100 * us / script:.0f} %"])
    rest = script - spent
    rows.append(["the Lua around them", "", f"{rest:.2f}", f"{100 * rest / script:.0f} %"])
    return stats.table(["command", "per visit", "µs per visit", "of the script's µs"], rows)


def flush_table(cells: Sequence[Cell], idle_us: float) -> str:
    baseline = {cell.rate: cell for cell in cells if cell.interval == 0}
    rows = []
    for cell in cells:
        zero = baseline[cell.rate]
        cpu = cell.net_cpu(idle_us)
        delays = sorted(cell.delays)
        per_call = [visits / calls for visits, calls in zip(cell.visits, cell.calls, strict=True)]
        rows.append(
            [
                str(cell.rate),
                f"{cell.interval:g}",
                stats.Spread.of(per_call).show(lambda value: f"{value:.1f}"),
                stats.Spread.of(cell.lua_us).show(capacity.us1),
                stats.ratios(cell.lua_us, zero.lua_us).show(stats.ratio),
                stats.Spread.of(cpu).show(capacity.us1),
                stats.ratios(cpu, zero.net_cpu(idle_us)).show(stats.ratio),
                f"{stats.ms(statistics.median(delays))} / "
                f"{stats.ms(delays[int(0.99 * (len(delays) - 1))])} / {stats.ms(delays[-1])}",
                str(max(cell.largest)),
            ]
        )
    return stats.table(
        [
            "visits/s per process",
            "FLUSH_INTERVAL s",
            "visits per call (a round trip)",
            "Lua µs per visit",
            "× interval 0",
            "process CPU µs per visit",
            "× interval 0",
            "written after queued, ms: median / p99 / max",
            "most visits in one flush",
        ],
        rows,
    )


def targets(batches: Batches) -> list[Target]:
    model = capacity.site_model()
    read = capacity.medians(batches.read)
    sizes = [size for size in batches.sizes if size >= TARGET_BATCH]
    cpu = {size: capacity.both(batches.sizes[size], 1) for size in sizes}
    size = model_batch(model, TARGET_PEOPLE)
    people = people_by(batches.sizes[size], read, 1)
    return [
        Target(
            f"Redis process CPU per recorded visit at batches of ≥ {TARGET_BATCH}: "
            f"≤ {TARGET_US:g} µs",
            "; ".join(f"{n} per call: {cpu[n].show(capacity.us1)} µs" for n in sizes)
            + "; the floor at "
            + str(TARGET_BATCH)
            + " per call: "
            + ", ".join(
                f"{capacity.both(pairs, 1).show(capacity.us1)} µs ({name})"
                for name, pairs in batches.floor.items()
            ),
            all(spread.median <= TARGET_US for spread in cpu.values()),
        ),
        Target(
            f"people online per Redis process, by process CPU (THROTTLE {model.throttle:g}, the "
            f"tag on every page, SNAPSHOT_MAX_AGE {model.max_age:g}): "
            f"≥ {capacity.people_label(TARGET_PEOPLE)}",
            f"{capacity.people_label(people)} at {size} visits per call (what each of the "
            f"model's {model.processes} processes flushes with "
            f"{capacity.people_label(TARGET_PEOPLE)} online); "
            f"{capacity.people_label(people_by(batches.sizes[TARGET_BATCH], read, 1))} at "
            f"{TARGET_BATCH}",
            people >= TARGET_PEOPLE,
        ),
    ]


def report(
    batches: Batches,
    cells: list[Cell],
    idle: list[float],
    *,
    intro: str,
    repeats: int,
    flush_repeats: int,
    reads: int,
) -> Section:
    model = capacity.site_model()
    idle_us = statistics.median(idle)
    return Section(
        title="Batches of visits",
        intro=intro,
        tables=[
            f"Redis per recorded visit by visits per script call: {repeats} repetitions of "
            f"every phase, in turns; {stats.number(reads)} snapshot reads per repetition. "
            "Median (min–max); ratios to one visit per call in the same repetition. People "
            f"online: the capacity model of `bench.capacity` (THROTTLE {model.throttle:g} s, a "
            f"page with the tag every {model.page_every:g} s, {model.processes} web processes, "
            f"SNAPSHOT_MAX_AGE {model.max_age:g} s) at this cost per visit and the read's.",
            batch_table(batches),
            f"The commands the script ran in the calls of {TARGET_BATCH} (`INFO commandstats`, "
            "which times the commands a script runs too), medians of the repetitions: the rest "
            "of the script's time is the Lua itself, reading each entry and calling Redis.",
            command_table(batches),
            f"The process's own queue and flusher: visits arriving at random at the rate "
            f"given, {flush_repeats} repetitions of each cell, in turns (cells of "
            f"{CELL_VISITS} visits at least). Redis CPU per visit less the idle server's "
            f"({idle_us:.0f} µs a second, median of the repetitions); ratios to FLUSH_INTERVAL "
            "0 at the same rate, in the same repetition. Written after queued: from the visit "
            "queued to its flush's replies, over every visit of the cell's repetitions.",
            flush_table(cells, idle_us),
        ],
        targets=targets(batches),
    )


def run() -> Section:
    """The part of ``python -m bench``, with the defaults."""
    return measure(
        people=1_000_000, visits=10_000, reads=1_000, repeats=5, flush_repeats=3, seconds=2.0
    )


def progress(message: str) -> None:
    print(f"batching: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batching", description=__doc__)
    parser.add_argument("--people", type=int, default=1_000_000, help="people online")
    parser.add_argument(
        "--visits", type=int, default=10_000, help="people recorded per batch phase (× 100)"
    )
    parser.add_argument("--reads", type=int, default=1_000, help="snapshot reads per repetition")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions of the batches")
    parser.add_argument(
        "--flush-repeats", type=int, default=3, help="repetitions of the flush cells"
    )
    parser.add_argument(
        "--seconds", type=float, default=2.0, help="seconds of a flush cell at the least"
    )
    parser.add_argument(
        "--against",
        type=Path,
        metavar="CHECKOUT",
        help="also send the calls of 20 with this other checkout's record script (it must take "
        "the same arguments), interleaved, to compare two versions of the script",
    )
    options = parser.parse_args(argv)
    if options.visits % 100 or options.people < 20 * options.visits:
        parser.error("--visits must be a multiple of 100, and --people 20 times as many")
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.site"
    os.environ.setdefault("WHOS_ONLINE_BENCH_VARIANT", "throttled")
    django.setup()
    started = time.monotonic()
    section = measure(
        people=options.people,
        visits=options.visits,
        reads=options.reads,
        repeats=options.repeats,
        flush_repeats=options.flush_repeats,
        seconds=options.seconds,
        against=options.against,
    )
    print(section.markdown() + "\n")
    print(targets_table(section.targets))
    print(f"\nThe whole run took {time.monotonic() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
