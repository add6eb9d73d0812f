"""Redis killed (SIGKILL) under open live streams and started again on the same port.

Run from the repository root: ``python3 scripts/dev.py bench streams_outage`` (``--help`` for the
options; ``--streams`` and ``--outages`` bound its time).

A real redis-server and ONE uvicorn process (no supervisor) serving ``bench.streams_site``, with
whos_online's default settings (``FAILURE_BACKOFF`` 10 s, ``REFRESH_INTERVAL`` 30 s) but
``LIVE_UPDATES`` on. This process opens ``--streams`` streams of the room's live widget (as
``bench.streams`` does), then, ``--outages`` times:

- kills the redis-server (SIGKILL: no goodbye to its clients);
- asks for ``--pages`` pages of the room (each by a new guest, ``--concurrency`` at a time)
  while it is down, and counts those answered 200;
- waits until every stream has received ``stale`` (at most ``--wait`` s), and counts them;
- holds Redis down until ``--down`` s after the kill, then starts it again on the same port,
  empty (it saves nothing);
- times, from that restart, until each stream has received a state (whatever it counts): the
  subscription is made again and every room read again, or the streams' rooms are read again
  once the request path's breaker lets a read through;
- and reads the lines the worker logged (its stderr: whos_online's warnings and errors) from
  the kill until every stream had its new state.

The expected log of an outage is one warning from the request path and one from the
subscription per process (``docs/failure.md``); the benchmark prints what it sees.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import redis

from bench import stats, streams

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.support.redis_server import RedisServer

STREAMS: Final = 1_000
OUTAGES: Final = 3
PAGES: Final = 300
CONCURRENCY: Final = 10
#: Seconds Redis stays down from the kill (at least: the pages and the stale events first).
DOWN: Final = 5.0
#: Seconds to wait for what should come: every stale event, every new state.
WAIT: Final = 60.0


@dataclass
class Outage:
    """What one outage showed."""

    streams: int
    pages: list[int] = field(default_factory=list)
    #: Seconds each page took while Redis was down.
    page_times: list[float] = field(default_factory=list)
    stale: int = 0
    #: ``stale`` events received in all, from the kill until every stream had its new state.
    stale_events: int = 0
    #: Seconds from the kill until the last stream said stale.
    stale_in: float = 0.0
    down_for: float = 0.0
    #: Seconds from the restart until each stream received a state (those that did).
    back: list[float] = field(default_factory=list)
    #: The guests each stream's first new state counted (Redis came back empty: those the
    #: worker queued while it was down, once written).
    guests: list[int] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


async def page(port: int, number: int) -> tuple[int, float]:
    started = time.perf_counter()
    try:
        status, _body = await streams.request(
            port, "/room/", f"10.9.{number >> 8 & 255}.{number & 255}"
        )
    except (OSError, IndexError, ValueError):
        status = 0
    return status, time.perf_counter() - started


async def pages(port: int, count: int, concurrency: int, first: int) -> list[tuple[int, float]]:
    found: list[tuple[int, float]] = []
    for start in range(0, count, concurrency):
        batch = range(start, min(start + concurrency, count))
        found += await asyncio.gather(*(page(port, first + number) for number in batch))
    return found


async def until(check: Callable[[], bool], wait: float) -> bool:
    """Poll ``check()`` every 50 ms until it is true or ``wait`` seconds passed."""
    deadline = time.perf_counter() + wait
    while time.perf_counter() < deadline:
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


async def outage(
    server: RedisServer,
    port: int,
    open_: list[streams.Stream],
    *,
    log: Path,
    args: argparse.Namespace,
    number: int,
) -> Outage:
    seen = Outage(len(open_))
    logged = len(streams.log_lines(log))
    stales = [len(stream.stales) for stream in open_]
    process = server.process
    assert process is not None
    killed = time.perf_counter()
    process.kill()
    process.wait(timeout=10)

    answered = await pages(port, args.pages, args.concurrency, number * args.pages)
    seen.pages = [status for status, _took in answered]
    seen.page_times = [took for _status, took in answered]

    def all_stale() -> bool:
        return all(len(s.stales) > before for s, before in zip(open_, stales, strict=True))

    await until(all_stale, args.wait)
    fresh = [s.stales[before:] for s, before in zip(open_, stales, strict=True)]
    seen.stale = sum(1 for events in fresh if events)
    seen.stale_in = max((events[0] for events in fresh if events), default=killed) - killed

    await asyncio.sleep(max(0.0, killed + args.down - time.perf_counter()))
    await asyncio.to_thread(server.start)
    restarted = time.perf_counter()
    seen.down_for = restarted - killed

    def all_back() -> bool:
        return all(s.received and s.received[-1] >= restarted for s in open_)

    await until(all_back, args.wait)
    for stream in open_:
        after = [at for at in stream.received if at >= restarted]
        if after:
            seen.back.append(after[0] - restarted)
        counted = [guests for at, guests in stream.states if at >= restarted]
        if counted:
            seen.guests.append(counted[0])
    await asyncio.sleep(1)  # a recovery's lines, if any
    seen.stale_events = sum(len(s.stales) - before for s, before in zip(open_, stales, strict=True))
    seen.log = streams.log_lines(log)[logged:]
    return seen


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def seconds(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{statistics.median(values):.2f} / {percentile(values, 0.95):.2f} / {max(values):.2f} s"


def report(outages: list[Outage], args: argparse.Namespace) -> tuple[str, list[str]]:
    header = ["measure", *(f"outage {n + 1}" for n in range(len(outages)))]
    rows = [
        ["streams open", *(str(o.streams) for o in outages)],
        [
            f"pages of the room answered 200 while Redis was down ({args.concurrency} at a time)",
            *(
                f"{o.pages.count(200)} of {len(o.pages)} "
                f"({100 * o.pages.count(200) / max(len(o.pages), 1):.0f} %)"
                for o in outages
            ),
        ],
        [
            "those pages' time: median / p95 / max",
            *(seconds(o.page_times) for o in outages),
        ],
        [
            "streams that received `stale` (events in all, until the new states); the last "
            "stream's first one, after the kill",
            *(f"{o.stale} ({o.stale_events}); {o.stale_in:.2f} s" for o in outages),
        ],
        ["Redis down for (kill to restart)", *(f"{o.down_for:.1f} s" for o in outages)],
        [
            f"streams that received a new state after the restart (within {args.wait:g} s)",
            *(f"{len(o.back)} of {o.streams}" for o in outages),
        ],
        [
            "restart to the new state, over the streams: median / p95 / max",
            *(seconds(o.back) for o in outages),
        ],
        [
            "guests in the room in that state: median (min–max) over the streams",
            *(stats.Spread.of(o.guests).show(stats.number) if o.guests else "—" for o in outages),
        ],
        [
            "lines in the worker's log, kill to the last new state",
            *(str(len(o.log)) for o in outages),
        ],
        [
            "of which warnings of the live streams' subscription / others",
            *(
                f"{sum('subscription' in line for line in o.log)} / "
                f"{sum('subscription' not in line for line in o.log)}"
                for o in outages
            ),
        ],
    ]
    notes = []
    for number, seen in enumerate(outages):
        if seen.log:
            shown = "\n".join(f"    {line}" for line in seen.log[:12])
            notes.append(f"The worker's log, outage {number + 1}:\n\n{shown}")
    return stats.table(header, rows), notes


def progress(message: str) -> None:
    print(f"streams-outage: {message}", file=sys.stderr, flush=True)


async def _main(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    with streams.streams_worker() as (server, port, _process, log):
        path = await streams.stream_path(port)
        await asyncio.sleep(1.5)  # the first guest written and published
        open_ = await streams.open_streams(port, path, args)
        await asyncio.sleep(2)
        before = streams.log_lines(log)
        outages = []
        for number in range(args.outages):
            progress(f"outage {number + 1} of {args.outages}…")
            outages.append(await outage(server, port, open_, log=log, args=args, number=number))
            admin = redis.Redis.from_url(server.url)
            try:
                subscribed = streams.subscribers(admin)
            finally:
                admin.close()
            progress(f"after it, Redis sees {subscribed}")
            await asyncio.sleep(args.between)
        for stream in open_:
            stream.close()
        table, notes = report(outages, args)
        if before:
            notes.insert(0, f"The worker logged {len(before)} lines before the first outage.")
        return [table], notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--streams", type=int, default=STREAMS)
    parser.add_argument("--outages", type=int, default=OUTAGES)
    parser.add_argument("--pages", type=int, default=PAGES, help="pages asked for in an outage")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--down", type=float, default=DOWN, help="seconds Redis stays down")
    parser.add_argument("--wait", type=float, default=WAIT)
    parser.add_argument("--between", type=float, default=15.0, help="seconds between two outages")
    parser.add_argument("--batch", type=int, default=streams.BATCH, help="streams opened at once")
    args = parser.parse_args(argv)
    streams.require_open_files(parser, args.streams)
    started = time.monotonic()
    tables, notes = asyncio.run(_main(args))
    streams.print_report("Redis killed under live streams", "streams_outage", argv, tables, notes)
    print(f"\nThe whole run took {time.monotonic() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    os.environ.pop("DJANGO_SETTINGS_MODULE", None)
    sys.exit(main())
