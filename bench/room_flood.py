"""What the cleanup command makes of an index of rooms flooded with rooms nobody is in (what a
crawler walking ``/topic/<n>/`` leaves): ``whos_online_cleanup`` run as cron runs it, in a process
of its own, on ``rooms`` rooms last visited before the window and one counter sample due, and on
an empty Redis (its start-up), interleaved; with ``--against``, another checkout's command too.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.test import override_settings

import whos_online
from bench import internals as whos
from bench.harness import servers
from bench.harness.report import Section, fixed, ms, number, table
from bench.harness.rounds import interleaved, minus, spread

seconds = fixed(2)


@dataclass(frozen=True)
class Options:
    rooms: int = 200_000
    repeats: int = 3
    #: Another checkout whose command runs too, interleaved.
    against: Path | None = None


QUICK = Options(rooms=2_000, repeats=1)


def clean(node: servers.Node, url: str, checkout: Path, rooms: int, workdir: Path) -> list[float]:
    """One run of the command from ``checkout`` on a fresh Redis holding ``rooms`` empty rooms:
    exit status, seconds, Redis CPU seconds, its longest command, rooms left, counters cleaned."""
    node.client.flushall()
    with override_settings(WHOS_ONLINE={**settings.WHOS_ONLINE, "REDIS_URL": url}):  # the site's
        config, now = whos.get_config(), time.time()
        whos_online.update_counter("downloads", now=now - 1000)
        index = whos.keyspace.layout(config)[0].key(whos.keyspace.ROOMS_INDEX)
    for start in range(0, rooms, 10_000):
        stale = now - config.window - 3600
        node.client.zadd(
            index, {f"topic:{n}": stale for n in range(start, min(start + 10_000, rooms))}
        )
    node.slowlog_on()
    cpu, started = node.used_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "django", "whos_online_cleanup"],
        env=servers.site_env("throttled", url, workdir / "bench.sqlite3", checkout=checkout),
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    took = time.perf_counter() - started
    cleaned = " counter sample" in done.stdout
    return [
        done.returncode,
        took,
        node.used_cpu() - cpu,
        node.longest_command(),
        node.client.zcard(index),
        cleaned,
    ]


def run(options: Options) -> Section:
    checkouts = servers.checkouts(options.against)
    cases = [(name, size) for name in checkouts for size in (0, options.rooms)]
    with servers.temporary_directory() as workdir, servers.redis_server() as server:
        node = servers.Node.of(server)
        runs = interleaved(
            cases,
            options.repeats,
            lambda c: clean(node, server.url, checkouts[c[0]], c[1], Path(workdir)),
            label="room flood",
        )
    rows = []
    for name, size in cases:
        found = list(zip(*runs[name, size], strict=True))
        started = [run[1] for run in runs[name, 0]]
        cleaned = "yes" if all(found[5]) else "**no**"
        rows.append(
            [
                name,
                number(size),
                ", ".join(map(str, found[0])),
                spread(found[1], seconds),
                spread(minus(found[1], started), seconds),
                spread(found[2], seconds),
                spread(found[3], ms),
                number(max(found[4])),
                cleaned,
            ]
        )
    return Section(
        "A flood of empty rooms",
        f"`whos_online_cleanup` in a process of its own, on {number(options.rooms)} rooms in the "
        f"index with nobody in them, and on an empty Redis; {options.repeats} repetitions, "
        'interleaved. Median (min–max); "less start-up" subtracts the run on an empty Redis in '
        "the same repetition.",
        [
            table(
                "command of | rooms | exit status | run s | less start-up s | Redis CPU s | "
                "longest command ms | rooms left | counters cleaned",
                rows,
            )
        ],
    )
