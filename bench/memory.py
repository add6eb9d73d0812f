"""Redis memory per person online, per user's display data, and for a week of counters.

The sorted set of people online as whos_online writes it (users by primary key, guests by the
day's pseudonym) against what a naive middleware stores for a guest, the raw IPv4 address; the
display HASH the record script writes per user; the counters after a week of visits replayed
and cleaned as the cleanup command does. Each measured once: memory is not noisy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import redis
from django.test import override_settings

from bench import internals as whos
from bench.harness import servers
from bench.harness.clients import address
from bench.harness.report import Section, Target, number, ratio, table

if TYPE_CHECKING:
    from collections.abc import Callable

WEEK: Final = 7 * 86400
#: Distinct guests cycling through the simulated week; about this many are online at a time.
WEEK_GUESTS: Final = 40
LIMIT: Final = 100


@dataclass(frozen=True)
class Options:
    members: int = 1_000_000
    users: int = 5_000


QUICK = Options(members=20_000, users=500)


def set_bytes(
    client: redis.Redis, key: str, member: Callable[[int], str], count: int
) -> list[float]:
    """Per member of ``count``: the growth of ``used_memory``, and ``MEMORY USAGE`` of the key."""
    client.flushall()
    before = int(client.info("memory")["used_memory"])
    servers.fill(client, key, ((member(n), 1e9 + n / 1000) for n in range(count)))
    grown = int(client.info("memory")["used_memory"]) - before
    return [grown / count, int(client.memory_usage(key, samples=0) or 0) / count]


def details_bytes(client: redis.Redis, config: whos.Config, count: int) -> float:
    """``used_memory`` per user recorded with their display data, less their online set's."""
    client.flushall()
    online = whos.keyspace.key(config, "users")

    def record(pk: int) -> None:
        details = whos.users.UserDetails(pk=str(pk), hidden=False, name=f"Member {pk}", url="")
        visit = whos.Visit(
            unhidden_kind="users", member=details.pk, seen_at=time.time(), user=details
        )
        whos.record.record(client, config, [visit])

    record(0)  # the keys every visit shares: the peak, the counters
    before, online_before = (
        int(client.info("memory")["used_memory"]),
        client.memory_usage(online, samples=0),
    )
    for pk in range(1, count + 1):
        record(pk)
    online_grown = int(client.memory_usage(online, samples=0) or 0) - int(online_before or 0)
    return (int(client.info("memory")["used_memory"]) - before - online_grown) / count


def week_of_counters(client: redis.Redis, config: whos.Config) -> tuple[int, int]:
    """Bytes of the counters after a week of a visit a minute (and a second for the last three
    minutes, so that every precision is as full as it gets), and the samples they keep."""
    client.flushall()
    end = 1_800_000_000.0
    times = [end - WEEK + minute * 60 for minute in range(WEEK // 60 - 3)]
    times += [end - 180 + second for second in range(181)]
    for index, now in enumerate(times):
        member, daily = f"g{index % WEEK_GUESTS}", f"v{index % 5000}"
        visit = whos.Visit(unhidden_kind="guests", member=member, seen_at=now, daily_id=daily)
        whos.record.record(client, config, [visit])
        if index % 60 == 0:  # the cleanup command, hourly in simulated time
            whos.counters.clean(client, config, now=now)
    whos.counters.clean(client, config, now=end)
    keys = [*client.scan_iter(match=whos.counters.counter_prefix(config) + "*", count=1000)]
    size = sum(int(client.memory_usage(key, samples=0) or 0) for key in keys)
    size += int(client.memory_usage(whos.counters.known_key(config), samples=0) or 0)
    return size, sum(int(client.hlen(key)) for key in keys)


def run(options: Options) -> Section:
    with servers.redis_server() as server, override_settings(WHOS_ONLINE={"REDIS_URL": server.url}):
        config = whos.get_config()
        client = redis.Redis.from_url(server.url)
        now, key = time.time(), whos.keyspace.key(config, "guests")
        sets: list[tuple[str, Callable[[int], str]]] = [
            ("guests as raw IPv4 addresses (the naive way; baseline)", address),
            ("users, by primary key", str),
            (
                "guests, by the day's pseudonym (`GUEST_IDENTITY='hashed-ip'`)",
                lambda n: whos.guest_id(address(n), config, now),
            ),
        ]
        measured = [
            (label, set_bytes(client, key, member, options.members)) for label, member in sets
        ]
        details = details_bytes(client, config, options.users)
        week, samples = week_of_counters(client, config)
        version = client.info("server")["redis_version"]
    baseline = measured[0][1][0]
    rows = [
        [f"sorted set: {label}", f"{grown:.1f}", f"{usage:.1f}", ratio(grown / baseline)]
        for label, (grown, usage) in measured
    ]
    rows.append(
        [
            f"display HASH per user (kept {config.last_seen_days} days after the last visit)",
            f"{details:.0f}",
            "—",
            "—",
        ]
    )
    counters = f"{samples} samples, 3 counters × {len(config.counter_precisions)} precisions"
    rows.append(
        [
            f"a week of counters at the defaults ({counters}), in all",
            f"{week} ({week / 1024:.1f} KiB)",
            "—",
            "—",
        ]
    )
    return Section(
        "Memory",
        f"redis-server {version}; {number(options.members)} members per sorted set. Bytes per "
        "member: growth of `used_memory`, and `MEMORY USAGE` of the key, divided by the members; "
        "ratio to the raw-IPv4 baseline.",
        [table("what | bytes | MEMORY USAGE | × baseline", rows)],
        targets=[
            Target(
                f"{label.split(' (')[0]}: ≤ {LIMIT} bytes per online member",
                f"{grown:.1f} B ({grown / baseline:.2f} × raw IPv4)",
                grown <= LIMIT,
            )
            for label, (grown, _) in measured[1:]
        ],
    )
