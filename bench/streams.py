"""What open live streams cost one uvicorn worker, and how soon a change reaches them.

Run from the repository root: ``python3 scripts/dev.py bench streams`` (``--help`` for the
options; ``--streams`` and ``--rounds`` bound its time). Its streams serve two more benchmarks:
``bench.streams_requests`` (the site's requests with streams open) and ``bench.streams_outage``
(Redis killed under open streams).

A real redis-server and ONE uvicorn process (no supervisor) serving ``bench.streams_site``
(``LIVE_UPDATES`` on; a page in a room that shows the room's live widget) on loopback. This
process raises its limit of open files (and so the worker's, which inherits it), asks the page
once for its stream's URL, then opens ``--streams`` streams of that URL on raw asyncio sockets
(HTTP/1.0, so that the body is the event stream itself, not chunks), each read until its first
state, in batches of ``--batch``. Then:

- the worker's resident memory before and after, and per stream;
- the worker's CPU over ``--idle`` seconds with every stream open and nothing changing;
- what Redis sees: subscribers of ``{prefix}:changes`` (``PUBSUB NUMSUB``) and connections
  that subscribe (``CLIENT LIST``);
- ``--rounds`` changes: a page view by a new guest (another address in ``X-Forwarded-For``)
  enters the room; the time from sending that request until each stream has received a state
  that counts the new guest, and the ``PUBLISH`` commands Redis ran for it (``INFO
  commandstats``). Median, 95th percentile and maximum over every stream of every round, and
  their ratios to the 2 s target and to the 30 s of polling.

The streams are read by this process, on the same two cores as the worker and Redis: the times
include reading 10 000 sockets here, so they are an upper bound of what the worker takes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import urlencode

import redis

from bench import servers, stats
from tests.support import wsgi_server

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.redis_server import RedisServer

STREAMS: Final = 10_000
ROUNDS: Final = 5
BATCH: Final = 200
IDLE: Final = 10.0
TARGET: Final = 2.0
POLLING: Final = 30.0
PREFIX: Final = "bench-streams"
#: A guest's count in a state, as the widget's HTML (escaped in the event's JSON) writes it.
GUESTS: Final = re.compile(rb'data-guests=\\"(\d+)\\"')
LIVE: Final = re.compile(r'data-whos-online-live="([^"]*)"')


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def raise_open_files(wanted: int) -> int:
    """Raise this process's soft limit of open files (its children inherit it); the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = hard if hard == resource.RLIM_INFINITY else min(hard, max(soft, wanted))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    return limit


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def request(port: int, path: str, address: str) -> tuple[int, str]:
    """A page view of ``path`` by a browser at ``address`` (behind the one trusted proxy)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Forwarded-For: {address}\r\n"
        "Sec-Fetch-Dest: document\r\nSec-Fetch-Site: none\r\nAccept: text/html\r\n\r\n".encode()
    )
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode()


class Stream:
    """One open stream: the guests each state counted and when; when each state and stale came."""

    def __init__(self) -> None:
        self.states: list[tuple[float, int]] = []
        self.received: list[float] = []
        self.stales: list[float] = []
        self.first = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def run(self, port: int, path: str) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        self.writer.write(
            f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
            raise RuntimeError(f"the stream answered {head[:40]!r}")
        buffer = b""
        while True:
            chunk = await reader.read(1 << 16)
            if not chunk:
                return
            now = time.perf_counter()
            buffer += chunk
            *blocks, buffer = buffer.split(b"\n\n")
            for block in blocks:
                if block.startswith(b"event: stale"):
                    self.stales.append(now)
                state = block.startswith((b"data:", b"retry:"))
                if state:
                    self.received.append(now)
                found = GUESTS.search(block) if state else None
                if found is not None:
                    self.states.append((now, int(found[1])))
                    if not self.first.done():
                        self.first.set_result(None)

    def arrived(self, guests: int, after: float) -> float | None:
        """When it received a state counting ``guests`` guests, sent after ``after``."""
        for at, counted in self.states:
            if at >= after and counted == guests:
                return at
        return None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.task is not None:
            self.task.cancel()


def subscribers(admin: redis.Redis) -> tuple[str, int, int]:
    """(the channel the worker subscribed to, its subscribers (``PUBSUB NUMSUB``), connections
    subscribed to anything (``CLIENT LIST``))."""
    channels = [
        name if isinstance(name, str) else name.decode() for name in admin.pubsub_channels()
    ]
    if len(channels) != 1:
        raise RuntimeError(f"the worker subscribed to {channels}, not to one channel")
    counts = dict(admin.pubsub_numsub(channels[0]))
    subscribed = sum(1 for client in admin.client_list() if int(client.get("sub", 0)) > 0)
    return channels[0], int(next(iter(counts.values()))), subscribed


def publishes(admin: redis.Redis) -> int:
    return int(admin.info("commandstats").get("cmdstat_publish", {}).get("calls", 0))


async def open_streams(port: int, path: str, args: argparse.Namespace) -> list[Stream]:
    """``args.streams`` streams of ``path``, each read until its first state."""
    streams: list[Stream] = []
    for start in range(0, args.streams, args.batch):
        batch = [Stream() for _ in range(min(args.batch, args.streams - start))]
        for stream in batch:
            stream.task = asyncio.ensure_future(stream.run(port, path))
        await asyncio.wait_for(asyncio.gather(*(stream.first for stream in batch)), 120)
        streams += batch
        if len(streams) % 2000 == 0:
            progress(f"{len(streams)} streams open")
    return streams


@dataclass
class Rounds:
    """What the changes measured."""

    #: Seconds from the page view to the new state, one per stream and round.
    latencies: list[float] = field(default_factory=list)
    #: The stream-rounds that did not get the new state within 30 s.
    missed: int = 0
    #: PUBLISH commands per round.
    published: list[int] = field(default_factory=list)
    #: Per round, the seconds until the first stream had it (the publish and the one read).
    firsts: list[float] = field(default_factory=list)
    #: Per round, the worker's CPU seconds from the page view until every stream had it.
    cpu: list[float] = field(default_factory=list)


async def changes(
    port: int, pid: int, admin: redis.Redis, streams: list[Stream], rounds: int
) -> Rounds:
    """A new guest enters the room ``rounds`` times: when each stream had the new count, and
    what it cost."""
    measured = Rounds()
    guests = 1
    for round_number in range(rounds):
        progress(f"round {round_number + 1} of {rounds}…")
        before = publishes(admin)
        guests += 1
        cpu = servers.cpu_seconds([pid])
        sent = time.perf_counter()
        status, _page = await request(
            port, "/room/", f"10.1.{round_number >> 8}.{round_number & 255}"
        )
        if status != 200:
            raise RuntimeError(f"the room's page answered {status}")
        deadline, waiting = sent + 30, streams
        while waiting and time.perf_counter() < deadline:
            await asyncio.sleep(0.1)
            waiting = [stream for stream in waiting if stream.arrived(guests, sent) is None]
        measured.cpu.append(servers.cpu_seconds([pid]) - cpu)
        arrived = [stream.arrived(guests, sent) for stream in streams]
        measured.latencies += [at - sent for at in arrived if at is not None]
        measured.missed += sum(1 for at in arrived if at is None)
        measured.firsts.append(min((at for at in arrived if at is not None), default=sent) - sent)
        await asyncio.sleep(1.5)  # a publish coalesced late would still count
        measured.published.append(publishes(admin) - before)
    return measured


def connections(port: int) -> int:
    """Connections to the worker's port that the worker has not closed yet (Linux's TCP table:
    its side of each, in any state but LISTEN, TIME_WAIT and CLOSE)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, state = fields[1], fields[3]
                if int(local.rpartition(":")[2], 16) == port and state not in {"0A", "06", "07"}:
                    count += 1
    return count


async def closed(port: int) -> float:
    """Seconds until the worker has closed every stream whose page went (at most 60)."""
    started = time.perf_counter()
    for _tick in range(600):
        if connections(port) == 0:
            break
        await asyncio.sleep(0.1)
    return time.perf_counter() - started


def log_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.strip()]


async def stream_path(port: int) -> str:
    """The room's page seen once (by a first guest): the URL of its live widget's stream."""
    status, page = await request(port, "/room/", "10.0.0.1")
    if status != 200:
        raise RuntimeError(f"the room's page answered {status}")
    found = LIVE.search(page)
    if found is None:
        raise RuntimeError("the room's page has no live widget")
    query = html.unescape(found[1]).partition("?")[2]
    return f"/online/stream/?{urlencode([('widget', query)])}"


async def measure(
    port: int, pid: int, admin: redis.Redis, log: Path, args: argparse.Namespace
) -> list[str]:
    path = await stream_path(port)
    await asyncio.sleep(1.5)  # the first guest written and published
    rss_before = rss_bytes(pid)

    started = time.perf_counter()
    streams = await open_streams(port, path, args)
    opened_in = time.perf_counter() - started
    await asyncio.sleep(2)
    rss_after, open_connections = rss_bytes(pid), connections(port)

    progress(f"idle for {args.idle:g} s…")
    cpu_before, wall_before = servers.cpu_seconds([pid]), time.perf_counter()
    await asyncio.sleep(args.idle)
    idle_cpu = (servers.cpu_seconds([pid]) - cpu_before) / (time.perf_counter() - wall_before)
    channel, numsub, subscribed = subscribers(admin)

    rounds = await changes(port, pid, admin, streams, args.rounds)
    for stream in streams:
        stream.close()
    closed_in = await closed(port)
    return report(
        args,
        opened_in=opened_in,
        connections=(open_connections, connections(port), closed_in),
        warnings=log_lines(log),
        rss=(rss_before, rss_after),
        idle_cpu=idle_cpu,
        subscribers=(channel, numsub, subscribed),
        rounds=rounds,
    )


def report(
    args: argparse.Namespace,
    *,
    opened_in: float,
    connections: tuple[int, int, float],
    warnings: list[str],
    rss: tuple[int, int],
    idle_cpu: float,
    subscribers: tuple[str, int, int],
    rounds: Rounds,
) -> list[str]:
    mib = 1024 * 1024
    rows = [
        ["streams open on one uvicorn worker", f"{args.streams} (opened in {opened_in:.1f} s)"],
        ["worker RSS before / after", f"{rss[0] / mib:.1f} / {rss[1] / mib:.1f} MiB"],
        ["memory per stream", f"{(rss[1] - rss[0]) / args.streams / 1024:.1f} KiB"],
        [
            f"worker CPU, idle, all streams open ({args.idle:g} s)",
            f"{idle_cpu * 100:.2f} % of a core",
        ],
        [
            f"Redis: subscribers of `{subscribers[0]}` (`PUBSUB NUMSUB`) / connections "
            "subscribed to anything (`CLIENT LIST`)",
            f"{subscribers[1]} / {subscribers[2]}",
        ],
        [
            "PUBLISH per change (`INFO commandstats`), each round",
            ", ".join(map(str, rounds.published)),
        ],
        [
            "visit to the first stream's new state, each round",
            ", ".join(f"{first:.3f} s" for first in rounds.firsts),
        ],
        [
            "worker CPU from the visit until every stream had it, each round",
            ", ".join(f"{cpu:.2f} s" for cpu in rounds.cpu),
        ],
    ]
    if rounds.latencies:
        ordered = sorted(rounds.latencies)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        for label, value in (
            ("median", statistics.median(ordered)),
            ("p95", p95),
            ("max", ordered[-1]),
        ):
            rows.append(
                [
                    f"visit to state on every stream, {label} ({args.rounds} rounds)",
                    f"{value:.3f} s = {value / TARGET:.2f} × the 2 s target = "
                    f"{value / POLLING:.3f} × the 30 s polling",
                ]
            )
    rows.append(["stream-rounds that missed the change within 30 s", str(rounds.missed)])
    rows.append(
        [
            "worker's connections on its port: with the streams open / after the pages went",
            f"{connections[0]} / {connections[1]} ({connections[2]:.1f} s later)",
        ]
    )
    rows.append(["lines in the worker's log (warnings, errors)", str(len(warnings))])
    if warnings:
        progress("the worker's log:\n" + "\n".join(warnings[:20]))
    return [stats.table(["measure", "value"], rows)]


async def _main(args: argparse.Namespace) -> list[str]:
    with streams_worker() as (server, port, process, log):
        admin = redis.Redis.from_url(server.url)
        try:
            return await measure(port, process.pid, admin, log, args)
        finally:
            admin.close()


@contextlib.contextmanager
def streams_worker(
    *, migrate: str | None = None
) -> Iterator[tuple[RedisServer, int, subprocess.Popen[bytes], Path]]:
    """A throw-away redis-server and one uvicorn worker of the streams site on it (``migrate``,
    Python run first with the site's settings): the server, the worker's port, its process and
    its log."""
    with servers.redis_server() as server, tempfile.TemporaryDirectory() as directory:
        env = {
            **servers.site_env("throttled", server.url, Path(directory) / "db.sqlite3"),
            "DJANGO_SETTINGS_MODULE": "bench.streams_site",
        }
        if migrate is not None:
            subprocess.run([sys.executable, "-c", migrate], env=env, check=True)
        log = Path(directory) / "uvicorn.log"
        with wsgi_server.uvicorn(
            env, log, ready_path=servers.READY_PATH, workers=1, checkout=servers.ROOT
        ) as (port, process):
            if servers.children(process.pid):
                raise RuntimeError("uvicorn started workers: the worker is not its process")
            yield server, port, process, log


def require_open_files(parser: argparse.ArgumentParser, streams: int) -> None:
    """Raise the limit of open files for ``streams`` streams, or end with the reason."""
    limit = raise_open_files(streams + 1000)
    if limit < streams + 100:
        parser.error(f"{streams} streams need more open files than the limit ({limit})")


def print_report(
    title: str, module: str, argv: list[str] | None, tables: list[str], notes: list[str]
) -> None:
    """The tables as markdown under ``title``, the date and the command that printed them."""
    command = f"python3 scripts/dev.py bench {module} " + " ".join(argv or sys.argv[1:])
    print(f"#### {title} ({datetime.now(timezone.utc):%Y-%m-%d}, `{command.strip()}`)\n")
    print("\n\n".join(tables))
    if notes:
        print("\n" + "\n".join(f"- {note}" for note in notes))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--streams", type=int, default=STREAMS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--batch", type=int, default=BATCH, help="streams opened at once")
    parser.add_argument("--idle", type=float, default=IDLE, help="seconds of the idle window")
    args = parser.parse_args(argv)
    require_open_files(parser, args.streams)
    print_report("Live streams", "streams", argv, asyncio.run(_main(args)), [])
    return 0


if __name__ == "__main__":
    os.environ.pop("DJANGO_SETTINGS_MODULE", None)
    sys.exit(main())
