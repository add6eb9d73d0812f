"""How long the cleanup takes, and how long it makes Redis stop answering anyone else.

A probe process (``bench.probe``) PINGs Redis every millisecond while one of these runs:

* nothing (the baseline of the probe's own noise);
* the naive prune, one ZREMRANGEBYSCORE per sorted set, for comparison;
* ``cleanup.prune_with``, what ``whos_online_cleanup`` runs, on 1 000 000 stale members (half users,
  half guests) with some people still online who must stay;
* ``counters.clean``, what the command runs next, on every counter (the online counts and page
  hits) at every default precision, each holding twice ``COUNTER_SAMPLES`` slices, so that the
  clean removes half of them.

Each is repeated, interleaved, on freshly filled data; the longest PING is compared with the
longest one the probe saw while Redis had nothing else to do, in the same repetition. A PING also
waits whenever the probe or Redis is not given a core, which on a shared 2-core machine happens
for milliseconds at a time; so the table also gives the longest command Redis itself executed
(its SLOWLOG, which times each command on the server), the stall that comes from the work alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Final

import redis
from django.test import override_settings

from bench import servers, sorted_sets, stats
from bench.report import Section, Target
from whos_online.backend.clients import admin_client
from whos_online.config import settings as conf
from whos_online.store import cleanup, counters, keys

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from redis.typing import EncodableT, FieldT

    from whos_online.config.settings import Config

STALE: Final = 1_000_000
ONLINE: Final = 1_000
REPEATS: Final = 5
COUNTERS: Final = ("online:users", "online:guests", "online:bots", "hits")
IDLE_SECONDS: Final = 1.0
STALL_LIMIT: Final = 0.010
#: Commands slower than this (µs) go to the SLOWLOG, which keeps this many of them.
SLOWLOG_THRESHOLD: Final = 100
SLOWLOG_LENGTH: Final = 100_000


@contextlib.contextmanager
def probing(port: int) -> Iterator[dict[str, float]]:
    """PING ``port`` every millisecond during the block; the dict then holds what was seen."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.probe", str(port)],
        cwd=servers.ROOT,
        env={**os.environ, "PYTHONPATH": str(servers.ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    found: dict[str, float] = {}
    try:
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("the PING probe did not start")
        time.sleep(0.05)
        yield found
        time.sleep(0.05)
    finally:
        process.stdin.close()
        line = process.stdout.readline()
        process.wait(timeout=30)
    found.update(json.loads(line))


def fill_stale(client: redis.Redis, config: Config, now: float) -> None:
    stale_at = now - config.window - 3600
    for kind, prefix in (("users", ""), ("guests", "guest")):
        sorted_sets.fill(
            client,
            keys.key(config, kind),
            ((f"{prefix}{n}", stale_at + n / 1000) for n in range(STALE // 2)),
        )
        client.zadd(keys.key(config, kind), {f"{prefix}online{n}": now for n in range(ONLINE)})


def fill_counters(client: redis.Redis, config: Config, now: float) -> None:
    """Every counter at every precision holding twice COUNTER_SAMPLES slices."""
    pipe = client.pipeline(transaction=False)
    for name in COUNTERS:
        for precision in config.counter_precisions:
            newest = counters.slice_start(now, precision)
            slices: dict[FieldT, EncodableT] = {
                newest - k * precision: k + 1 for k in range(2 * config.counter_samples)
            }
            member = counters.member(name, precision)
            pipe.hset(counters.counter_prefix(config) + member, mapping=slices)
            pipe.zadd(counters.known_key(config), {member: 0})
    pipe.execute()


def run() -> Section:
    seconds: dict[str, list[float]] = defaultdict(list)
    stalls: dict[str, list[float]] = defaultdict(list)
    longest: dict[str, list[float]] = defaultdict(list)
    notes = []
    with servers.redis_server() as server, override_settings(WHOS_ONLINE={"REDIS_URL": server.url}):
        config = conf.get_config()
        client = redis.Redis.from_url(server.url)
        slowlog_on(client)
        now = time.time()

        def naive() -> object:
            cutoff = f"({now - config.window}"
            return [
                client.zremrangebyscore(keys.key(config, k), "-inf", cutoff) for k in keys.KINDS
            ]

        operations: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
            "idle": (lambda: None, lambda: time.sleep(IDLE_SECONDS)),
            "naive": (lambda: fill_stale(client, config, now), naive),
            "prune": (
                lambda: fill_stale(client, config, now),
                lambda: cleanup.prune_with(admin_client(), config, now=now),
            ),
            "counters": (
                lambda: fill_counters(client, config, now),
                lambda: counters.clean(admin_client(), config, now=now),
            ),
        }
        admin_client().ping()
        for repeat in range(REPEATS):
            for name in stats.rotated(list(operations), repeat):
                prepare, operation = operations[name]
                client.flushall()
                prepare()
                client.slowlog_reset()
                with probing(server.port) as seen:
                    started = time.perf_counter()
                    result = operation()
                    seconds[name].append(time.perf_counter() - started)
                stalls[name].append(seen["max"])
                longest[name].append(longest_command(client))
                notes += _check(name, result, client, config)
    idle = stalls["idle"]
    labels = {
        "idle": "nothing (the probe's own noise: the baseline)",
        "naive": f"the naive prune: one ZREMRANGEBYSCORE per set, {stats.number(STALE)} stale",
        "prune": f"`prune_with` (the command's prune), {stats.number(STALE)} stale, "
        f"chunks of {cleanup.PRUNE_CHUNK_SIZE}",
        "counters": f"`counters.clean`, {len(COUNTERS)} counters × "
        f"{len(config.counter_precisions)} precisions × {2 * config.counter_samples} slices",
    }
    rows = [
        [
            labels[name],
            stats.Spread.of(seconds[name]).show(stats.ms) if name != "idle" else "—",
            stats.Spread.of(stalls[name]).show(stats.ms),
            stats.ratios(stalls[name], idle).show(stats.ratio),
            stats.Spread.of(longest[name]).show(stats.ms),
        ]
        for name in operations
    ]
    prune_stall = stats.Spread.of(stalls["prune"])
    prune_command = stats.Spread.of(longest["prune"])
    return Section(
        title="Cleanup",
        intro=(
            f"{REPEATS} repetitions, interleaved, each on freshly filled data; a separate "
            "process PINGs Redis every millisecond meanwhile. Median (min–max); the longest "
            "PING is compared with the longest one seen with Redis idle in the same repetition."
        ),
        tables=[
            stats.table(
                ["what runs", "total ms", "longest PING ms", "× idle", "longest command ms"],
                rows,
            ),
        ],
        notes=sorted(set(notes)),
        targets=[
            # Judged on the median repetition: a single one can catch the machine descheduling
            # Redis or the probe for longer, which the idle rows and Redis's own longest
            # command tell apart from the prune.
            Target(
                f"pruning {stats.number(STALE)} stale members: no PING stall above 10 ms",
                f"longest PING {prune_stall.show(stats.ms)} ms (Redis's longest command "
                f"{prune_command.show(stats.ms)} ms)",
                prune_stall.median <= STALL_LIMIT,
            )
        ],
    )


def slowlog_on(client: redis.Redis) -> None:
    """Have Redis log every command slower than ``SLOWLOG_THRESHOLD``, from an empty log."""
    client.config_set("slowlog-log-slower-than", SLOWLOG_THRESHOLD)
    client.config_set("slowlog-max-len", SLOWLOG_LENGTH)
    client.slowlog_reset()


def longest_command(client: redis.Redis) -> float:
    """Seconds the slowest command since the SLOWLOG was reset took (0 if none was logged)."""
    entries = client.slowlog_get(SLOWLOG_LENGTH)
    # The benchmark's own commands (SLOWLOG RESET, which frees the previous run's entries,
    # CONFIG, INFO) are not the work's.
    durations = (
        int(entry["duration"])
        for entry in entries
        if not bytes(entry["command"]).upper().startswith((b"SLOWLOG", b"CONFIG", b"INFO"))
    )
    return max(durations, default=0) / 1e6


def _check(name: str, result: object, client: redis.Redis, config: Config) -> list[str]:
    """Confirms each operation did its whole job, so that a fast time is not a partial one."""
    if name in {"naive", "prune"}:
        left = sum(int(client.zcard(keys.key(config, kind))) for kind in keys.KINDS)
        if left != 2 * ONLINE:
            return [f"{name}: {left} members left, expected the {2 * ONLINE} online ones."]
    if name == "counters":
        assert isinstance(result, counters.Cleaned)
        expected = len(COUNTERS) * len(config.counter_precisions) * config.counter_samples
        if result.samples != expected:
            return [f"counters: {result.samples} samples removed, expected {expected}."]
    return []
