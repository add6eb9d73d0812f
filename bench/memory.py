"""How much Redis memory whos_online takes: per online member, per user, and for its counters.

Each figure is measured on an empty throw-away redis-server:

* the sorted sets of people online, 1 000 000 members each, as the app writes them: users by
  primary key, guests by the day's pseudonym of their address. The baseline is what a naive
  middleware stores for a guest, the raw IPv4 address. Bytes per member are the growth of
  ``used_memory`` divided by the members; ``MEMORY USAGE`` of the key agrees within a few bytes.
* the display HASH of a user (name, profile URL, last seen), written by the real record script.
  It is kept ``LAST_SEEN_DAYS`` after the user's last visit, so it counts per user who visited in
  that time, not per member online.
* a week of counters at the default settings: the record script replayed over a week (one visit
  a minute, then one a second for the last three minutes, so that every precision is as full as
  it gets), cleaned as the cleanup command would, then ``MEMORY USAGE`` of the counter keys.
"""

from __future__ import annotations

import ipaddress
import time
from typing import TYPE_CHECKING, Final

import redis
from django.test import override_settings

from bench import servers, sorted_sets, stats
from bench.report import Section, Target
from whos_online.config import settings as conf
from whos_online.recording import guests as identity
from whos_online.store import counters, items, users
from whos_online.store.keys import key
from whos_online.store.record import record

if TYPE_CHECKING:
    from collections.abc import Callable

    from whos_online.config.settings import Config

MEMBERS: Final = 1_000_000
USERS_WITH_DETAILS: Final = 5_000
MEMBER_LIMIT: Final = 100
WEEK: Final = 7 * 86400
#: Distinct guests cycling through the simulated week; about this many are online at a time.
WEEK_GUESTS: Final = 40


def _used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def _sorted_set_bytes(
    client: redis.Redis, key: str, member: Callable[[int], str], now: float
) -> tuple[float, float]:
    """(growth of used_memory, MEMORY USAGE of the key), per member, for MEMBERS members."""
    client.flushall()
    before = _used(client)
    sorted_sets.fill(client, key, ((member(n), now + n / 1000) for n in range(MEMBERS)))
    grown = _used(client) - before
    usage = int(client.memory_usage(key, samples=0) or 0)
    return grown / MEMBERS, usage / MEMBERS


def _user_details_bytes(client: redis.Redis, config: Config, now: float) -> float:
    client.flushall()
    online = key(config, "users")

    def record_user(pk: int) -> None:
        details = users.UserDetails(pk=str(pk), hidden=False, name=f"Member {pk}", url="")
        visit = items.Visit(kind="users", member=details.pk, now=now, user=details)
        record(client, config, [visit])

    record_user(0)  # creates the keys every visit shares: the peak, the counters
    before, online_before = _used(client), int(client.memory_usage(online, samples=0) or 0)
    for pk in range(1, USERS_WITH_DETAILS + 1):
        record_user(pk)
    online_grown = int(client.memory_usage(online, samples=0) or 0) - online_before
    return (_used(client) - before - online_grown) / USERS_WITH_DETAILS


def replay_a_week(client: redis.Redis, config: Config) -> tuple[int, int]:
    """Bytes of the counter keys after a week of visits, and how many samples they keep."""
    client.flushall()
    end = 1_800_000_000.0
    start = end - WEEK
    times = [start + minute * 60 for minute in range(WEEK // 60 - 3)]
    times += [end - 180 + second for second in range(181)]
    for index, now in enumerate(times):
        visit = items.Visit(
            kind="guests", member=f"g{index % WEEK_GUESTS}", now=now, visitor=f"v{index % 5000}"
        )
        record(client, config, [visit])
        if index % 60 == 0:  # the cleanup command, hourly in simulated time
            counters.clean(client, config, now=now)
    counters.clean(client, config, now=end)
    keys = [*client.scan_iter(match=counters.counter_prefix(config) + "*", count=1000)]
    keys.append(counters.known_key(config))
    size = sum(int(client.memory_usage(key, samples=0) or 0) for key in keys)
    samples = sum(int(client.hlen(key)) for key in keys[:-1])
    return size, samples


def run() -> Section:
    now = time.time()
    with servers.redis_server() as server, override_settings(WHOS_ONLINE={"REDIS_URL": server.url}):
        config = conf.get_config()
        client = redis.Redis.from_url(server.url)
        first = int(ipaddress.IPv4Address("10.0.0.0"))
        address: Callable[[int], str] = lambda n: str(ipaddress.IPv4Address(first + n))  # noqa: E731
        sets: list[tuple[str, Callable[[int], str]]] = [
            ("guests as raw IPv4 addresses (the naive way; baseline)", address),
            ("users, by primary key", str),
            (
                "guests, by the day's pseudonym (`GUEST_IDENTITY='hashed-ip'`)",
                lambda n: identity.guest_id(address(n), config, now),
            ),
        ]
        measured = [
            (label, _sorted_set_bytes(client, key(config, "guests"), member, now))
            for label, member in sets
        ]
        details = _user_details_bytes(client, config, now)
        week, samples = replay_a_week(client, config)
        version = client.info("server")["redis_version"]
    baseline = measured[0][1][0]
    rows = [
        [
            f"sorted set: {label}",
            f"{grown:.1f}",
            f"{usage:.1f}",
            stats.ratio(grown / baseline),
        ]
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
    rows.append(
        [
            f"a week of counters at the defaults ({samples} samples, 3 counters × "
            f"{len(config.counter_precisions)} precisions), in all",
            f"{week} ({week / 1024:.1f} KiB)",
            "—",
            "—",
        ]
    )
    targets = [
        Target(
            f"{label.split(' (')[0]}: ≤ {MEMBER_LIMIT} bytes per online member",
            f"{grown:.1f} B ({grown / baseline:.2f} × raw IPv4)",
            grown <= MEMBER_LIMIT,
        )
        for label, (grown, _) in measured[1:]
    ]
    return Section(
        title="Memory",
        intro=(
            f"redis-server {version}; {stats.number(MEMBERS)} members per sorted set. Bytes per "
            "member: growth of `used_memory`, and `MEMORY USAGE` of the key, divided by the "
            "members; ratio to the raw-IPv4 baseline. Each measured once: memory is not noisy."
        ),
        tables=[stats.table(["what", "bytes", "MEMORY USAGE", "× baseline"], rows)],
        targets=targets,
    )
