"""How much Redis memory a week of whos_online's counters takes at the default settings.

Starts a throw-away redis-server, replays a week of recorded visits through the real record
script (one visit a minute for the week, then one a second for the last three minutes, so that
every precision is as full as it gets), cleans as the cleanup command would, and prints the
memory of the counter keys, of the day's unique-visitor HyperLogLogs and of the peak, as
``MEMORY USAGE`` reports them. Run from the repository root:

    .venv/bin/python bench/counter_memory.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import django
from django.conf import settings

from tests.redis_server import RedisServer

WEEK = 7 * 86400
#: Distinct guests cycling through the simulated site; about this many are online at a time.
GUESTS = 40


def main() -> None:
    server = RedisServer()
    server.start()
    try:
        settings.configure(
            SECRET_KEY="bench-only",  # noqa: S106 (a throw-away server)
            INSTALLED_APPS=[],
            WHOS_ONLINE={"REDIS_URL": server.url},
        )
        django.setup()
        replay_a_week()
    finally:
        server.close()


def replay_a_week() -> None:
    from whos_online import counters, store
    from whos_online.conf import get_config
    from whos_online.connection import admin_client

    config = get_config()
    client = admin_client()
    end = 1_800_000_000.0
    start = end - WEEK
    times = [start + minute * 60 for minute in range(WEEK // 60 - 3)]
    times += [end - 180 + second for second in range(181)]
    for index, now in enumerate(times):
        store.record(
            client,
            config,
            kind="guests",
            member=f"g{index % GUESTS}",
            now=now,
            visitor=f"v{index % 5000}",
        )
        if index % 60 == 0:  # the cleanup command, hourly in simulated time
            counters.clean(client, config, now=now)
    removed = counters.clean(client, config, now=end)

    def usage(pattern: str) -> tuple[int, int]:
        keys = list(client.scan_iter(match=pattern, count=1000))
        return len(keys), sum(int(client.memory_usage(key, samples=0) or 0) for key in keys)

    rows = [
        ("counter hashes (3 counters x 7 precisions)", usage("{whos_online}:counter:*")),
        ("known-counters set", usage("{whos_online}:counters")),
        ("unique-visitor HyperLogLogs (one per day)", usage("{whos_online}:visitors:*")),
        ("peak", usage("{whos_online}:peak")),
    ]
    samples = sum(client.hlen(key) for key in client.scan_iter(match="{whos_online}:counter:*"))
    print(
        f"redis-server {client.info('server')['redis_version']}, defaults: "
        f"COUNTER_PRECISIONS={list(config.counter_precisions)}, "
        f"COUNTER_SAMPLES={config.counter_samples}"
    )
    print(
        f"replayed {len(times)} visits over 7 days; last clean removed {removed.samples} samples; "
        f"{samples} samples kept"
    )
    print(f"{'what':<46} {'keys':>5} {'bytes':>9}")
    for name, (count, size) in rows:
        print(f"{name:<46} {count:>5} {size:>9}")
    for key in sorted(client.scan_iter(match="{whos_online}:counter:*")):
        print(
            f"  {key.decode():<46} {client.hlen(key):>5} {client.memory_usage(key, samples=0):>9}"
            f"  {client.object('encoding', key).decode()}"
        )
    counter_bytes = rows[0][1][1] + rows[1][1][1]
    print(f"{'counters in all':<46} {'':>5} {counter_bytes:>9}  ({counter_bytes / 1024:.1f} KiB)")


if __name__ == "__main__":
    main()
