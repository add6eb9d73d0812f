"""How many people online one Redis process serves, and what three cluster masters add.

A fresh redis-server holds ``people`` online (``bench.people``); visits of people online already
are recorded ``batch`` per script call, as a flush sends them, and snapshots of 50 names are read
as the tag reads them, in turns. Per visit and per read: Redis's Lua time (``INFO commandstats``)
and the CPU of the whole redis-server, which also reads requests and writes replies. The model of
docs/scaling.md turns them into people online. Then the same on a 3-master cluster with
``SHARDS = 6``: each master's share of the work, and a master kept busy with its own shards.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from dataclasses import dataclass
from typing import Final

from django.test import override_settings

from bench import internals as whos
from bench import people as crowd
from bench.harness import servers
from bench.harness.report import Section, Target, fixed, number, people, table
from bench.harness.rounds import interleaved
from bench.people import Pair, column, medians, per
from tests.support.topologies import ClusterServers

MASTERS: Final = 3
CLUSTER_SHARDS: Final = 6
#: The goals: people online one Redis process holds; masters for 10 M at most.
PER_REDIS: Final = 6_000_000
TEN_MILLION: Final = 10_000_000
MOST_MASTERS: Final = 2
SCENARIOS: Final = ("recording alone", "no cache", "cache")
one = fixed(1)


@dataclass(frozen=True)
class Options:
    people: int = 1_000_000
    visits: int = 4_000
    reads: int = 2_000
    repeats: int = 5
    batch: int = 20
    page_every: float = 30.0
    processes: int = 100
    stay: float = 900.0


QUICK = Options(people=20_000, visits=200, reads=50, repeats=1)


@dataclass(frozen=True)
class Model:
    """The site: each person recorded once per ``throttle``, a page with the tag every
    ``page_every`` s, staying ``stay`` s (the window included); ``processes`` web processes,
    each reading a snapshot at most every ``max_age`` s, and afresh for an arrival's next page
    if it comes within the snapshot's age (and the second of the recording)."""

    throttle: float
    page_every: float
    processes: int
    max_age: float
    stay: float
    #: µs a second that every web process costs Redis whatever the traffic: its flush of page
    #: hits alone, at most one a second (``COUNT_HITS``, every request throttled).
    idle_us: float = 0.0

    @property
    def fresh_share(self) -> float:
        return min(1.0, (self.max_age + 1) / self.page_every)

    def reads(self, scenario: str, online: float) -> float:
        """Snapshot reads per second with ``online`` people online."""
        page_views = online / self.page_every
        if scenario != "cache":
            return page_views if scenario == "no cache" else 0.0
        return min(
            page_views, self.processes / self.max_age + online / self.stay * self.fresh_share
        )

    def people(self, record_us: float, read_us: float, scenario: str) -> float:
        """People online when one Redis process's calls take all of its CPU (the load is
        linear in them in each regime: a bisection finds where it reaches a second a second)."""

        def load(online: float) -> float:
            recording = online / self.throttle * record_us
            reading = self.reads(scenario, online) * read_us
            return self.processes * self.idle_us + recording + reading

        if load(0) >= 1e6:
            return 0.0
        low, high = 0.0, 1.0
        while load(high) < 1e6:
            low, high = high, high * 2
            if high > 1e12:
                return math.inf
        for _ in range(100):
            middle = (low + high) / 2
            low, high = (middle, high) if load(middle) < 1e6 else (low, middle)
        return low

    def masters(
        self, target: float, visit_us: float, shard_read_us: float, scenario: str
    ) -> int | None:
        """Masters for ``target`` people with two shards each, spread evenly: a master takes
        1/M of the visits but reads its two shards on every read (None: reads cap it below)."""
        found = (
            m
            for m in range(1, 1001)
            if self.people(visit_us / m, 2 * shard_read_us, scenario) >= target
        )
        return next(found, None)

    def with_idle(self, idle_us: float) -> Model:
        return dataclasses.replace(self, idle_us=idle_us)


def site_model(options: Options) -> Model:
    defaults = whos.DEFAULTS
    return Model(
        defaults["THROTTLE"],
        options.page_every,
        options.processes,
        defaults["SNAPSHOT_MAX_AGE"],
        options.stay,
    )


def one_redis(options: Options) -> tuple[dict[str, list[Pair]], str]:
    """Per repetition, µs per visit of users, of guests, and per read; and Redis's version."""
    with servers.redis_server() as server, override_settings(WHOS_ONLINE={"REDIS_URL": server.url}):
        node, config, client = (
            servers.Node.of(server),
            whos.get_config(),
            whos.clients.request_client(),
        )
        crowd.fill(lambda _: node.client, config, options.people)
        users = crowd.chosen(config, options.people, options.visits, 0, seed=1)
        guests = crowd.chosen(config, options.people, 0, options.visits, seed=2)
        crowd.warm_up(client, config, users + guests)
        turns = itertools.count(1)

        def measure(phase: str) -> Pair:
            if phase == "read":
                return per(crowd.reads([node], client, config, options.reads), options.reads)
            if phase == "hits":
                return per(crowd.measure([node], lambda: hits_flushes(client, config, 200)), 200)
            who = users if phase == "user" else guests
            usages, visits = crowd.in_batches(
                [node], client, config, who, size=options.batch, turn=next(turns)
            )
            return per(usages, visits)

        costs = interleaved(
            ["user", "guest", "read", "hits"], options.repeats, measure, label="one Redis"
        )
        costs["visit"] = [
            ((u[0] + g[0]) / 2, (u[1] + g[1]) / 2)
            for u, g in zip(costs["user"], costs["guest"], strict=True)
        ]
        return costs, str(node.client.info("server")["redis_version"])


def hits_flushes(client: whos.clients.Client, config: whos.Config, count: int) -> int:
    """``count`` flushes of a process that holds page hits alone (a second's worth each, as a
    process whose requests are all throttled sends them once a second): the calls made."""
    base = whos.keyspace.layout(config)[0]
    token, second = f"bench-{time.time_ns()}", int(time.time())
    for flush in range(1, count + 1):
        extras = whos.record.Extras(hits={("hits", second + flush): 37}, batch=(token, flush))
        calls = whos.record.batch_calls(
            config, base, [], now=second + flush, epoch="bench", extras=extras
        ).calls
        whos.scripts.run(client, calls)
    return count


@dataclass
class Cluster:
    """Per master, by repetition: µs per site visit and per site read, and the master's share
    of the visits' calls; and µs per visit of the first master taking its own shards' visits."""

    labels: list[str]
    visit: list[list[Pair]]
    read: list[list[Pair]]
    calls: list[list[float]]
    busy: list[Pair]


def cluster(options: Options) -> Cluster:
    """Visits go ``batch × 6`` at once, as a flush sends them: a call per shard of about
    ``batch``; the first master's own shards' visits ``2 × batch`` at once."""
    nodes = ClusterServers(MASTERS)
    nodes.start()
    try:
        settings = {"REDIS_URL": nodes.url, "REDIS_CLUSTER": True, "SHARDS": CLUSTER_SHARDS}
        with override_settings(WHOS_ONLINE=settings):
            config, client = whos.get_config(), whos.clients.request_client()
            node_of = nodes.node_of_key
            shards = [node_of(shard.key("users")).port for shard in whos.keyspace.layout(config)]
            watched = [
                servers.Node.of(n, f"master on port {n.port} ({shards.count(n.port)} shards)")
                for n in nodes.nodes
            ]
            crowd.fill(lambda key: node_of(key).client(), config, options.people)
            who = crowd.chosen(
                config,
                options.people,
                options.visits // 2,
                options.visits - options.visits // 2,
                seed=3,
            )
            crowd.warm_up(client, config, who)
            own = [
                person for person in who if node_of(person.key(config)).port == nodes.nodes[0].port
            ]
            found = Cluster(
                [n.label for n in watched],
                [[] for _ in watched],
                [[] for _ in watched],
                [[] for _ in watched],
                [],
            )
            for turn in range(1, options.repeats + 1):
                busy, count = crowd.in_batches(
                    watched[:1], client, config, own, size=2 * options.batch, turn=2 * turn
                )
                found.busy.append(per(busy, count))
                visited, count = crowd.in_batches(
                    watched,
                    client,
                    config,
                    who,
                    size=options.batch * CLUSTER_SHARDS,
                    turn=2 * turn + 1,
                )
                read = crowd.reads(watched, client, config, options.reads)
                for index, (v, r) in enumerate(zip(visited, read, strict=True)):
                    found.visit[index].append(per([v], count))
                    found.read[index].append(per([r], options.reads))
                    found.calls[index].append(v.calls / sum(u.calls for u in visited))
            return found
    finally:
        nodes.close()


def costs_table(costs: dict[str, list[Pair]], batch: int) -> str:
    rows = []
    for label, key in (
        (f"recorded visit, user (name and profile URL), {batch} per call", "user"),
        (f"recorded visit, guest, {batch} per call", "guest"),
        ("recorded visit, half users and half guests (the model's)", "visit"),
        (f"snapshot read, {crowd.NAMES} names", "read"),
        ("a process's flush of page hits alone (at most one a second, per process)", "hits"),
    ):
        lua, cpu = column(costs[key], 0), column(costs[key], 1)
        rows.append(
            [
                label,
                lua.show(one),
                cpu.show(one),
                f"{number(1e6 / lua.median)} – {number(1e6 / cpu.median)}",
            ]
        )
    return table(
        "visit or read | Lua µs (commandstats) | process CPU µs | per second per Redis process "
        "(by Lua µs – by CPU)",
        rows,
    )


def people_table(model: Model, costs: dict[str, list[Pair]], spread: Cluster) -> str:
    visit, read = medians(costs["visit"]), medians(costs["read"])
    visits, reads = [medians(p) for p in spread.visit], [medians(p) for p in spread.read]
    labels = {
        "recording alone": "none (no tag on the pages)",
        "no cache": f"every page view: people / {model.page_every:g} s (`SNAPSHOT_MAX_AGE = 0`)",
        "cache": f"{model.processes} / {model.max_age:g} s + {model.fresh_share:.0%} of arrivals, "
        f"people / {model.stay:g} s (`SNAPSHOT_MAX_AGE = {model.max_age:g}`, the default: an "
        f"arrival's page reads afresh within {model.max_age + 1:g} s of their recording)",
    }
    rows = []
    for scenario in SCENARIOS:
        alone = [people(model.people(visit[k], read[k], scenario)) for k in (0, 1)]
        spread_over = [
            people(
                min(model.people(v[k], r[k], scenario) for v, r in zip(visits, reads, strict=True))
            )
            for k in (0, 1)
        ]
        rows.append([labels[scenario], *alone, *spread_over])
    return (
        "People online when Redis CPU reaches 100 %: each person recorded once per THROTTLE "
        f"({model.throttle:g} s), staying {model.stay:g} s (WINDOW included) and viewing a page "
        f"with the tag every {model.page_every:g} s, {model.processes} web processes, each "
        f"costing Redis {model.idle_us:.0f} µs of CPU a second whatever the traffic (its flush of "
        "page hits alone, at most one a second). Cost per call by Lua time, or by process "
        "CPU.\n\n"
        + table(
            f"snapshot reads per second | 1 Redis, by Lua µs | 1 Redis, by CPU | {MASTERS} "
            f"masters, by Lua µs | {MASTERS} masters, by CPU",
            rows,
        )
    )


def masters_table(spread: Cluster) -> str:
    visits = [medians(p) for p in spread.visit]
    lua, cpu = sum(v[0] for v in visits), sum(v[1] for v in visits)
    rows = [
        [
            label,
            column([(c, c) for c in calls], 0)
            .show(lambda s: f"{100 * s:.0f}")
            .replace(" (", " % (", 1),
            f"{100 * v[0] / lua:.0f} %",
            f"{100 * v[1] / cpu:.0f} %",
            column(r, 0).show(one),
            column(r, 1).show(one),
        ]
        for label, calls, v, r in zip(spread.labels, spread.calls, visits, spread.read, strict=True)
    ]
    return (
        f"{MASTERS}-master Redis Cluster, SHARDS = {CLUSTER_SHARDS}: each master's share of the "
        "recorded visits (EVALSHA calls, their Lua µs, process CPU), and what one snapshot read "
        f"costs it (every read asks every shard). Shares of work on {os.cpu_count()} cores, not a "
        "speed-up.\n\n"
        + table(
            "master | visits' EVALSHAs | visits' Lua µs | visits' CPU | Lua µs per read | CPU µs "
            "per read",
            rows,
        )
    )


def paths(model: Model, costs: dict[str, list[Pair]], spread: Cluster) -> tuple[str, list[Target]]:
    """What the cluster's figures say, the path to 10 M people online, and the targets."""
    visit, read = medians(costs["visit"]), medians(costs["read"])
    visits, busy = [medians(p) for p in spread.visit], medians(spread.busy)
    total = (sum(v[0] for v in visits), sum(v[1] for v in visits))
    shard_read = tuple(sum(medians(r)[k] for r in spread.read) / CLUSTER_SHARDS for k in (0, 1))
    alone_1 = model.people(visit[0], read[0], "recording alone")
    alone_3 = min(model.people(v[0], 0, "recording alone") for v in visits)
    busiest = max(v[0] for v in visits) / total[0]
    lines = [
        f"Recording alone, {MASTERS} masters ≈ {MASTERS} × one master when the shards spread "
        f"evenly: the busiest master takes {100 * busiest:.0f} % of the visits' Lua time (even: "
        f"{100 / MASTERS:.0f} %), so {people(alone_3)} against {MASTERS} × {people(alone_1)} = "
        f"{people(MASTERS * alone_1)}. A visit costs {total[0]:.1f} µs of Lua ({total[1]:.1f} of "
        "CPU) in cluster mode with its flush's calls going round the masters, against "
        f"{visit[0]:.1f} ({visit[1]:.1f}) on one Redis; the first master, taking visits of its "
        f"own shards back to back, spends {busy[0]:.1f} ({busy[1]:.1f}). The masters and the "
        "client take turns on the cores, so that a master that idles between its calls finds its "
        "caches cold, which a busy master does not. Reads do not spread: each master pays for "
        f"part of every read, {CLUSTER_SHARDS // MASTERS} shards' worth."
    ]
    for label, costs_of in (("going round the masters", total), ("of the busy master", busy)):
        needed = []
        for scenario in SCENARIOS:
            found = [
                model.masters(TEN_MILLION, costs_of[k], shard_read[k], scenario) for k in (0, 1)
            ]
            caps = [
                f"none, reads cap it at {people(model.people(0.0, 2 * shard_read[k], scenario))}"
                for k in (0, 1)
            ]
            needed.append(f"{scenario}: {found[0] or caps[0]} ({found[1] or caps[1]})")
        lines.append(
            f"Path to {people(TEN_MILLION)} people online at the visits' costs {label} "
            f"({costs_of[0]:.1f} µs of Lua, {costs_of[1]:.1f} of CPU, per visit; "
            f"{shard_read[0]:.1f} and {shard_read[1]:.1f} per shard read), two shards per master; "
            f"masters needed by Lua µs (by CPU): {'; '.join(needed)}."
        )
    per_redis = model.people(visit[1], read[1], "cache")
    masters = model.masters(TEN_MILLION, busy[1], shard_read[1], "cache")
    going_round = model.masters(TEN_MILLION, total[1], shard_read[1], "cache")
    targets = [
        Target(
            "people online per Redis process, by process CPU, the tag on every page "
            f"(SNAPSHOT_MAX_AGE {model.max_age:g}): ≥ {people(PER_REDIS)}",
            people(per_redis),
            per_redis >= PER_REDIS,
        ),
        Target(
            f"masters for {people(TEN_MILLION)} people online, by process CPU at the busy "
            f"master's cost per visit, the tag on every page: ≤ {MOST_MASTERS}",
            f"{masters or 'none'} (with the visits' calls going round the masters: "
            f"{going_round or 'none'})",
            masters is not None and masters <= MOST_MASTERS,
        ),
    ]
    return "\n".join(lines), targets


def run(options: Options) -> Section:
    if options.people < 20 * crowd.NAMES * crowd.USER_EVERY:
        raise ValueError(f"--people must be at least {20 * crowd.NAMES * crowd.USER_EVERY}")
    costs, version = one_redis(options)
    model = site_model(options).with_idle(medians(costs["hits"])[1])
    spread = cluster(options)
    conclusions, targets = paths(model, costs, spread)
    return Section(
        "Capacity",
        f"redis-server {version}; {number(options.people)} people online (1 in {crowd.USER_EVERY} "
        f"a user), {options.repeats} repetitions of {number(options.visits)} visits of users, as "
        f"many of guests ({options.batch} per script call; half of the people in rooms), and "
        f"{number(options.reads)} reads of {crowd.NAMES} names; median (min–max).",
        [
            "Redis CPU per recorded visit and per read, one Redis process:",
            costs_table(costs, options.batch),
            people_table(model, costs, spread),
            masters_table(spread),
            conclusions,
        ],
        targets=targets,
    )
