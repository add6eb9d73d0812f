"""The recorded and throttled request figures of one uvicorn worker, with live streams open.

Run from the repository root: ``python3 scripts/dev.py bench streams_requests`` (``--help`` for
the options; ``--streams``, ``--repeats`` and ``--seconds`` bound its time).

A real redis-server and ONE uvicorn process (no supervisor) serving ``bench.streams_site``
(``LIVE_UPDATES`` on): at ``/`` the throughput benchmark's page (sessions, auth, a small
template, in no room), at ``/room/`` a page with the room's live widget. wrk (``bench.wrk``, as
``bench.throughput`` runs it) loads ``/`` in cells of ``--seconds`` of two kinds:

- throttled: 200 guests in turn (each its own ``X-Forwarded-For``), each sending the throttle
  cookie its first visit got, as ``bench.throughput`` fetches them: no request is recorded;
- recorded: a new guest every request (a new address, no cookie), so that each one is recorded
  (queued, and written by the flusher), as ``THROTTLE=0`` would record the same guests.

The cells run with no stream open, then with each number of ``--streams`` open (streams of the
room's widget, opened by this process as ``bench.streams`` opens them, idle: nothing changes in
the room), then none again: 0, N₁, 0, N₂, 0, … (the order of the Ns rotating each repetition), so
that every cell with streams open sits between two cells with none, and its ratio is to the mean
of those two. "0 streams again" is the same ratio for a cell with none between two others: the
noise floor. CPU per request is the worker's (every thread: the flusher and the subscription
included, and the streams' heartbeats) per request served, and its redis-server's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import redis

from bench import stats, streams, wrk
from bench.throughput import Browser, Site, ThrottleCookies
from bench.variants import BY_NAME

if TYPE_CHECKING:
    from collections.abc import Callable

LEVELS: Final = (1_000, 5_000)
REPEATS: Final = 3
SECONDS: Final = 5
KINDS: Final = ("throttled", "recorded")
GUESTS: Final = 200
#: Addresses a recorded cell may take: each cell starts a block of this many new guests.
FRESH_BLOCK: Final = 1 << 18
TICKS: Final = os.sysconf("SC_CLK_TCK")
#: The share of a core under which the worker counts as idle between cells (the heartbeats of
#: 5 000 streams, about 330 a second, take a few percent).
IDLE_SHARE: Final = 0.15


def process_cpu(pid: int) -> float:
    """CPU seconds of a whole process, the threads that ended included (Linux's ``utime`` and
    ``stime``, in clock ticks): the worker's threads come and go, and the live threads' sum
    (``servers.cpu_seconds``) loses those that ended during a cell."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass(frozen=True)
class Cell:
    result: wrk.Result
    #: CPU seconds of the worker and of its redis-server during the cell.
    worker_cpu: float
    redis_cpu: float
    #: Commands Redis ran, and states the open streams received, during the cell.
    commands: int
    states: int
    #: Calls of each command Redis ran during the cell (``INFO commandstats``).
    calls: dict[str, int]

    def per_request(self, cpu: float) -> float:
        return cpu / max(self.result.requests, 1)


class Bench:
    """The worker, its Redis, the clients, and the streams open on it."""

    def __init__(self, site: Site, redis_pid: int, path: str, batch: int) -> None:
        self.site = site
        self.redis_pid = redis_pid
        self.path = path
        self.batch = batch
        self.crowd = [Browser(f"198.18.{n // 250}.{n % 250 + 1}") for n in range(GUESTS)]
        self.cookies = ThrottleCookies({"anonymous": self.crowd})
        self.open: list[streams.Stream] = []
        self.fresh = 0
        #: The streams open, and the seconds the worker took to fall idle, after each change.
        self.settled: list[tuple[int, float]] = []

    async def streams_open(self, wanted: int) -> None:
        """Open or close streams until ``wanted`` are open, and wait for the worker to idle."""
        if wanted < len(self.open):
            for stream in self.open[wanted:]:
                stream.close()
            del self.open[wanted:]
            if not wanted:
                await streams.closed(self.site.port)
        elif wanted > len(self.open):
            more = argparse.Namespace(streams=wanted - len(self.open), batch=self.batch)
            self.open += await streams.open_streams(self.site.port, self.path, more)
        self.settled.append((wanted, await self.idle()))

    async def idle(self, longest: float = 120.0) -> float:
        """Wait until the worker spends less than ``IDLE_SHARE`` of a core over a second: it
        goes on working for a while after its socket closed (5 000 streams closed keep it busy
        for many seconds, and a cell then would measure that); the seconds it took."""
        started = time.perf_counter()
        while time.perf_counter() - started < longest:
            before = process_cpu(self.site.master)
            await asyncio.sleep(1)
            if process_cpu(self.site.master) - before < IDLE_SHARE:
                break
        return time.perf_counter() - started

    async def cell(self, kind: str, seconds: int) -> Cell:
        if kind == "throttled":
            extra = await asyncio.to_thread(self.cookies.get, self.site, "anonymous")
            headers = [b.headers(more) for b, more in zip(self.crowd, extra, strict=True)]
            fresh = -1
        else:
            headers, fresh = [self.crowd[0].headers()], self.fresh
            self.fresh += FRESH_BLOCK
        pid = self.site.master
        worker, own = process_cpu(pid), process_cpu(self.redis_pid)
        commands, states, calls = self.site.commands(), self.states(), self.calls()
        result = await asyncio.to_thread(wrk.run, self.site.port, headers, seconds, fresh=fresh)
        return Cell(
            result,
            process_cpu(pid) - worker,
            process_cpu(self.redis_pid) - own,
            self.site.commands() - commands - 2,  # less the two INFOs that read the counts before
            self.states() - states,
            {name: count - calls.get(name, 0) for name, count in self.calls().items()},
        )

    def calls(self) -> dict[str, int]:
        found = self.site.redis.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in found.items()}

    def states(self) -> int:
        return sum(len(stream.received) for stream in self.open)


#: The cells in the order they ran: the streams open, and a cell of each kind.
Sequence_ = list[tuple[int, dict[str, Cell]]]

METRICS: Final[dict[str, Callable[[Cell], float]]] = {
    "req/s": lambda cell: cell.result.per_second,
    "cpu": lambda cell: cell.per_request(cell.worker_cpu),
}


async def measure(bench: Bench, args: argparse.Namespace) -> Sequence_:
    for kind in KINDS:  # warm the worker up, not counted
        await bench.cell(kind, 1)
    order = [0]
    for repeat in range(args.repeats):
        for level in stats.rotated(args.streams, repeat):
            order += [level, 0]
    ran: Sequence_ = []
    for index, level in enumerate(order):
        progress(f"cell {index + 1} of {len(order)}: {level} streams open…")
        await bench.streams_open(level)
        progress(f"  the worker fell idle {bench.settled[-1][1]:.0f} s after")
        found = {}
        for kind in KINDS if index % 2 == 0 else KINDS[::-1]:
            cell = found[kind] = await bench.cell(kind, args.seconds)
            progress(
                f"  {kind}: {cell.result.requests} requests ({cell.result.errors} failed) in "
                f"{cell.result.seconds:.1f} s, worker CPU {cell.worker_cpu:.2f} s, Redis "
                f"{cell.redis_cpu:.2f} s, {cell.states} states on the streams"
            )
        ran.append((level, found))
    await bench.streams_open(0)
    return ran


def ratios(ran: Sequence_) -> dict[tuple[str, int], dict[str, list[float]]]:
    """Per (kind, streams open) and metric: each cell's ratio to the mean of the two nearest
    0-stream cells around it (for a 0-stream cell, those before and after its neighbours)."""
    found: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for index, (level, cells) in enumerate(ran):
        step = 2 if level == 0 else 1
        if index - step < 0 or index + step >= len(ran):
            continue
        before, after = ran[index - step][1], ran[index + step][1]
        for kind, cell in cells.items():
            for name, metric in METRICS.items():
                base = (metric(before[kind]) + metric(after[kind])) / 2
                if base > 0:
                    found[kind, level][name].append(metric(cell) / base)
    return found


def report(ran: Sequence_, args: argparse.Namespace) -> tuple[str, list[str]]:
    """The table, and notes on what went wrong."""
    found = ratios(ran)
    rows, notes = [], []
    for kind in KINDS:
        for level in [0, *sorted(args.streams)]:
            cells = [cells[kind] for at, cells in ran if at == level]
            ratio = found[kind, level]
            rows.append(
                [
                    kind,
                    "0 (again: the noise floor)" if level == 0 else f"{level:,}".replace(",", " "),
                    stats.Spread.of([c.result.per_second for c in cells]).show(stats.number),
                    _spread(ratio["req/s"]),
                    stats.Spread.of([c.per_request(c.worker_cpu) for c in cells]).show(stats.us),
                    _spread(ratio["cpu"]),
                    stats.us(statistics.median(c.per_request(c.redis_cpu) for c in cells)),
                    f"{statistics.median(c.per_request(c.commands) for c in cells):.2f}",
                    str(sum(c.states for c in cells)),
                ]
            )
            calls: dict[str, int] = defaultdict(int)
            for cell in cells:
                for name, count in cell.calls.items():
                    calls[name] += count
            served = sum(c.result.requests for c in cells)
            calls.pop("info", None)
            notes.append(
                f"{kind}, {level} streams open: the commands Redis ran most (a script's own "
                "commands count, `INFO commandstats`): "
                + ", ".join(
                    f"{name.upper()} {count / served:.3f}"
                    for name, count in sorted(calls.items(), key=lambda item: -item[1])[:6]
                    if count
                )
                + " per request"
            )
            errors = sum(c.result.errors for c in cells)
            if errors:
                notes.append(
                    f"{kind}, {level} streams: {errors} of "
                    f"{sum(c.result.requests for c in cells)} requests failed."
                )
    header = [
        "requests",
        "streams open",
        "req/s",
        "× 0 streams",
        "worker CPU µs/req",
        "× 0 streams",
        "Redis CPU µs/req",
        "Redis commands per request (a script's own included)",
        "states the streams received",
    ]
    return stats.table(header, rows), notes


def _spread(values: list[float]) -> str:
    return stats.Spread.of(values).show(stats.ratio) if values else "—"


def progress(message: str) -> None:
    print(f"streams-requests: {message}", file=sys.stderr, flush=True)


#: The site's database (sessions, auth), made before the worker starts.
MIGRATE: Final = (
    "import django; django.setup(); from django.core.management import call_command; "
    "call_command('migrate', verbosity=0)"
)


async def _main(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    with streams.streams_worker(migrate=MIGRATE) as (server, port, process, log):
        assert server.process is not None
        admin = redis.Redis.from_url(server.url)
        try:
            site = Site(BY_NAME["throttled"], port, process.pid, admin, server.process.pid)
            path = await streams.stream_path(port)
            bench = Bench(site, server.process.pid, path, args.batch)
            ran = await measure(bench, args)
        finally:
            admin.close()
        table, notes = report(ran, args)
        for level in sorted({level for level, _took in bench.settled}):
            took = [t for at, t in bench.settled if at == level]
            notes.append(
                f"Before the cells with {level} streams open, the worker fell idle (under "
                f"{IDLE_SHARE:.0%} of a core over a second) {min(took):.0f}–{max(took):.0f} s "
                "after the streams were " + ("closed" if level == 0 else "opened") + "."
            )
        lines = streams.log_lines(log)
        notes.append(f"Lines in the worker's log (warnings, errors): {len(lines)}.")
        if lines:
            progress("the worker's log:\n" + "\n".join(lines[:20]))
        return [table], notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument(
        "--streams",
        type=lambda text: [int(n) for n in text.split(",")],
        default=list(LEVELS),
        help="numbers of open streams, comma-separated (default 1000,5000)",
    )
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--seconds", type=int, default=SECONDS, help="seconds of a cell")
    parser.add_argument("--batch", type=int, default=streams.BATCH, help="streams opened at once")
    args = parser.parse_args(argv)
    streams.require_open_files(parser, max(args.streams))
    started = time.monotonic()
    tables, notes = asyncio.run(_main(args))
    streams.print_report("Requests with live streams open", "streams_requests", argv, tables, notes)
    print(f"\nThe whole run took {time.monotonic() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    os.environ.pop("DJANGO_SETTINGS_MODULE", None)
    sys.exit(main())
