"""The throttled and recorded requests of one uvicorn worker with live streams open.

ONE uvicorn process serves the bench site (its page ``/`` in no room, and a room with its live
widget); wrk loads ``/`` in cells of two kinds: throttled (200 guests in turn with the cookie
their first visit got) and recorded (a new guest each request). The cells run with no stream
open, then ``N`` streams of the room open and idle, then none again: 0, N₁, 0, N₂, 0, …; each
cell's ratio is to the mean of the 0-stream cells either side. CPU is the whole worker's.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from bench.harness import servers, wrk
from bench.harness.clients import ThrottleCookies, closed, crowd, open_streams, stream_path
from bench.harness.report import Section, number, progress, ratio, table, us
from bench.harness.rounds import neighbour_ratios, sandwich, spread

if TYPE_CHECKING:
    from bench.harness.clients import Stream

KINDS: Final = ("throttled", "recorded")
#: Under this share of a core over a second the worker counts as idle between cells.
IDLE_SHARE: Final = 0.15


@dataclass(frozen=True)
class Options:
    #: Numbers of open streams, comma-separated.
    streams: str = "1000,5000"
    repeats: int = 3
    seconds: int = 5
    batch: int = 200
    #: Whether the worker's streams go on in ``whos_online.asgi.LiveStreams`` (as a site with
    #: many open pages serves them) rather than through Django's response.
    live_streams: bool = False


QUICK = Options(streams="100,200", repeats=1, seconds=1)


@dataclass(frozen=True)
class Cell:
    result: wrk.Result
    #: CPU seconds of the worker and of its redis-server, Redis's commands by name, and the
    #: states the open streams received, during the cell.
    worker: float
    redis: float
    calls: dict[str, int]
    states: int

    def per_request(self, value: float) -> float:
        return value / max(self.result.requests, 1)


class Bench:
    """The worker, its clients, and the streams open on it."""

    def __init__(self, site: servers.Served, path: str, options: Options) -> None:
        self.site, self.path, self.options = site, path, options
        self.crowd = crowd(200, "198.18")
        self.cookies = ThrottleCookies(self.crowd, site.node)
        self.open: list[Stream] = []
        self.fresh = 0
        #: (streams open, seconds the worker took to fall idle) after each change.
        self.settled: list[tuple[int, float]] = []

    async def streams_open(self, wanted: int) -> None:
        """Open or close streams until ``wanted`` are open, then wait for the worker to idle
        (it goes on working a while after thousands of streams closed)."""
        for stream in self.open[wanted:]:
            stream.close()
        del self.open[wanted:]
        if not wanted:
            await closed(self.site.port)
        more = wanted - len(self.open)
        self.open += (
            await open_streams(self.site.port, self.path, more, self.options.batch)
            if more > 0
            else []
        )
        started = time.perf_counter()
        while time.perf_counter() - started < 120:
            before = servers.process_cpu(self.site.pid)
            await asyncio.sleep(1)
            if servers.process_cpu(self.site.pid) - before < IDLE_SHARE:
                break
        self.settled.append((wanted, time.perf_counter() - started))

    async def cell(self, kind: str, seconds: int) -> Cell:
        node, fresh = self.site.node, -1
        if kind == "throttled":
            cookies = await asyncio.to_thread(self.cookies.get, self.site.port)
            headers = [b.headers(more) for b, more in zip(self.crowd, cookies, strict=True)]
        else:
            headers, fresh, self.fresh = (
                [self.crowd[0].headers()],
                self.fresh,
                self.fresh + (1 << 18),
            )
        worker, redis, calls = (
            servers.process_cpu(self.site.pid),
            servers.process_cpu(node.pid),
            node.calls(),
        )
        states = sum(len(stream.received) for stream in self.open)
        result = await asyncio.to_thread(wrk.run, self.site.port, headers, seconds, fresh=fresh)
        ran = {
            name: count - calls.get(name, (0, 0))[0]
            for name, (count, _) in node.calls().items()
            if name != "info"
        }
        spent = (servers.process_cpu(self.site.pid) - worker, servers.process_cpu(node.pid) - redis)
        return Cell(result, *spent, ran, sum(len(stream.received) for stream in self.open) - states)


async def measure(bench: Bench, options: Options) -> list[tuple[int, dict[str, Cell]]]:
    for kind in KINDS:  # the worker warmed up, not counted
        await bench.cell(kind, 1)
    ran = []
    order = sandwich(0, [int(level) for level in options.streams.split(",")], options.repeats)
    for index, level in enumerate(order):
        progress(f"cell {index + 1} of {len(order)}: {level} streams open…")
        await bench.streams_open(level)
        kinds = KINDS if index % 2 == 0 else KINDS[::-1]
        ran.append((level, {kind: await bench.cell(kind, options.seconds) for kind in kinds}))
    await bench.streams_open(0)
    return ran


def report(
    ran: list[tuple[int, dict[str, Cell]]], levels: list[int]
) -> tuple[list[list[Any]], list[str]]:
    rows, notes = [], []
    for kind in KINDS:
        cells = [(level, found[kind]) for level, found in ran]
        rates = neighbour_ratios(cells, 0, lambda cell: cell.result.per_second)
        cpus = neighbour_ratios(cells, 0, lambda cell: cell.per_request(cell.worker))
        for level in [0, *levels]:
            mine = [cell for at, cell in cells if at == level]
            served = max(sum(cell.result.requests for cell in mine), 1)
            commands = sum(count for cell in mine for count in cell.calls.values())
            label = "0 (again: the noise floor)" if level == 0 else number(level)
            rows.append(
                [
                    kind,
                    label,
                    spread([c.result.per_second for c in mine], number),
                    spread(rates.get(level, []), ratio),
                    spread([c.per_request(c.worker) for c in mine], us),
                    spread(cpus.get(level, []), ratio),
                    us(statistics.median(c.per_request(c.redis) for c in mine)),
                    f"{commands / served:.2f}",
                    sum(c.states for c in mine),
                ]
            )
            most = sorted(
                {name for c in mine for name in c.calls},
                key=lambda name: -sum(c.calls.get(name, 0) for c in mine),
            )[:6]
            per = ", ".join(
                f"{name.upper()} {sum(c.calls.get(name, 0) for c in mine) / served:.3f}"
                for name in most
            )
            notes.append(
                f"{kind}, {level} streams open: the commands Redis ran most (a script's own "
                f"count): {per} per request"
            )
            if errors := sum(cell.result.errors for cell in mine):
                notes.append(f"{kind}, {level} streams: {errors} of {served} requests failed.")
    return rows, notes


def run(options: Options) -> Section:
    levels = [int(level) for level in options.streams.split(",")]
    servers.raise_open_files(max(levels) + 1000)
    factory = servers.LIVE_STREAMS_ASGI if options.live_streams else servers.DJANGO_ASGI
    with servers.serving("streams", asgi=True, workers=1, factory=factory) as site:
        bench = Bench(site, asyncio.run(stream_path(site.port)), options)
        ran = asyncio.run(measure(bench, options))
        rows, notes = report(ran, levels)
        notes.append(f"Lines in the worker's log (warnings, errors): {len(site.log_lines())}.")
    for level in sorted({level for level, _ in bench.settled}):
        took = [seconds for at, seconds in bench.settled if at == level]
        notes.append(
            f"Before the cells with {level} streams open, the worker fell idle (under "
            f"{IDLE_SHARE:.0%} of a core over a second) {min(took):.0f}–{max(took):.0f} s after."
        )
    return Section(
        "Requests with live streams open",
        f"wrk ({wrk.THREADS} thread, {wrk.CONNECTIONS} connections), {options.seconds} s cells, "
        f"{options.repeats} repetitions; each cell with streams open between two with none, its "
        "ratio to their mean: median (min–max). The streams go on "
        + ("in `LiveStreams`." if options.live_streams else "through Django's response."),
        [
            table(
                "requests | streams open | req/s | × 0 streams | worker CPU µs/req | × 0 streams "
                "| Redis CPU µs/req | Redis commands per request (a script's own included) | "
                "states the streams received",
                rows,
            )
        ],
        notes=notes,
    )
