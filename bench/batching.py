"""What a recorded visit costs Redis by visits per script call, against the floor of a visit;
and what ``FLUSH_INTERVAL`` makes of a process's visits.

Batches: on a Redis of ``people`` online (``bench.people``), the same visits written in calls of
1 to 100, the kinds of room apart, the floor (a visit's ZSCORE and ZADD, a share of one PFADD), the
same data written by the leanest Lua (``bench.bound``), the naive middleware's ZADD and snapshot
reads, in turns: Lua µs and redis-server CPU per visit.
Flushes: the process's own queue and flusher take visits arriving at random at 50, 200 and 1 000
a second with each ``FLUSH_INTERVAL``: visits per call, cost per visit, delay until written. That
server idles between flushes (cold caches): the cells' ratios carry over, not their µs.
"""

from __future__ import annotations

import contextlib
import functools
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path  # noqa: TC003 (the options' types are read at run time)
from typing import TYPE_CHECKING, Any, Final
from unittest import mock

from django.test import override_settings

from bench import bound, capacity
from bench import internals as whos
from bench import people as crowd
from bench.harness import servers
from bench.harness.report import Section, Target, fixed, ms, number, people, ratio, table
from bench.harness.rounds import Spread, interleaved, percentile, ratios, spread
from bench.people import Pair, column, medians, per

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

SIZES: Final = (1, 5, 20, 50, 100)
RATES: Final = (50, 200, 1000)
INTERVALS: Final = (0.0, 0.01, 0.02, 0.05, 0.1)
ROOM_KINDS: Final = {
    "": "in no room",
    "stay": "in a room, staying in it",
    "move": "in a room, moving to another",
}
#: The goals: Redis CPU per visit in calls of ``AT``, as a multiple of the floor's measured in
#: the same repetition; people online per Redis process.
AT: Final = 20
MOST_FLOORS: Final = 2.0
PER_REDIS: Final = 6_000_000
one = fixed(1)
#: The floor of a visit, in one script of ``AT`` visits: KEYS the users set, the guests set and
#: a HyperLogLog; ARGV (set index, score, member) per visit.
FLOORS: Final = {
    "a command per visit": """
local visitors = {}
for i = 1, #ARGV, 3 do
  local set, member = KEYS[tonumber(ARGV[i])], ARGV[i + 2]
  redis.call('ZSCORE', set, member)
  redis.call('ZADD', set, ARGV[i + 1], member)
  visitors[#visitors + 1] = member
end
redis.call('PFADD', KEYS[3], unpack(visitors))
""",
    "set-at-a-time": """
local members, scored, visitors = {{}, {}}, {{}, {}}, {}
for i = 1, #ARGV, 3 do
  local set = tonumber(ARGV[i])
  table.insert(members[set], ARGV[i + 2])
  table.insert(scored[set], ARGV[i + 1])
  table.insert(scored[set], ARGV[i + 2])
  visitors[#visitors + 1] = ARGV[i + 2]
end
for set = 1, 2 do
  if #members[set] > 0 then
    redis.call('ZMSCORE', KEYS[set], unpack(members[set]))
    redis.call('ZADD', KEYS[set], 'GT', unpack(scored[set]))
  end
end
redis.call('PFADD', KEYS[3], unpack(visitors))
""",
}

#: The floor as measured until 2026-11-27: every visit of a call at the one time it is sent, so
#: that each call's scores land past all others, where the record script's visits carry times
#: over the last ``FLUSH_INTERVAL`` (``crowd.times``). Kept beside the floor, for the ratios
#: measured before.
ONE_TIME_FLOOR: Final = (
    f"the floor, {AT} per call (a command per visit), a call's visits all at one time, "
    "as measured until 2026-11-27"
)


@dataclass(frozen=True)
class Options:
    people: int = 1_000_000
    visits: int = 10_000
    reads: int = 1_000
    repeats: int = 5
    flush_repeats: int = 3
    #: Seconds of a flush cell, and its visits, at the least.
    seconds: float = 2.0
    cell_visits: int = 400
    #: Another checkout whose record script (taking the same arguments) sends the calls of 20.
    against: Path | None = None


QUICK = Options(
    people=20_000, visits=400, reads=50, repeats=1, flush_repeats=1, seconds=0.3, cell_visits=20
)


class Batches:
    """Every phase of the batches on one Redis, by name: its (Lua µs, CPU µs) per visit."""

    def __init__(self, node: servers.Node, config: whos.Config, options: Options) -> None:
        self.node, self.config, self.options = node, config, options
        self.client = whos.clients.request_client()
        self.who = crowd.chosen(
            config, options.people, options.visits // 2, options.visits // 2, seed=1
        )
        crowd.warm_up(self.client, config, self.who)
        self.turn = 0
        #: The commands the script ran in the calls of ``AT``, by repetition: per visit (calls, µs).
        self.commands: dict[str, list[tuple[float, float]]] = {}
        self.other = (
            None
            if options.against is None
            else whos.lua.load("record", options.against / "whos_online" / "store" / "lua")
        )

    def phases(self) -> dict[str, Callable[[], Pair]]:
        found: dict[str, Callable[[], Pair]] = {
            f"{size} per call": functools.partial(self.batch, self.who, size) for size in SIZES
        }
        if self.other is not None:
            found[f"{AT} per call, the record script of the `--against` checkout"] = self.against
        for kind, label in ROOM_KINDS.items():
            alike = [person for person in self.who if person.rooms == kind]
            found[f"{AT} per call, visits {label} only"] = functools.partial(self.batch, alike, AT)
        in_no_room = [person for person in self.who if not person.rooms]
        for label, whole in bound.PHASES.items():
            found[f"{label}, {AT} per call"] = functools.partial(
                self.bound, self.who if whole else in_no_room
            )
        for name, source in FLOORS.items():
            found[
                f"the floor, {AT} per call: ZSCORE and ZADD per visit and one PFADD per call "
                f"({name})"
            ] = functools.partial(self.floor, source)
        found[ONE_TIME_FLOOR] = functools.partial(
            self.floor, FLOORS["a command per visit"], one_time=True
        )
        found["one plain ZADD per call (the naive middleware's write)"] = self.naive
        found[f"snapshot read of {crowd.NAMES} names (per read)"] = lambda: per(
            crowd.reads([self.node], self.client, self.config, self.options.reads),
            self.options.reads,
        )
        return found

    def batch(self, who: Sequence[crowd.Person], size: int) -> Pair:
        self.turn += 1
        usages, visits = crowd.in_batches(
            [self.node], self.client, self.config, who, size=size, turn=self.turn
        )
        if size == AT and who is self.who:
            for command, (calls, us) in self.node.calls().items():
                if command not in {"evalsha", "config", "info"}:
                    self.commands.setdefault(command, []).append((calls / visits, us / visits))
        return per(usages, visits)

    def against(self) -> Pair:
        with mock.patch.object(whos.lua, "RECORD", self.other):
            return self.batch(list(self.who), AT)

    def bound(self, who: Sequence[crowd.Person]) -> Pair:
        self.turn += 1
        return bound.phase(self.node, self.config, who, at=AT, turn=self.turn)

    def floor(self, source: str, *, one_time: bool = False) -> Pair:
        """The floor's script writing the visits at ``crowd.times``, or with ``one_time`` all of
        a call's at the time it is sent."""
        admin, shard = self.node.client, whos.keyspace.layout(self.config)[0]
        sha, keys = (
            admin.script_load(source),
            [shard.key("users"), shard.key("guests"), shard.key("visitors:floor")],
        )
        calls = crowd.calls_of(self.who, AT)

        def send() -> int:
            for batch in calls:
                made = [time.time()] * len(batch) if one_time else crowd.times(len(batch))
                args = [
                    value
                    for p, at in zip(batch, made, strict=True)
                    for value in (1 if p.user else 2, whos.keyspace.score(at), p.member)
                ]
                admin.evalsha(sha, len(keys), *keys, *args)
            return len(calls)

        return per(crowd.measure([self.node], send), len(calls) * AT)

    def naive(self) -> Pair:
        cpu = self.node.start()
        for person in self.who:
            self.node.client.zadd(person.key(self.config), {person.member: time.time()})
        usage = self.node.usage(cpu, command="zadd")
        if usage.calls != len(self.who):
            raise RuntimeError(f"{len(self.who)} ZADDs sent, Redis counted {usage.calls}")
        return per([usage], len(self.who))


@dataclass(eq=False)
class Cell:
    """One rate of visits with one ``FLUSH_INTERVAL``, by repetition."""

    rate: int
    interval: float
    visits: list[int] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    lua_us: list[float] = field(default_factory=list)
    #: Redis CPU µs over the cell, and the cell's seconds.
    cpu_us: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    #: Seconds from queued to written, every visit of every repetition.
    delays: list[float] = field(default_factory=list)
    #: The most visits one flush wrote, by repetition: what a process held at most.
    largest: list[int] = field(default_factory=list)


@contextlib.contextmanager
def flushes() -> Iterator[list[tuple[float, int, int]]]:
    """(when its replies came, its calls, its visits) of each flush's round trip, as the
    flusher sends them in this process."""
    original, found = whos.scripts.run, []

    def run(client: Any, calls: Sequence[Any]) -> list[Any]:
        replies = original(client, calls)
        found.append(
            (time.perf_counter(), len(calls), sum(whos.record.entries_in(call) for call in calls))
        )
        return replies

    with mock.patch.object(whos.scripts, "run", run):
        yield found


def flush_cell(
    node: servers.Node,
    url: str,
    cell: Cell,
    who: Iterator[whos.Visit],
    options: Options,
) -> None:
    """Visits at ``cell.rate`` a second, at random (a Poisson process), through the process's
    queue, with the cell's ``FLUSH_INTERVAL``; what they cost, and when each was written."""
    rng = random.Random(len(cell.visits))  # noqa: S311 (arrival times, not secrets)
    seconds = max(options.seconds, options.cell_visits / cell.rate)
    offsets, at = [], rng.expovariate(cell.rate)
    while at < seconds:
        offsets.append(at)
        at += rng.expovariate(cell.rate)
    with (
        override_settings(WHOS_ONLINE={"REDIS_URL": url, "FLUSH_INTERVAL": cell.interval}),
        flushes() as written,
    ):
        config = whos.get_config()
        whos.connection.call(None, lambda client, _config: client.ping())  # connected before
        queued, cpu, started = [], node.start(), time.perf_counter()
        for offset in offsets:
            time.sleep(max(0.0, started + offset - time.perf_counter()))
            queued.append(time.perf_counter())
            visit = next(who)
            shard = whos.keyspace.member_shard(config, visit.kind, visit.member)
            if not whos.visits.queue(config, visit, shard) or whos.flusher.after_recording(config):
                raise RuntimeError("a visit could not be queued or written on a healthy Redis")
        while sum(visits for _, _, visits in written) < len(queued):  # the last flush
            time.sleep(0.001)
        usage, elapsed = node.usage(cpu), time.perf_counter() - started
    ends = [end for end, _, visits in written for _ in range(visits)]
    calls = sum(calls for _, calls, _ in written)
    if len(ends) != len(queued) or usage.calls != calls:
        raise RuntimeError(
            f"{len(queued)} visits queued, {len(ends)} written in {calls} calls; Redis counted "
            f"{usage.calls}"
        )
    cell.visits.append(len(queued))
    cell.calls.append(calls)
    cell.lua_us.append(usage.command_us / len(queued))
    cell.cpu_us.append(usage.cpu_us)
    cell.seconds.append(elapsed)
    cell.delays += [end - at for end, at in zip(ends, queued, strict=True)]
    cell.largest.append(max(visits for _, _, visits in written))


def measure_flushes(node: servers.Node, url: str, batches: Batches) -> tuple[list[Cell], float]:
    """Every rate with every interval, in rotating orders, and an idle cell per repetition
    (the idle server's CPU µs a second: their median)."""
    cells = [Cell(rate, interval) for rate in RATES for interval in INTERVALS]
    idle: list[float] = []

    def visits() -> Iterator[whos.Visit]:
        for turn in range(1_000, 1_000_000):  # movers change topic each time round
            for person in batches.who:
                yield crowd.visit_of(person, time.time(), turn)

    who = visits()

    def measure(cell: Cell | None) -> None:
        if cell is None:
            cpu = node.cpu()
            time.sleep(batches.options.seconds)
            idle.append((node.cpu() - cpu) * 1e6 / batches.options.seconds)
        else:
            flush_cell(node, url, cell, who, batches.options)

    interleaved([None, *cells], batches.options.flush_repeats, measure, label="flushes")
    return cells, statistics.median(idle)


def people_at(pairs: Sequence[Pair], read: Pair, which: int) -> float:
    """People online per Redis process at these costs (``which``: 0 by Lua µs, 1 by CPU)."""
    model = capacity.site_model(capacity.Options())
    return model.people(medians(pairs)[which], read[which], "cache")


def batch_table(found: dict[str, list[Pair]]) -> str:
    ones, read = (
        found["1 per call"],
        medians(found[f"snapshot read of {crowd.NAMES} names (per read)"]),
    )
    rows = []
    for label, pairs in found.items():
        row = [label, column(pairs, 0).show(one), "", column(pairs, 1).show(one), "", ""]
        if "per call" in label and not label.startswith(("the floor", "one plain")):
            row[2] = ratios([p[0] for p in pairs], [p[0] for p in ones]).show(ratio)
            row[4] = ratios([p[1] for p in pairs], [p[1] for p in ones]).show(ratio)
            row[5] = " – ".join(people(people_at(pairs, read, k)) for k in (0, 1))
        rows.append(row)
    return table(
        "visits per script call | Lua µs per visit | × 1 per call | process CPU µs per visit | × "
        "1 per call | people online per Redis process (by Lua µs – by CPU)",
        rows,
    )


def command_table(commands: dict[str, list[tuple[float, float]]], script_us: float) -> str:
    """What the script ran per visit in calls of ``AT``, and what it spent on each."""
    medians_of = {
        name: (statistics.median(c for c, _ in v), statistics.median(u for _, u in v))
        for name, v in commands.items()
    }
    rows = [
        [name.upper(), f"{calls:.2f}", f"{us:.2f}", f"{100 * us / script_us:.0f} %"]
        for name, (calls, us) in sorted(medians_of.items(), key=lambda item: -item[1][1])
    ]
    rest = script_us - sum(us for _, us in medians_of.values())
    rows.append(["the Lua around them", "", f"{rest:.2f}", f"{100 * rest / script_us:.0f} %"])
    return table("command | per visit | µs per visit | of the script's µs", rows)


def flush_table(cells: Sequence[Cell], idle_us: float) -> str:
    """The cells; Redis CPU per visit less the idle server's over as long."""
    zero = {cell.rate: cell for cell in cells if cell.interval == 0}
    net = {
        cell: [
            max(c - idle_us * s, 0) / v
            for c, s, v in zip(cell.cpu_us, cell.seconds, cell.visits, strict=True)
        ]
        for cell in cells
    }
    rows = []
    for cell in cells:
        delays = sorted(cell.delays)
        per_call = [visits / calls for visits, calls in zip(cell.visits, cell.calls, strict=True)]
        written = (
            f"{ms(statistics.median(delays))} / {ms(percentile(delays, 0.99))} / {ms(delays[-1])}"
        )
        lua, cpu = (
            ratios(cell.lua_us, zero[cell.rate].lua_us),
            ratios(net[cell], net[zero[cell.rate]]),
        )
        rows.append(
            [
                cell.rate,
                f"{cell.interval:g}",
                spread(per_call, one),
                spread(cell.lua_us, one),
                lua.show(ratio),
                spread(net[cell], one),
                cpu.show(ratio),
                written,
                max(cell.largest),
            ]
        )
    return table(
        "visits/s per process | FLUSH_INTERVAL s | visits per call (a round trip) | Lua µs per "
        "visit | × interval 0 | process CPU µs per visit | × interval 0 | written after queued, "
        "ms: median / p99 / max | most visits in one flush",
        rows,
    )


def targets(found: dict[str, list[Pair]]) -> list[Target]:
    read = medians(found[f"snapshot read of {crowd.NAMES} names (per read)"])
    cpu = {size: column(found[f"{size} per call"], 1) for size in SIZES if size >= AT}
    floors = [
        column(pairs, 1).show(one)
        for label, pairs in found.items()
        if label.startswith("the floor") and label != ONE_TIME_FLOOR
    ]
    floor = next(pairs for label, pairs in found.items() if label.endswith("(a command per visit)"))

    def over(label: str, base: Sequence[Pair] = floor) -> Spread:
        """Process CPU of phase ``label`` over ``base``'s, per repetition."""
        return ratios([pair[1] for pair in found[label]], [pair[1] for pair in base])

    over_floor = over(f"{AT} per call")
    bounds = [
        f"{over(f'{label}, {AT} per call').show(ratio)} × {'the mix' if whole else 'in no room'}"
        for label, whole in bound.PHASES.items()
    ]
    lean = next(label for label, whole in bound.PHASES.items() if whole)
    script_over_bound = over(f"{AT} per call", found[f"{lean}, {AT} per call"]).show(ratio)
    at = people_at(found[f"{AT} per call"], read, 1)
    return [
        Target(
            f"Redis process CPU per recorded visit at {AT} per call: ≤ {MOST_FLOORS:g} × the floor "
            "(a command per visit) in the same repetition",
            f"{over_floor.show(ratio)} ×; "
            + "; ".join(f"{n} per call: {s.show(one)} µs" for n, s in cpu.items())
            + f"; the floors at {AT} per call: {', '.join(floors)} µs; the same data by the "
            f"leanest Lua (`bench.bound`): {', '.join(bounds)}, the script {script_over_bound} × "
            f"the bound; against the floor as measured "
            f"until 2026-11-27 (a call's visits at one time, "
            f"{column(found[ONE_TIME_FLOOR], 1).show(one)} µs): "
            f"{over(f'{AT} per call', found[ONE_TIME_FLOOR]).show(ratio)} ×",
            over_floor.median <= MOST_FLOORS,
        ),
        Target(
            f"people online per Redis process at {AT} visits per call, by process CPU (the tag on "
            f"every page, SNAPSHOT_MAX_AGE 2): ≥ {people(PER_REDIS)}",
            people(at),
            at >= PER_REDIS,
        ),
    ]


def run(options: Options) -> Section:
    if options.visits % 100 or options.people < 20 * options.visits:
        raise ValueError("--visits must be a multiple of 100, and --people 20 times as many")
    with servers.redis_server() as server, override_settings(WHOS_ONLINE={"REDIS_URL": server.url}):
        node, config = servers.Node.of(server), whos.get_config()
        crowd.fill(lambda _: node.client, config, options.people)
        batches = Batches(node, config, options)
        phases = batches.phases()
        found = interleaved(
            list(phases), options.repeats, lambda name: phases[name](), label="batches"
        )
        cells, idle_us = measure_flushes(node, server.url, batches)
        version = node.client.info("server")["redis_version"]
    script_us = medians(found[f"{AT} per call"])[0]
    return Section(
        "Batches of visits",
        f"redis-server {version}; {number(options.people)} people online (1 in {crowd.USER_EVERY} "
        f"a user); the visits are of {number(options.visits)} of them, half users with display "
        f"data and half guests, half of each in a room (of {crowd.ROOMS}), half of those moving "
        f"to another room on each visit. {options.repeats} repetitions of every phase, in turns; "
        f"{number(options.reads)} snapshot reads per repetition. Median (min–max); ratios to one "
        "visit per call in the same repetition; people online by the capacity model of `bench "
        "capacity` at this cost per visit and the read's.",
        [
            batch_table(found),
            f"The commands the script ran in the calls of {AT} (`INFO commandstats`, which times "
            "the commands a script runs too), medians of the repetitions:",
            command_table(batches.commands, script_us),
            "The process's own queue and flusher: visits arriving at random at the rate given, "
            f"{options.flush_repeats} repetitions of each cell, in turns (cells of "
            f"{options.cell_visits} visits at least). Redis CPU per visit less the idle server's "
            f"({idle_us:.0f} µs a second); "
            "ratios to FLUSH_INTERVAL 0 at the same rate, in the same repetition. Written after "
            "queued: from the visit queued to its flush's replies.",
            flush_table(cells, idle_us),
        ],
        targets=targets(found),
    )
