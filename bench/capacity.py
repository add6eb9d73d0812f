"""How many people online one Redis process serves, and what three cluster masters add.

Run from the repository root: ``python3 scripts/dev.py bench capacity`` (``--help`` for the
options).

Capacity is a matter of Redis CPU, so it is measured on the server, not at the client: a fresh
redis-server holds ``--people`` members online (a fifth of them users), then records visits of
people already online (the common case: each is recorded again every ``THROTTLE``) and reads
snapshots of 50 names, as the template tag does. Visits go as a process's flush sends them,
``--batch`` per script call (20 by default: what each of 100 processes sends a shard at 10
million people online on 4 shards; see ``bench.batching`` for other sizes). Users come with
their display data; of every four people, two are in no room, one stays in their room (of
1 000) and one moves to another room on each visit. Each was recorded once before, so that they
are in their room and have their display HASH. Per visit, and per read, it takes

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

The cluster part starts three masters (tests/support/topologies.py) with ``SHARDS = 6``, records
visits of people spread over the shards, ``--batch`` × 6 at once (so that each shard's call carries
about ``--batch``), and reads each master's ``INFO commandstats``: the share of the work each master
takes shows whether the shards spread it evenly. On a machine with two cores the three masters
compete for the CPU, so the cluster's speed is not measured; its capacity follows from each master's
share of the costs. They take turns with the client on the cores, so that each master idles between
its calls, and finds its caches cold: the first master is also given visits of its own two shards
only, back to back, as a busy master takes them, which the path to 10 million people online is
worked out with too. Every snapshot read asks every shard, so each master pays for every read
whatever the number of masters.

Each phase is repeated (``--repeats``), in turns; tables give the median and the range.
"""

from __future__ import annotations

import argparse
import ipaddress
import itertools
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
from bench.report import Target, targets_table

# whos_online is imported inside the functions: its modules read Django's settings, which are
# set up in main(), as ``python -m bench`` does.
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config
    from whos_online.store.items import Visit

#: Every this many people online is a user; the others are guests.
USER_EVERY: Final = 5
#: Rooms the visits' people are in (see ``people_of``).
ROOMS: Final = 1000
#: Names a snapshot read asks for: the template tag's default ``DISPLAY_LIMIT``.
NAMES: Final = 50
#: Shards on the cluster: two per master.
CLUSTER_SHARDS: Final = 6
MASTERS: Final = 3
#: The goal of the last line, and the masters it should take at most; people online one Redis
#: process should hold.
TARGET_PEOPLE: Final = 10_000_000
TARGET_MASTERS: Final = 2
TARGET_PER_REDIS: Final = 6_000_000
#: µs of CPU one Redis process has in a second.
BUDGET_US: Final = 1e6
FIRST_ADDRESS: Final = int(ipaddress.IPv4Address("10.0.0.0"))

#: µs per visit or read: (Lua time from INFO commandstats, CPU of the redis-server process).
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
    from whos_online.recording import guests as identity
    from whos_online.store import keys

    sets: defaultdict[str, dict[str, float]] = defaultdict(dict)
    for n in range(people):
        kind, member = (
            ("users", str(n))
            if is_user(n)
            else ("guests", identity.guest_id(address(n), config, now))
        )
        sets[keys.member_shard(config, kind, member).key(kind)][member] = now - 300 * n / people
    for key, members in sets.items():
        sorted_sets.fill(client_of(key), key, members.items())


@dataclass(frozen=True)
class Person:
    """One person online whose visits a benchmark records."""

    number: int
    user: bool
    #: The member of their set: a user's pk, a guest's pseudonym of the day.
    member: str
    #: In a room: 'stay' (the same topic each time), 'move' (another each time), or "" (none).
    rooms: str


def people_of(config: Config, numbers: Sequence[int]) -> list[Person]:
    """The people online ``numbers``; of every four, two are in no room, one stays in a room
    and one moves to another room on each visit."""
    from whos_online.recording import guests as identity

    now = time.time()
    found = []
    for index, number in enumerate(numbers):
        user = is_user(number)
        member = str(number) if user else identity.guest_id(address(number), config, now)
        found.append(Person(number, user, member, ("", "stay", "", "move")[index % 4]))
    return found


def visit_of(person: Person, now: float, turn: int) -> Visit:
    """``person``'s visit at ``now``, as the request path makes it (a user with their display
    data); ``turn`` counts their visits, so that a mover changes room on each."""
    from whos_online.recording import visits as recording
    from whos_online.store import users

    room = ""
    if person.rooms:
        topic = person.number + (turn if person.rooms == "move" else 0)
        room = f"topic:{topic % ROOMS}"
    if person.user:
        details = users.UserDetails(
            pk=person.member,
            hidden=False,
            name=f"Member {person.number}",
            url=f"/members/{person.number}/",
        )
        return recording.user_visit(details, now, room=room)
    return recording.member_visit("guests", person.member, now, room=room)


def in_calls(
    client: Client, config: Config, who: Sequence[Person], size: int, turn: int
) -> Callable[[int], int]:
    """An action for ``measure``: its ``index``-th call records the ``index``-th ``size``
    people of ``who`` at once, as a flush does (a call per shard, in one round trip where the
    client allows), and returns the calls it made."""
    from whos_online.config.settings import DEFAULTS
    from whos_online.store.record import record

    interval = DEFAULTS["FLUSH_INTERVAL"]

    def write(index: int) -> int:
        now = time.time()
        batch = who[index * size : (index + 1) * size]
        # Made over the last FLUSH_INTERVAL, as a flush's visits are: to the millisecond, as
        # Redis keeps them, the newest names are not all a tie (which a read would ask again).
        visits = [
            visit_of(person, now - interval * (len(batch) - 1 - number) / len(batch), turn)
            for number, person in enumerate(batch)
        ]
        return len(record(client, config, visits))

    return write


def read(client: Client, config: Config) -> None:
    from whos_online.store import snapshot

    found = snapshot.snapshot(client, config, limit=NAMES, now=time.time())
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
    """µs per visit (users, guests) and per read, by repetition."""

    user: list[Pair]
    guest: list[Pair]
    read: list[Pair]

    def visit(self) -> list[Pair]:
        """A recorded visit of the model: half users, half guests."""
        return [
            ((u[0] + g[0]) / 2, (u[1] + g[1]) / 2)
            for u, g in zip(self.user, self.guest, strict=True)
        ]


def shard_key(config: Config, person: Person) -> str:
    """The key of the set ``person`` is in, in their shard."""
    from whos_online.store import keys

    kind = "users" if person.user else "guests"
    return keys.member_shard(config, kind, person.member).key(kind)


def warm_up(client: Client, config: Config, who: Sequence[Person]) -> None:
    """Record each of ``who`` once, 100 per call: into their rooms, and users with their display
    HASH, as people online already are (and the scripts loaded)."""
    record = in_calls(client, config, who, 100, 0)
    for index in range(math.ceil(len(who) / 100)):
        record(index)


def in_batches(
    nodes: Sequence[Watched],
    client: Client,
    config: Config,
    who: Sequence[Person],
    *,
    size: int,
    turn: int,
) -> tuple[list[Usage], int]:
    """Record the first multiple of ``size`` of ``who``, ``size`` at once, and return what each
    node did and how many visits that was; fails unless Redis counted the calls made."""
    record = in_calls(client, config, who, size, turn)
    calls = 0

    def action(index: int) -> None:
        nonlocal calls
        calls += record(index)

    batches = len(who) // size
    usages = measure(nodes, action, batches)
    per_call(usages, 1, calls)
    return usages, batches * size


def per_visit(usages: Sequence[Usage], visits: int) -> Pair:
    return (
        sum(usage.script_us for usage in usages) / visits,
        sum(usage.cpu_us for usage in usages) / visits,
    )


def one_redis(people: int, visits: int, reads: int, repeats: int, batch: int) -> tuple[Costs, str]:
    """Costs per visit, recorded ``batch`` per call, and per read on one redis-server holding
    ``people`` online; and its version."""
    from django.test import override_settings

    from whos_online.backend import clients
    from whos_online.config import settings as conf

    rng = random.Random(1)  # noqa: S311 (picks visitors, not secrets)
    with (
        servers.redis_server() as server,
        override_settings(WHOS_ONLINE={"REDIS_URL": server.url}),
    ):
        assert server.process is not None
        admin = redis.Redis.from_url(server.url)
        node = Watched(admin, server.process.pid, "one Redis")
        config = conf.get_config()
        client = clients.request_client()
        progress(f"filling one Redis with {stats.number(people)} people online…")
        fill(lambda _: admin, config, people, time.time())
        users = people_of(config, chosen(rng, people, visits, users=True))
        guests = people_of(config, chosen(rng, people, visits, users=False))
        warm_up(client, config, users + guests)
        read(client, config)
        costs = Costs([], [], [])
        turns = itertools.count(1)
        for repeat in range(repeats):
            progress(f"one Redis, repetition {repeat + 1} of {repeats}…")
            phases: list[tuple[list[Pair], list[Person]]] = [
                (costs.user, users),
                (costs.guest, guests),
                (costs.read, []),
            ]
            for results, who in stats.rotated(phases, repeat):
                if who:
                    usages, count = in_batches(
                        [node], client, config, who, size=batch, turn=next(turns)
                    )
                    results.append(per_visit(usages, count))
                else:
                    usages = measure([node], lambda _: read(client, config), reads)
                    results.append(per_call(usages, reads, 1))
        version = str(admin.info("server")["redis_version"])
    return costs, version


@dataclass
class ClusterCosts:
    """Per master, by repetition: µs per site visit and per site read, (script, process CPU);
    and each master's share of the visits' EVALSHA calls. Then, by repetition, µs per visit of
    the first master when it takes visits of its own shards only, back to back."""

    labels: list[str]
    visit: list[list[Pair]]
    read: list[list[Pair]]
    visit_calls: list[list[float]]
    busy: list[Pair]


def cluster(people: int, visits: int, reads: int, repeats: int, batch: int) -> ClusterCosts:
    """Per-master costs of visits and reads on a 3-master cluster with ``CLUSTER_SHARDS``. The
    visits go ``batch`` × ``CLUSTER_SHARDS`` at once, as a flush sends them: a call per shard
    with about ``batch`` visits each."""
    from django.test import override_settings

    from tests.support.topologies import ClusterServers
    from whos_online.backend import clients, keyspace
    from whos_online.config import settings as conf

    rng = random.Random(2)  # noqa: S311 (picks visitors, not secrets)
    nodes = ClusterServers(MASTERS)
    nodes.start()
    try:
        settings = {"REDIS_URL": nodes.url, "REDIS_CLUSTER": True, "SHARDS": CLUSTER_SHARDS}
        with override_settings(WHOS_ONLINE=settings):
            config = conf.get_config()
            client = clients.request_client()
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
            numbers = chosen(rng, people, visits // 2, users=True)
            numbers += chosen(rng, people, visits - len(numbers), users=False)
            rng.shuffle(numbers)
            who = people_of(config, numbers)
            warm_up(client, config, who)
            read(client, config)
            first = nodes.nodes[0].port
            own = [
                person
                for person in who
                if nodes.node_of_key(shard_key(config, person)).port == first
            ]
            result = ClusterCosts(
                [node.label for node in watched],
                [[] for _ in watched],
                [[] for _ in watched],
                [[] for _ in watched],
                [],
            )
            turns = itertools.count(1)
            for repeat in range(repeats):
                progress(f"cluster, repetition {repeat + 1} of {repeats}…")
                # Its two shards' calls, about ``batch`` visits each, one after the other.
                alone, alone_count = in_batches(
                    watched[:1], client, config, own, size=2 * batch, turn=next(turns)
                )
                result.busy.append(per_visit(alone, alone_count))
                visited, count = in_batches(
                    watched, client, config, who, size=batch * CLUSTER_SHARDS, turn=next(turns)
                )
                calls = sum(usage.calls for usage in visited)
                was_read = measure(watched, lambda _: read(client, config), reads)
                per_call(was_read, reads, CLUSTER_SHARDS)
                for index, (v, r) in enumerate(zip(visited, was_read, strict=True)):
                    result.visit[index].append((v.script_us / count, v.cpu_us / count))
                    result.read[index].append((r.script_us / reads, r.cpu_us / reads))
                    result.visit_calls[index].append(v.calls / calls)
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


def site_model(page_every: float = 30.0, processes: int = 100, stay: float = 900.0) -> Model:
    """The site of the capacity table, at whos_online's default ``THROTTLE`` and
    ``SNAPSHOT_MAX_AGE``."""
    from whos_online.config.settings import DEFAULTS

    return Model(
        throttle=DEFAULTS["THROTTLE"],
        page_every=page_every,
        processes=processes,
        max_age=DEFAULTS["SNAPSHOT_MAX_AGE"],
        stay=stay,
    )


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


def masters_needed(
    target: float, visit_us: float, shard_read_us: float, model: Model, scenario: str
) -> int | None:
    """Masters needed for ``target`` people online with two shards per master, spread evenly:
    each master takes 1/M of the visits but reads its two shards on every read, so reads set a
    ceiling that no number of masters lifts (None: beyond it)."""
    for masters in range(1, 1001):
        per_master = people_at_full_cpu(visit_us / masters, 2 * shard_read_us, model, scenario)
        if per_master >= target:
            return masters
    return None


def masters_for(
    target: float, visit_us: Pair, shard_read_us: Pair, model: Model, scenario: str
) -> str:
    """``masters_needed`` by Lua µs (by process CPU)."""
    found = []
    for k in (0, 1):
        masters = masters_needed(target, visit_us[k], shard_read_us[k], model, scenario)
        if masters is None:
            ceiling = people_at_full_cpu(0.0, 2 * shard_read_us[k], model, scenario)
            found.append(f"none, reads cap it at {people_label(ceiling)}")
        else:
            found.append(str(masters))
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
    batch: int,
) -> str:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores (load average "
        f"{load:.1f} at the start: other work on the machine widens the ranges), "
        f"{platform.system()} {platform.release()}; Python {platform.python_version()}, "
        f"redis-py {metadata.version('redis')}, redis-server {version}. "
        f"{stats.number(people)} people online (1 in {USER_EVERY} a user), {repeats} repetitions "
        f"of {stats.number(visits)} visits of users, as many of guests ({batch} per script "
        f"call; half of the people in rooms), and {stats.number(reads)} reads of {NAMES} names; "
        "median (min–max).",
        "",
        "Redis CPU per recorded visit and per read, one Redis process:",
        "",
    ]
    rows = []
    for label, pairs in (
        (f"recorded visit, user (name and profile URL), {batch} per call", single.user),
        (f"recorded visit, guest, {batch} per call", single.guest),
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
        "visit or read",
        "Lua µs (commandstats)",
        "process CPU µs",
        "per second per Redis process (by Lua µs – by CPU)",
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
    busy = medians(spread.busy)
    lines.append(
        f"Recording alone, {MASTERS} masters ≈ {MASTERS} × one master when the shards spread "
        f"evenly: the busiest master takes {100 * busiest:.0f} % of the visits' Lua time "
        f"(even: {100 / MASTERS:.0f} %), so {people_label(alone_3)} against "
        f"{MASTERS} × {people_label(alone_1)} = {people_label(MASTERS * alone_1)}. A visit costs "
        f"{total_visit:.1f} µs of Lua ({total_cpu:.1f} of CPU) in cluster mode with its flush's "
        f"calls going round the masters, against {visit_1[0]:.1f} ({visit_1[1]:.1f}) on one "
        f"Redis; the first master, taking visits of its own shards back to back, spends "
        f"{busy[0]:.1f} ({busy[1]:.1f}). Here the {MASTERS} masters and the client take turns on "
        f"{os.cpu_count()} cores, so that a master that idles between its calls finds its caches "
        "cold, which a busy master does not. (With several shards a visit samples no counts, "
        "the cleanup command does; in cluster mode Redis checks the slot of every command a "
        "script runs.) Reads do not spread: each master pays for part of every read, "
        f"{CLUSTER_SHARDS // MASTERS} shards' worth (each asked for about twice its share of "
        f"the {NAMES} names)."
    )
    shard_read = (
        sum(r[0] for r in read_m) / CLUSTER_SHARDS,
        sum(r[1] for r in read_m) / CLUSTER_SHARDS,
    )
    totals = (total_visit, total_cpu)
    for label, costs in (("going round the masters", totals), ("of the busy master", busy)):
        lines.append(
            f"Path to {people_label(TARGET_PEOPLE)} people online at the visits' costs {label} "
            f"({costs[0]:.1f} µs of Lua, {costs[1]:.1f} of CPU, per visit; {shard_read[0]:.1f} "
            f"and {shard_read[1]:.1f} per shard read), two shards per master; masters needed "
            "by Lua µs (by CPU): "
            + "; ".join(
                f"{scenario}: {masters_for(TARGET_PEOPLE, costs, shard_read, model, scenario)}"
                for scenario in SCENARIOS
            )
            + "."
        )
    per_redis = people_at_full_cpu(visit_1[1], read_1[1], model, "cache")
    masters = masters_needed(TARGET_PEOPLE, busy[1], shard_read[1], model, "cache")
    going_round = masters_needed(TARGET_PEOPLE, totals[1], shard_read[1], model, "cache")
    lines += [
        "",
        targets_table(
            [
                Target(
                    f"people online per Redis process, by process CPU, the tag on every page "
                    f"(SNAPSHOT_MAX_AGE {model.max_age:g}), {batch} visits per call: "
                    f"≥ {people_label(TARGET_PER_REDIS)}",
                    people_label(per_redis),
                    per_redis >= TARGET_PER_REDIS,
                ),
                Target(
                    f"masters for {people_label(TARGET_PEOPLE)} people online, by process CPU at "
                    "the busy master's cost per visit, "
                    f"the tag on every page, about {batch} visits per shard's call: "
                    f"≤ {TARGET_MASTERS}",
                    f"{'none' if masters is None else masters} (with the visits' calls going "
                    f"round the masters: {'none' if going_round is None else going_round})",
                    masters is not None and masters <= TARGET_MASTERS,
                ),
            ]
        ),
    ]
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
    parser.add_argument(
        "--visits", type=int, default=4000, help="recorded visits per phase (users, guests)"
    )
    parser.add_argument("--batch", type=int, default=20, help="visits per script call")
    parser.add_argument("--reads", type=int, default=2000, help="snapshot reads per phase")
    options = parser.parse_args(argv)
    if options.people < 20 * NAMES * USER_EVERY:
        parser.error(f"--people must be at least {20 * NAMES * USER_EVERY}")

    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.site"
    os.environ.setdefault("WHOS_ONLINE_BENCH_VARIANT", "throttled")
    django.setup()
    started = time.monotonic()
    load = os.getloadavg()[0]
    sizes = (options.people, options.visits, options.reads, options.repeats, options.batch)
    single, version = one_redis(*sizes)
    spread = cluster(*sizes)
    model = site_model(options.page_every, options.processes, options.stay)
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
            batch=options.batch,
        )
    )
    print(f"\nThe whole run took {time.monotonic() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
