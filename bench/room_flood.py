"""What the cleanup command makes of an index of rooms flooded with rooms nobody is in.

Run from the repository root: ``python3 scripts/dev.py bench room_flood`` (``--help`` for the
options); ``--against CHECKOUT`` also runs the command of another checkout of the project (say a
``git archive`` of an older commit), interleaved, to compare.

A crawler that walks ``/topic/<n>/`` leaves each room it passed in the index of rooms, empty
once it moved on. Each repetition fills a fresh redis-server with ``--rooms`` such rooms, last
visited before the window, and one counter sample due for cleaning, then runs
``manage.py whos_online_cleanup`` in a process of its own (the bench site's settings), as cron
would. Per run: its exit status, its wall time (less that of the same run on an empty Redis,
measured alongside: Python and Django starting), the CPU redis-server spent (``INFO cpu``), the
longest command Redis executed (its SLOWLOG), and whether the run emptied the index and cleaned
the counters.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import django
import redis

from bench import cleanup, servers, stats
from bench.report import Section

ROOMS: Final = 200_000
REPEATS: Final = 3
#: What the command prints once it has cleaned the counters.
COUNTERS_CLEANED: Final = " counter sample"


@dataclass(frozen=True)
class Run:
    returncode: int
    seconds: float
    redis_cpu: float
    longest_command: float
    rooms_left: int
    counters_cleaned: bool


def redis_cpu(client: redis.Redis) -> float:
    found = client.info("cpu")
    return float(found["used_cpu_sys"]) + float(found["used_cpu_user"])


def fill(client: redis.Redis, url: str, rooms: int, now: float) -> str:
    """``rooms`` empty rooms in the index and a counter sample due; returns the index's key."""
    from django.conf import settings
    from django.test import override_settings

    from whos_online import api
    from whos_online.backend import keyspace
    from whos_online.config import settings as conf
    from whos_online.store import keys

    with override_settings(WHOS_ONLINE={**settings.WHOS_ONLINE, "REDIS_URL": url}):
        config = conf.get_config()
        index = keyspace.layout(config)[0].key(keys.ROOMS_INDEX)
        api.update_counter("downloads", now=now - 1000)
    stale = now - config.window - 3600
    pipe = client.pipeline(transaction=False)
    for start in range(0, rooms, 10_000):
        batch = range(start, min(start + 10_000, rooms))
        pipe.zadd(index, {f"topic:{number}": stale for number in batch})
        pipe.execute()
    return index


def clean(url: str, checkout: Path, rooms: int, workdir: Path) -> Run:
    """One run of the command from ``checkout`` on a fresh Redis holding ``rooms`` empty rooms."""
    client = redis.Redis.from_url(url)
    client.flushall()
    index = fill(client, url, rooms, time.time())
    cleanup.slowlog_on(client)
    cpu = redis_cpu(client)
    env = servers.site_env("throttled", url, workdir / "bench.sqlite3", checkout=checkout)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "django", "whos_online_cleanup"],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    seconds = time.perf_counter() - started
    return Run(
        returncode=done.returncode,
        seconds=seconds,
        redis_cpu=redis_cpu(client) - cpu,
        longest_command=cleanup.longest_command(client),
        rooms_left=int(client.zcard(index)),
        counters_cleaned=COUNTERS_CLEANED in done.stdout,
    )


def run(rooms: int = ROOMS, repeats: int = REPEATS, against: Path | None = None) -> Section:
    checkouts = {"this checkout": servers.ROOT}
    if against is not None:
        checkouts[str(against)] = against.resolve()
    cases = [(name, size) for name in checkouts for size in (0, rooms)]
    runs: dict[tuple[str, int], list[Run]] = defaultdict(list)
    with (
        tempfile.TemporaryDirectory(prefix="whos-online-bench-") as workdir,
        servers.redis_server() as server,
    ):
        for repeat in range(repeats):
            for name, size in stats.rotated(cases, repeat):
                print(f"room_flood: {name}, {size} rooms…", file=sys.stderr, flush=True)
                runs[name, size].append(clean(server.url, checkouts[name], size, Path(workdir)))
    rows = []
    for name, size in cases:
        found = runs[name, size]
        started = [each.seconds for each in runs[name, 0]]
        rows.append(
            [
                name,
                stats.number(size),
                ", ".join(str(each.returncode) for each in found),
                stats.Spread.of([each.seconds for each in found]).show(_s),
                stats.Spread.of(
                    [each.seconds - base for each, base in zip(found, started, strict=True)]
                ).show(_s),
                stats.Spread.of([each.redis_cpu for each in found]).show(_s),
                stats.Spread.of([each.longest_command for each in found]).show(stats.ms),
                stats.number(max(each.rooms_left for each in found)),
                "yes" if all(each.counters_cleaned for each in found) else "**no**",
            ]
        )
    return Section(
        title="A flood of empty rooms",
        intro=(
            f"`whos_online_cleanup` in a process of its own, on {stats.number(rooms)} rooms in "
            f"the index with nobody in them, and on an empty Redis; {repeats} repetitions, "
            "interleaved. Median (min–max)."
        ),
        tables=[
            stats.table(
                [
                    "command of",
                    "rooms",
                    "exit status",
                    "run s",
                    "less start-up s",
                    "Redis CPU s",
                    "longest command ms",
                    "rooms left",
                    "counters cleaned",
                ],
                rows,
            )
        ],
    )


def _s(seconds: float) -> str:
    return f"{seconds:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.room_flood", description=__doc__)
    parser.add_argument("--rooms", type=int, default=ROOMS, help="empty rooms in the index")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs of each case")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="CHECKOUT",
        help="also run the command of this other checkout of the project, interleaved",
    )
    options = parser.parse_args(argv)
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.site"
    os.environ.setdefault("WHOS_ONLINE_BENCH_VARIANT", "throttled")
    django.setup()
    print(run(options.rooms, options.repeats, options.against).markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
