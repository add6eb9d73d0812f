"""Redis killed (SIGKILL) under open live streams, and started again on its port, empty.

ONE uvicorn process serves the bench site's room with its live widget (whos_online's defaults:
``FAILURE_BACKOFF`` 10 s, ``REFRESH_INTERVAL`` 30 s); ``streams`` streams of it open. Each outage:
Redis killed; ``pages`` pages of the room asked for meanwhile (each by a new guest); every
stream's ``stale`` awaited; Redis started again ``down`` s after the kill; the time until each
stream has a new state; the lines the worker logged from the kill on.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.harness import servers
from bench.harness.clients import address, open_streams, page, stream_path
from bench.harness.report import Section, number, progress, table
from bench.harness.rounds import percentile, spread

if TYPE_CHECKING:
    from collections.abc import Callable

    from bench.harness.clients import Stream


@dataclass(frozen=True)
class Options:
    streams: int = 1_000
    outages: int = 3
    #: Pages asked for while Redis is down, so many at a time.
    pages: int = 300
    concurrency: int = 10
    #: Seconds Redis stays down, the longest wait for what should come, and between outages.
    down: float = 5.0
    wait: float = 60.0
    between: float = 15.0
    batch: int = 200


QUICK = Options(streams=50, outages=1, pages=20, down=2.0, wait=30.0, between=0.0)


@dataclass
class Outage:
    pages: list[int] = field(default_factory=list)
    #: Seconds each page took while Redis was down.
    page_times: list[float] = field(default_factory=list)
    #: Streams that said stale, stale events in all, and the last stream's first, after the kill.
    stale: int = 0
    stale_events: int = 0
    stale_in: float = 0.0
    down_for: float = 0.0
    #: Seconds from the restart until each stream's new state, and the guests it counted.
    back: list[float] = field(default_factory=list)
    guests: list[int] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


async def until(check: Callable[[], bool], wait: float) -> None:
    deadline = time.perf_counter() + wait
    while not check() and time.perf_counter() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)


async def outage(
    site: servers.Served, streams: list[Stream], options: Options, number: int
) -> Outage:
    seen, logged = Outage(), len(site.log_lines())
    stales = [len(stream.stales) for stream in streams]
    assert site.server.process is not None
    killed = time.perf_counter()
    site.server.process.kill()
    site.server.process.wait(timeout=10)
    for start in range(0, options.pages, options.concurrency):
        asked = range(start, min(start + options.concurrency, options.pages))
        answered = await asyncio.gather(
            *(timed_page(site.port, number * options.pages + n) for n in asked)
        )
        seen.pages += [status for status, _ in answered]
        seen.page_times += [took for _, took in answered]

    def fresh() -> list[list[float]]:
        return [s.stales[before:] for s, before in zip(streams, stales, strict=True)]

    await until(lambda: all(fresh()), options.wait)
    seen.stale = sum(1 for events in fresh() if events)
    seen.stale_in = max((events[0] for events in fresh() if events), default=killed) - killed
    await asyncio.sleep(max(0.0, killed + options.down - time.perf_counter()))
    await asyncio.to_thread(site.server.start)
    restarted = time.perf_counter()
    seen.down_for = restarted - killed
    await until(lambda: all(s.received[-1:] >= [restarted] for s in streams), options.wait)
    for stream in streams:
        seen.back += [at - restarted for at in stream.received if at >= restarted][:1]
        seen.guests += [count for at, count in stream.states if at >= restarted][:1]
    await asyncio.sleep(1)  # a recovery's lines, if any
    seen.stale_events = sum(len(events) for events in fresh())
    seen.log = site.log_lines()[logged:]
    return seen


async def timed_page(port: int, number: int) -> tuple[int, float]:
    started = time.perf_counter()
    try:
        status, _body = await page(port, "/room/", address(number, "10.9"))
    except (OSError, IndexError, ValueError):
        status = 0
    return status, time.perf_counter() - started


def seconds(values: list[float]) -> str:
    median, p95 = statistics.median(values or [0]), percentile(values or [0], 0.95)
    return f"{median:.2f} / {p95:.2f} / {max(values or [0]):.2f} s"


def served(o: Outage) -> str:
    ok = o.pages.count(200)
    return f"{ok} of {len(o.pages)} ({100 * ok / max(len(o.pages), 1):.0f} %)"


def subscription(o: Outage) -> str:
    ours = sum("subscription" in line for line in o.log)
    return f"{ours} / {len(o.log) - ours}"


def rows(outages: list[Outage], options: Options) -> list[list[str]]:
    def each(show: Callable[[Outage], str]) -> list[str]:
        return [show(o) for o in outages]

    return [
        ["streams open", *each(lambda o: str(options.streams))],
        [
            f"pages of the room answered 200 while Redis was down ({options.concurrency} at a "
            "time)",
            *each(served),
        ],
        ["those pages' time: median / p95 / max", *each(lambda o: seconds(o.page_times))],
        [
            "streams that received `stale` (events in all, until the new states); the last "
            "stream's first one, after the kill",
            *each(lambda o: f"{o.stale} ({o.stale_events}); {o.stale_in:.2f} s"),
        ],
        ["Redis down for (kill to restart)", *each(lambda o: f"{o.down_for:.1f} s")],
        [
            f"streams that received a new state after the restart (within {options.wait:g} s)",
            *each(lambda o: f"{len(o.back)} of {options.streams}"),
        ],
        [
            "restart to the new state, over the streams: median / p95 / max",
            *each(lambda o: seconds(o.back)),
        ],
        [
            "guests in the room in that state: median (min–max) over the streams",
            *each(lambda o: spread(o.guests, number)),
        ],
        ["lines in the worker's log, kill to the last new state", *each(lambda o: str(len(o.log)))],
        ["of which warnings of the live streams' subscription / others", *each(subscription)],
    ]


async def measure(site: servers.Served, options: Options) -> list[Outage]:
    path = await stream_path(site.port)
    await asyncio.sleep(1.5)  # the first guest written and published
    streams = await open_streams(site.port, path, options.streams, options.batch)
    await asyncio.sleep(2)
    outages = []
    for index in range(options.outages):
        progress(f"outage {index + 1} of {options.outages}…")
        outages.append(await outage(site, streams, options, index))
        await asyncio.sleep(options.between)
    for stream in streams:
        stream.close()
    return outages


def run(options: Options) -> Section:
    servers.raise_open_files(options.streams + 1000)
    with servers.serving("streams", asgi=True, workers=1) as site:
        outages = asyncio.run(measure(site, options))
    logs = [
        f"The worker's log, outage {n + 1}:\n\n" + "\n".join(f"    {line}" for line in o.log[:12])
        for n, o in enumerate(outages)
        if o.log
    ]
    header = " | ".join(["measure", *(f"outage {n + 1}" for n in range(len(outages)))])
    return Section(
        "Redis killed under live streams", "", [table(header, rows(outages, options))], notes=logs
    )
