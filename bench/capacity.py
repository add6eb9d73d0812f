"""How many people online one Redis process serves, and what three cluster masters add.

Run from the repository root: ``python3 scripts/dev.py bench capacity`` (``--help`` for the
options).

Capacity is a matter of Redis CPU, so it is measured on the server, not at the client: a fresh
redis-server holds ``--people`` members online (a fifth of them users), then records visits of
people already online (the common case: each is recorded again every ``THROTTLE``) and reads
snapshots of 50 names, as the template tag does. Per call it takes

* the time of the Lua scripts, from ``INFO commandstats`` (``cmdstat_evalsha``, reset with
  ``CONFIG RESETSTAT`` before each phase): what Redis spends on whos_online's work itself;
* the CPU of the whole redis-server process (Linux schedstat), which also pays for reading each
  request and writing its reply. One client sending one call at a time makes that share as large
  as it gets; many busy connections share the event loop's wake-ups, so the truth lies between.

One Redis process is full when those µs add up to a second per second. The model then counts the
calls a site makes: each person online is recorded once per ``THROTTLE`` and views a page with the
tag every ``--page-every`` seconds. Every page view reads a snapshot when ``SNAPSHOT_MAX_AGE`` is
0. With the default of 2 s each of ``--processes`` web processes reads at most every 2 s, and a
page reads afresh for a visitor who was not online before and was recorded after its process's
kept snapshot was read (so that they see themselves). Visitors arrive at people / ``--stay`` a
second (``--stay``: how long a person stays online, the window included); with a page every
``--page-every`` seconds, an arrival's next page comes within the snapshot's age (and the second
of the recording) for a share (2 + 1) / page-every of them. Reads are processes / 2 s plus that
share of the arrivals, per second.

The cluster part starts three masters (tests/topologies.py) with ``SHARDS = 6``, records visits of
people spread over the shards through the API, and reads each master's ``INFO commandstats``: the
share of the work each master takes shows whether the shards spread it evenly. On a machine with
two cores the three masters compete for the CPU, so the cluster's speed is not measured; its
capacity follows from each master's share of the per-call costs. Every snapshot read asks every
shard, so each master pays for every read whatever the number of masters.

Each phase is repeated (``--repeats``), in turns; tables give the median and the range.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import platform
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Final, TypeAlias

import django
import redis

from bench import servers, sorted_sets, stats

# whos_online is imported inside the functions: its modules read Django's settings, which are
# set up in main(), as ``python -m bench`` does.
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from whos_online.conf import Config
    from whos_online.connection import Client

#: Every this many people online is a user; the others are guests.
USER_EVERY: Final = 5
#: Names a snapshot read asks for: the template tag's default ``DISPLAY_LIMIT``.
NAMES: Final = 50
#: Shards on the cluster: two per master.
CLUSTER_SHARDS: Final = 6
MASTERS: Final = 3
#: The goal of the last line.
TARGET_PEOPLE: Final = 10_000_000
#: µs of CPU one Redis process has in a second.
BUDGET_US: Final = 1e6
FIRST_ADDRESS: Final = int(ipaddress.IPv4Address("10.0.0.0"))

#: µs per call: (Lua time from INFO commandstats, CPU of the redis-server process).
Pair: TypeAlias = tuple[float, float]


@dataclass(frozen=True)
class Usage:
    """What one redis-server did during a phase."""

    #: EVALSHA calls, and the µs Redis spent in them (INFO commandstats).
    calls: int
    script_us: float
    #: µs of CPU the whole process used (schedstat): scripts, reading requests, writing replies.
    cpu_us: float


@dataclass(frozen=True)
class Watched:
    """A redis-server whose work a phase measures: a client for INFO, and its process id."""

    client: redis.Redis
    pid: int
    label: str

    def start(self) -> float:
        self.client.config_resetstat()
        return servers.cpu_seconds([self.pid])

    def usage(self, cpu_before: float) -> Usage:
        cpu = servers.cpu_seconds([self.pid]) - cpu_before
        found = self.client.info("commandstats").get("cmdstat_evalsha", {})
        return Usage(int(found.get("calls", 0)), float(found.get("usec", 0)), cpu * 1e6)


def measure(nodes: Sequence[Watched], action: Callable[[int], object], count: int) -> list[Usage]:
    """Run ``action(0)`` … ``action(count - 1)`` and return what each node did meanwhile."""
    before = [node.start() for node in nodes]
    for index in range(count):
        action(index)
    return [node.usage(cpu) for node, cpu in zip(nodes, before, strict=True)]


def per_call(usages: Sequence[Usage], count: int, expected_calls: int) -> Pair:
    """(script µs, process CPU µs) per operation over all ``usages``; fails if the EVALSHAs
    counted are not the ``expected_calls`` per operation (a NOSCRIPT retry, or a lost call)."""
    calls = sum(usage.calls for usage in usages)
    if calls != count * expected_calls:
        msg = f"expected {count * expected_calls} EVALSHA calls, Redis counted {calls}"
        raise RuntimeError(msg)
    script = sum(usage.script_us for usage in usages)
    cpu = sum(usage.cpu_us for usage in usages)
    return script / count, cpu / count


def address(n: int) -> str:
    return str(ipaddress.IPv4Address(FIRST_ADDRESS + n))


def is_user(n: int) -> bool:
    return n % USER_EVERY == 0


def fill(client_of: Callable[[str], redis.Redis], config: Config, people: int, now: float) -> None:
    """Put ``people`` online, seen over the last five minutes, each in the set of their shard:
    users by primary key ``n``, guests by the day's pseudonym of ``address(n)``. Each set is
    filled through ``client_of(key)``, a client of the server that holds it."""
    from whos_online import identity, store

    sets: defaultdict[str, dict[str, float]] = defaultdict(dict)
    for n in range(people):
        kind, member = (
            ("users", str(n))
            if is_user(n)
            else ("guests", identity.guest_id(address(n), config, now))
        )
        sets[store.keys.member_shard(config, kind, member).key(kind)][member] = (
            now - 300 * n / people
        )
    for key, members in sets.items():
        sorted_sets.fill(client_of(key), key, members.items())


def record_user(client: Client, config: Config, n: int) -> None:
    """Record user ``n`` with display data, as ``record_user`` does (one EVALSHA)."""
    from whos_online import identity, store, users

    now = time.time()
    pk = str(n)
    details = users.UserDetails(pk=pk, hidden=False, name=f"Member {n}", url=f"/members/{n}/")
    visitor = identity.visitor_id(f"u:{pk}", now)
    visit = store.visits.Visit(kind="users", member=pk, now=now, user=details, visitor=visitor)
    store.visits.record(client, config, [visit])


def record_guest(client: Client, config: Config, n: int) -> None:
    """Record the guest at ``address(n)``, as ``record_guest`` does (one EVALSHA)."""
    from whos_online import identity, store

    now = time.time()
    member = identity.guest_id(address(n), config, now)
    visitor = identity.visitor_id(f"g:{member}", now)
    visit = store.visits.Visit(kind="guests", member=member, now=now, visitor=visitor)
    store.visits.record(client, config, [visit])


def record_guest_by_api(n: int) -> None:
    """Record the guest at ``address(n)`` through the public API, which fails open: a visit it
    could not write would make the figures wrong, so it stops the run instead."""
    import whos_online

    if not whos_online.record_guest(address(n), now=time.time()):
        raise RuntimeError(f"record_guest({address(n)!r}) could not write to Redis")


def each(
    record: Callable[[Client, Config, int], None], client: Client, config: Config, who: list[int]
) -> Callable[[int], None]:
    """An action for ``measure``: its ``index``-th call records ``who[index]``."""
    return lambda index: record(client, config, who[index])


def read(client: Client, config: Config) -> None:
    from whos_online import store

    found = store.reading.snapshot(client, config, limit=NAMES, now=time.time())
    if len(found.listed) != NAMES:
        raise RuntimeError(f"the snapshot listed {len(found.listed)} names, not {NAMES}")


def chosen(rng: random.Random, people: int, count: int, *, users: bool) -> list[int]:
    """``count`` distinct people online, users or guests."""
    picked: set[int] = set()
    while len(picked) < count:
        n = rng.randrange(people)
        if is_user(n) == users:
            picked.add(n)
    return list(picked)


@dataclass
class Costs:
    """µs per call, by repetition."""

    user: list[Pair]
    guest: list[Pair]
    read: list[Pair]

    def visit(self) -> list[Pair]:
        """A recorded visit of the model: half users, half guests."""
        return [
            ((u[0] + g[0]) / 2, (u[1] + g[1]) / 2)
            for u, g in zip(self.user, self.guest, strict=True)
        ]


def one_redis(people: int, visits: int, reads: int, repeats: int) -> tuple[Costs, str]:
    """Per-call costs on one redis-server holding ``people`` online, and its version."""
    from django.test import override_settings

    from whos_online import conf, connection

    rng = random.Random(1)  # noqa: S311 (picks visitors, not secrets)
    with (
        servers.redis_server() as server,
        override_settings(WHOS_ONLINE={"REDIS_URL": server.url}),
    ):
        assert server.process is not None
        admin = redis.Redis.from_url(server.url)
        node = Watched(admin, server.process.pid, "one Redis")
        config = conf.get_config()
        client = connection.request_client()
        progress(f"filling one Redis with {stats.number(people)} people online…")
        fill(lambda _: admin, config, people, time.time())
        # Loads the scripts, and gives the newest users their display HASH, as a site has.
        for n in chosen(rng, people, 2 * NAMES, users=True):
            record_user(client, config, n)
        record_guest(client, config, 1)
        read(client, config)
        costs = Costs([], [], [])
        for repeat in range(repeats):
            progress(f"one Redis, repetition {repeat + 1} of {repeats}…")
            users = chosen(rng, people, visits, users=True)
            guests = chosen(rng, people, visits, users=False)
            phases: list[tuple[list[Pair], Callable[[int], object], int]] = [
                (costs.user, each(record_user, client, config, users), visits),
                (costs.guest, each(record_guest, client, config, guests), visits),
                (costs.read, lambda _: read(client, config), reads),
            ]
            for results, action, count in stats.rotated(phases, repeat):
                results.append(per_call(measure([node], action, count), count, 1))
        version = str(admin.info("server")["redis_version"])
    return costs, version


@dataclass
class ClusterCosts:
    """Per master, by repetition: µs per site visit and per site read, (script, process CPU);
    and each master's share of the visits' EVALSHA calls."""

    labels: list[str]
    visit: list[list[Pair]]
    read: list[list[Pair]]
    visit_calls: list[list[float]]


def cluster(people: int, visits: int, reads: int, repeats: int) -> ClusterCosts:
    """Per-master costs of visits and reads on a 3-master cluster with ``CLUSTER_SHARDS``."""
    from django.test import override_settings

    from tests.topologies import ClusterServers
    from whos_online import conf, connection, keyspace

    rng = random.Random(2)  # noqa: S311 (picks visitors, not secrets)
    nodes = ClusterServers(MASTERS)
    nodes.start()
    try:
        settings = {"REDIS_URL": nodes.url, "REDIS_CLUSTER": True, "SHARDS": CLUSTER_SHARDS}
        with override_settings(WHOS_ONLINE=settings):
            config = conf.get_config()
            client = connection.request_client()
            shards_on: defaultdict[int, int] = defaultdict(int)
            for shard in keyspace.layout(config):
                shards_on[nodes.node_of_key(shard.key("users")).port] += 1
            watched = []
            for node in nodes.nodes:
                assert node.process is not None
                label = f"master on port {node.port} ({shards_on[node.port]} shards)"
                watched.append(Watched(node.client(), node.process.pid, label))
            progress(f"filling the cluster with {stats.number(people)} people online…")
            fill(lambda key: nodes.node_of_key(key).client(), config, people, time.time())
            for n in chosen(rng, people, 12 * NAMES, users=True):
                record_user(client, config, n)
            for n in chosen(rng, people, 12 * NAMES, users=False):
                record_guest_by_api(n)
            read(client, config)
            result = ClusterCosts(
                [node.label for node in watched],
                [[] for _ in watched],
                [[] for _ in watched],
                [[] for _ in watched],
            )
            for repeat in range(repeats):
                progress(f"cluster, repetition {repeat + 1} of {repeats}…")
                users = chosen(rng, people, visits // 2, users=True)
                guests = chosen(rng, people, visits - len(users), users=False)

                def visit(index: int, users: list[int] = users, guests: list[int] = guests) -> None:
                    if index < len(users):
                        record_user(client, config, users[index])
                    else:
                        record_guest_by_api(guests[index - len(users)])

                visited = measure(watched, visit, visits)
                per_call(visited, visits, 1)
                was_read = measure(watched, lambda _: read(client, config), reads)
                per_call(was_read, reads, CLUSTER_SHARDS)
                for index, (v, r) in enumerate(zip(visited, was_read, strict=True)):
                    result.visit[index].append((v.script_us / visits, v.cpu_us / visits))
                    result.read[index].append((r.script_us / reads, r.cpu_us / reads))
                    result.visit_calls[index].append(v.calls / visits)
    finally:
        nodes.close()
    return result


@dataclass(frozen=True)
class Model:
    """The site the capacity is worked out for."""

    throttle: float
    page_every: float
    processes: int
    max_age: float
    #: Seconds a person stays online, WINDOW included: people / stay arrive every second.
    stay: float


#: How snapshot reads come, by scenario of the capacity table.
SCENARIOS: Final = ("recording alone", "no cache", "cache")


def reads_per_second(model: Model, scenario: str, people: float) -> float:
    page_views = people / model.page_every
    kept = model.processes / model.max_age
    if scenario == "recording alone":
        return 0.0
    if scenario == "no cache":
        return page_views
    return min(page_views, kept + people / model.stay * fresh_share(model))


def fresh_share(model: Model) -> float:
    """Share of arrivals whose next page finds the kept snapshot older than their recording:
    those whose next page comes within its age and the second of the recording."""
    return min(1.0, (model.max_age + 1) / model.page_every)


def people_at_full_cpu(record_us: float, read_us: float, model: Model, scenario: str) -> float:
    """People online at which one Redis process's calls take all of its CPU.

    The load is linear in the people online in each regime, so a bisection over ``people``
    finds where it reaches a second per second without a formula per scenario."""

    def load(people: float) -> float:
        return people / model.throttle * record_us + reads_per_second(model, scenario, people) * (
            read_us
        )

    if load(0) >= BUDGET_US:
        return 0.0
    low, high = 0.0, 1.0
    while load(high) < BUDGET_US:
        low, high = high, high * 2
        if high > 1e12:
            return math.inf
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if load(middle) < BUDGET_US else (low, middle)
    return low


def cluster_people(
    visit_us: Sequence[float], read_us: Sequence[float], model: Model, scenario: str
) -> float:
    """People online when the busiest master is full: each master does its share of the visits
    and its part of every read."""
    return min(
        people_at_full_cpu(visit, reads, model, scenario)
        for visit, reads in zip(visit_us, read_us, strict=True)
    )


def masters_for(
    target: float, visit_us: Pair, shard_read_us: Pair, model: Model, scenario: str
) -> str:
    """Masters needed for ``target`` people online with two shards per master, spread evenly,
    by Lua µs (by process CPU): each master takes 1/M of the visits but reads its two shards on
    every read, so reads set a ceiling that no number of masters lifts."""
    found = []
    for k in (0, 1):
        for masters in range(1, 1001):
            per_master = people_at_full_cpu(
                visit_us[k] / masters, 2 * shard_read_us[k], model, scenario
            )
            if per_master >= target:
                found.append(str(masters))
                break
        else:
            ceiling = people_at_full_cpu(0.0, 2 * shard_read_us[k], model, scenario)
            found.append(f"none, reads cap it at {people_label(ceiling)}")
    return f"{found[0]} ({found[1]})"


def people_label(people: float) -> str:
    if math.isinf(people):
        return "∞"
    if people >= 1e6:
        return f"{people / 1e6:.1f} M"
    return f"{people / 1e3:.0f} k"


def medians(pairs: Sequence[Pair]) -> Pair:
    return (
        stats.Spread.of([p[0] for p in pairs]).median,
        stats.Spread.of([p[1] for p in pairs]).median,
    )


def both(pairs: Sequence[Pair], which: int) -> stats.Spread:
    return stats.Spread.of([pair[which] for pair in pairs])


def us1(value: float) -> str:
    return f"{value:.1f}"


def report(
    *,
    people: int,
    load: float,
    model: Model,
    single: Costs,
    spread: ClusterCosts,
    version: str,
    repeats: int,
    visits: int,
    reads: int,
) -> str:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores (load average "
        f"{load:.1f} at the start: other work on the machine widens the ranges), "
        f"{platform.system()} {platform.release()}; Python {platform.python_version()}, "
        f"redis-py {metadata.version('redis')}, redis-server {version}. "
        f"{stats.number(people)} people online (1 in {USER_EVERY} a user), {repeats} repetitions "
        f"of {stats.number(visits)} visits and {stats.number(reads)} reads of {NAMES} names; "
        "median (min–max).",
        "",
        "Redis CPU per call, one Redis process:",
        "",
    ]
    rows = []
    for label, pairs in (
        ("recorded visit, user (name and profile URL)", single.user),
        ("recorded visit, guest", single.guest),
        ("recorded visit, half users and half guests (the model's)", single.visit()),
        (f"snapshot read, {NAMES} names", single.read),
    ):
        script, cpu = both(pairs, 0), both(pairs, 1)
        rows.append(
            [
                label,
                script.show(us1),
                cpu.show(us1),
                f"{stats.number(1e6 / script.median)} – {stats.number(1e6 / cpu.median)}",
            ]
        )
    header = [
        "call",
        "Lua µs (commandstats)",
        "process CPU µs",
        "calls/s per Redis process (by Lua µs – by CPU)",
    ]
    lines += [stats.table(header, rows), ""]

    visit_1 = medians(single.visit())
    read_1 = medians(single.read)
    visit_m = [medians(pairs) for pairs in spread.visit]
    read_m = [medians(pairs) for pairs in spread.read]
    kept = f"{model.processes} / {model.max_age:g} s"
    reads_text = {
        "recording alone": "none (no tag on the pages)",
        "no cache": f"every page view: people / {model.page_every:g} s (`SNAPSHOT_MAX_AGE = 0`)",
        "cache": f"{kept} + {fresh_share(model):.0%} of arrivals, people / {model.stay:g} s "
        f"(`SNAPSHOT_MAX_AGE = {model.max_age:g}`, the default: an arrival's page reads afresh "
        f"within {model.max_age + 1:g} s of their recording)",
    }
    rows = []
    for scenario in SCENARIOS:
        rows.append(
            [
                reads_text[scenario],
                *(
                    people_label(people_at_full_cpu(visit_1[k], read_1[k], model, scenario))
                    for k in (0, 1)
                ),
                *(
                    people_label(
                        cluster_people(
                            [v[k] for v in visit_m], [r[k] for r in read_m], model, scenario
                        )
                    )
                    for k in (0, 1)
                ),
            ]
        )
    lines += [
        f"People online when Redis CPU reaches 100 %: each person recorded once per THROTTLE "
        f"({model.throttle:g} s), staying {model.stay:g} s (WINDOW included) and viewing a page "
        f"with the tag every {model.page_every:g} s, {model.processes} web processes. Cost per "
        "call by Lua time, or by process CPU.",
        "",
        stats.table(
            [
                "snapshot reads per second",
                "1 Redis, by Lua µs",
                "1 Redis, by CPU",
                f"{MASTERS} masters, by Lua µs",
                f"{MASTERS} masters, by CPU",
            ],
            rows,
        ),
        "",
    ]

    rows = []
    total_visit = sum(v[0] for v in visit_m)
    total_cpu = sum(v[1] for v in visit_m)
    for index, label in enumerate(spread.labels):
        calls = stats.Spread.of(spread.visit_calls[index])
        rows.append(
            [
                label,
                f"{100 * calls.median:.0f} % ({100 * calls.low:.0f}–{100 * calls.high:.0f})",
                f"{100 * visit_m[index][0] / total_visit:.0f} %",
                f"{100 * visit_m[index][1] / total_cpu:.0f} %",
                both(spread.read[index], 0).show(us1),
                both(spread.read[index], 1).show(us1),
            ]
        )
    lines += [
        f"{MASTERS}-master Redis Cluster, SHARDS = {CLUSTER_SHARDS}: each master's share of the "
        "recorded visits (EVALSHA calls, their Lua µs, process CPU), and what one snapshot read "
        "costs it (every read asks every shard). Shares of work on 2 cores, not a speed-up.",
        "",
        stats.table(
            [
                "master",
                "visits' EVALSHAs",
                "visits' Lua µs",
                "visits' CPU",
                "Lua µs per read",
                "CPU µs per read",
            ],
            rows,
        ),
        "",
    ]
    busiest = max(v[0] for v in visit_m) / total_visit
    alone_1 = people_at_full_cpu(visit_1[0], read_1[0], model, "recording alone")
    alone_3 = cluster_people(
        [v[0] for v in visit_m], [r[0] for r in read_m], model, "recording alone"
    )
    lines.append(
        f"Recording alone, {MASTERS} masters ≈ {MASTERS} × one master when the shards spread "
        f"evenly: the busiest master takes {100 * busiest:.0f} % of the visits' Lua time "
        f"(even: {100 / MASTERS:.0f} %), so {people_label(alone_3)} against "
        f"{MASTERS} × {people_label(alone_1)} = {people_label(MASTERS * alone_1)}; a visit costs "
        f"{total_visit:.1f} µs of Lua in cluster mode against {visit_1[0]:.1f} on one Redis (with "
        "several shards a visit samples no counts, the cleanup command does; in cluster mode "
        "Redis checks the slot of every command a script runs). Reads do not spread: each master "
        f"pays for part of every read, {CLUSTER_SHARDS // MASTERS} shards' worth (each asked "
        f"for about twice its share of the {NAMES} names)."
    )
    shard_read = (
        sum(r[0] for r in read_m) / CLUSTER_SHARDS,
        sum(r[1] for r in read_m) / CLUSTER_SHARDS,
    )
    totals = (total_visit, total_cpu)
    lines.append(
        f"Path to {people_label(TARGET_PEOPLE)} people online at these per-call costs "
        f"({totals[0]:.1f} µs of Lua, {totals[1]:.1f} of CPU, per visit; {shard_read[0]:.1f} "
        f"and {shard_read[1]:.1f} per shard read), two shards per master; masters needed by Lua "
        "µs (by CPU): "
        + "; ".join(
            f"{scenario}: {masters_for(TARGET_PEOPLE, totals, shard_read, model, scenario)}"
            for scenario in SCENARIOS
        )
        + "."
    )
    return "\n".join(lines)


def progress(message: str) -> None:
    print(f"capacity: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__)
    parser.add_argument("--people", type=int, default=1_000_000, help="people online")
    parser.add_argument(
        "--page-every", type=float, default=30.0, help="seconds between page views of a person"
    )
    parser.add_argument("--processes", type=int, default=100, help="web processes of the site")
    parser.add_argument(
        "--stay",
        type=float,
        default=900.0,
        help="seconds a person stays online, WINDOW included (default: 5 min of visit + 10)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="repetitions of each phase")
    parser.add_argument("--visits", type=int, default=2000, help="recorded visits per phase")
    parser.add_argument("--reads", type=int, default=2000, help="snapshot reads per phase")
    options = parser.parse_args(argv)
    if options.people < 20 * NAMES * USER_EVERY:
        parser.error(f"--people must be at least {20 * NAMES * USER_EVERY}")

    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.site"
    os.environ.setdefault("WHOS_ONLINE_BENCH_VARIANT", "throttled")
    django.setup()
    from whos_online.defaults import DEFAULTS

    started = time.monotonic()
    load = os.getloadavg()[0]
    single, version = one_redis(options.people, options.visits, options.reads, options.repeats)
    spread = cluster(options.people, options.visits, options.reads, options.repeats)
    model = Model(
        throttle=DEFAULTS["THROTTLE"],
        page_every=options.page_every,
        processes=options.processes,
        max_age=DEFAULTS["SNAPSHOT_MAX_AGE"],
        stay=options.stay,
    )
    print(
        report(
            people=options.people,
            load=load,
            model=model,
            single=single,
            spread=spread,
            version=version,
            repeats=options.repeats,
            visits=options.visits,
            reads=options.reads,
        )
    )
    print(f"\nThe whole run took {time.monotonic() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
