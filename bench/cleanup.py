"""How long the cleanup takes, and how long it makes Redis stop answering anyone else.

A probe PINGs Redis every millisecond from a process of its own while one of these runs, on
freshly filled data, interleaved: nothing (the probe's own noise: the baseline), the naive prune
(one ZREMRANGEBYSCORE per set), ``cleanup.prune_with`` (the cleanup command's) on 1 000 000 stale
members with people online who must stay, and ``counters.clean`` on every counter at every
precision holding twice ``COUNTER_SAMPLES`` slices. A PING also waits whenever the probe or Redis
is not given a core, so Redis's own longest command (its SLOWLOG) is given too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from django.test import override_settings

from bench import internals as whos
from bench.harness import servers
from bench.harness.report import Section, Target, ms, number, ratio, table
from bench.harness.rounds import Spread, interleaved, ratios, spread

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis

ONLINE: Final = 1_000
COUNTERS: Final = ("online:users", "online:guests", "online:bots", "hits")


@dataclass(frozen=True)
class Options:
    stale: int = 1_000_000
    repeats: int = 5


QUICK = Options(stale=20_000, repeats=1)


def fill_stale(client: redis.Redis, config: whos.Config, stale: int, now: float) -> None:
    """``stale`` members gone an hour past the window, half users and half guests, and
    ``ONLINE`` of each online."""
    gone = now - config.window - 3600
    for kind, prefix in (("users", ""), ("guests", "guest")):
        key = whos.keyspace.key(config, kind)
        servers.fill(client, key, ((f"{prefix}{n}", gone + n / 1000) for n in range(stale // 2)))
        client.zadd(key, {f"{prefix}online{n}": now for n in range(ONLINE)})


def fill_counters(client: redis.Redis, config: whos.Config, now: float) -> None:
    """Every counter at every precision holding twice ``COUNTER_SAMPLES`` slices."""
    pipe = client.pipeline(transaction=False)
    for name in COUNTERS:
        for precision in config.counter_precisions:
            newest = whos.counters.slice_start(now, precision)
            slices = {newest - k * precision: k + 1 for k in range(2 * config.counter_samples)}
            member = whos.counters.member(name, precision)
            pipe.hset(whos.counters.counter_prefix(config) + member, mapping=slices)  # type: ignore [arg-type]
            pipe.zadd(whos.counters.known_key(config), {member: 0})
    pipe.execute()


def check(name: str, result: object, client: redis.Redis, config: whos.Config) -> None:
    """Each operation did its whole job: a fast time is not a partial one."""
    if name in {"naive", "prune"}:
        left = sum(
            int(client.zcard(whos.keyspace.key(config, kind))) for kind in whos.keyspace.KINDS
        )
        if left != 2 * ONLINE:
            raise RuntimeError(f"{name}: {left} members left, not the {2 * ONLINE} online")
    expected = len(COUNTERS) * len(config.counter_precisions) * config.counter_samples
    if name == "counters" and getattr(result, "samples", None) != expected:
        raise RuntimeError(f"counters: {result} removed, not {expected} samples")


def operations(
    client: redis.Redis, config: whos.Config, stale: int, now: float
) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """What fills Redis, and what then runs, by name."""
    admin, cutoff = whos.clients.admin_client(), f"({now - config.window}"
    admin.ping()
    keys = [whos.keyspace.key(config, kind) for kind in whos.keyspace.KINDS]
    fill = lambda: fill_stale(client, config, stale, now)  # noqa: E731
    return {
        "idle": (lambda: None, lambda: time.sleep(1.0)),
        "naive": (fill, lambda: [client.zremrangebyscore(key, "-inf", cutoff) for key in keys]),
        "prune": (fill, lambda: whos.cleanup.prune_with(admin, config, now=now)),
        "counters": (
            lambda: fill_counters(client, config, now),
            lambda: whos.counters.clean(admin, config, now=now),
        ),
    }


def run(options: Options) -> Section:
    with servers.redis_server() as server, override_settings(WHOS_ONLINE={"REDIS_URL": server.url}):
        config, node = whos.get_config(), servers.Node.of(server)
        runs = operations(node.client, config, options.stale, time.time())

        def measure(name: str) -> tuple[float, float, float]:
            prepare, operation = runs[name]
            node.client.flushall()
            prepare()
            node.slowlog_on()
            with servers.stall_probe(server.port) as seen:
                started = time.perf_counter()
                result = operation()
                took = time.perf_counter() - started
            check(name, result, node.client, config)
            return took, seen["max"], node.longest_command()

        found = interleaved(list(runs), options.repeats, measure, label="cleanup")
    took, stalls, longest = (
        {name: [run[k] for run in found[name]] for name in runs} for k in range(3)
    )
    stale, chunk = number(options.stale), whos.cleanup.PRUNE_CHUNK_SIZE
    sizes = f"{len(config.counter_precisions)} precisions × {2 * config.counter_samples} slices"
    labels = {
        "idle": "nothing (the probe's own noise: the baseline)",
        "naive": f"the naive prune: one ZREMRANGEBYSCORE per set, {stale} stale",
        "prune": f"`prune_with` (the command's prune), {stale} stale, chunks of {chunk}",
        "counters": f"`counters.clean`, {len(COUNTERS)} counters × {sizes}",
    }
    rows = [
        [
            labels[name],
            "—" if name == "idle" else spread(took[name], ms),
            spread(stalls[name], ms),
            ratios(stalls[name], stalls["idle"]).show(ratio),
            spread(longest[name], ms),
        ]
        for name in runs
    ]
    prune, command = Spread.of(stalls["prune"]), Spread.of(longest["prune"])
    return Section(
        "Cleanup",
        f"{options.repeats} repetitions, interleaved, each on freshly filled data; a separate "
        "process PINGs Redis every millisecond meanwhile. Median (min–max); the longest PING is "
        "compared with the longest one seen with Redis idle in the same repetition.",
        [table("what runs | total ms | longest PING ms | × idle | longest command ms", rows)],
        # Judged on the median repetition: one can catch the machine descheduling Redis or the
        # probe for longer, which the idle rows and Redis's own longest command tell apart.
        targets=[
            Target(
                f"pruning {stale} stale members: no PING stall above 10 ms",
                f"longest PING {prune.show(ms)} ms (Redis's longest command {command.show(ms)} ms)",
                prune.median <= 0.010,
            )
        ],
    )
