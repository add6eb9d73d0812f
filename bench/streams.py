"""What open live streams cost one uvicorn worker, and how soon a change reaches them, served by
Django's response and by ``whos_online.asgi.LiveStreams``, one after the other.

ONE uvicorn process (no supervisor) serves the bench site's room with its live widget; this
process opens ``streams`` streams of it on raw asyncio sockets, then measures the worker's memory
and idle CPU, what Redis sees (subscribers, PUBLISH per change) and, over ``rounds`` changes (a
new guest entering the room), the time until every stream has the new state and the worker's
CPU for it. Meanwhile a cheap request every 50 ms measures the longest answer; after every page
has gone at once, one more says how soon the worker answers again. The streams are read on the
same cores as the worker: the times are an upper bound of the worker's. The worker notes its
own pauses (``bench.asgi``): when its event loop ran late, and its collector's full passes.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from bench import asgi
from bench.harness import servers
from bench.harness.clients import address, closed, open_streams, page, stream_path
from bench.harness.report import Section, table
from bench.harness.rounds import percentile

if TYPE_CHECKING:
    from bench.harness.clients import Stream

TARGET: Final = 2.0
POLLING: Final = 30.0
#: Seconds between two requests of the pause probe.
PROBE_EVERY: Final = 0.05
#: The applications compared, by the column that reports each.
APPLICATIONS: Final = {
    "Django's response": servers.DJANGO_ASGI,
    "`LiveStreams`": servers.LIVE_STREAMS_ASGI,
}


@dataclass(frozen=True)
class Options:
    streams: int = 10_000
    rounds: int = 5
    #: Streams opened at once, and seconds of the idle window.
    batch: int = 200
    idle: float = 10.0
    #: uvicorn's loop and parser (``servers.UVICORN``): h11, or httptools (with uvloop).
    http: str = "h11"


QUICK = Options(streams=200, rounds=2, idle=1.0)


def subscribers(site: servers.Served) -> list[object]:
    """The channel the worker subscribed to, its subscribers (``PUBSUB NUMSUB``), and the
    connections subscribed to anything (``CLIENT LIST``)."""
    client = site.node.client
    [channel] = [
        name.decode() if isinstance(name, bytes) else name for name in client.pubsub_channels()
    ]
    numsub = dict(client.pubsub_numsub(channel))
    subscribed = sum(1 for found in client.client_list() if int(found.get("sub", 0)) > 0)
    return [channel, next(iter(numsub.values())), subscribed]


Round = tuple[list[float | None], int, float]


async def change(site: servers.Served, streams: list[Stream], number: int) -> Round:
    """A new guest enters the room: when each stream had the new count (None: not in 30 s),
    the PUBLISHes, the first stream's delay, and the worker's CPU until every stream had it."""
    published, cpu, sent = (
        site.node.calls().get("publish", (0, 0))[0],
        servers.process_cpu(site.pid),
        time.perf_counter(),
    )
    status, _body = await page(site.port, "/room/", address(number, "10.1"))
    if status != 200:
        raise RuntimeError(f"the room's page answered {status}")
    waiting = streams
    while waiting and time.perf_counter() < sent + POLLING:
        await asyncio.sleep(0.1)
        waiting = [stream for stream in waiting if stream.arrived(number + 2, sent) is None]
    spent = servers.process_cpu(site.pid) - cpu
    await asyncio.sleep(1.5)  # a publish coalesced late would still count
    arrived = [stream.arrived(number + 2, sent) for stream in streams]
    publishes = site.node.calls().get("publish", (0, 0))[0] - published
    return [None if at is None else at - sent for at in arrived], publishes, spent


async def answered_in(port: int) -> float:
    """Seconds the worker takes to answer a request that does nothing (a static path)."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {servers.READY_PATH} HTTP/1.0\r\n\r\n".encode())
    await reader.read()
    writer.close()
    return time.perf_counter() - started


async def longest_pause(port: int, stop: asyncio.Event) -> float:
    """The longest a request took until ``stop``, one every ``PROBE_EVERY`` seconds."""
    longest = 0.0
    while not stop.is_set():
        longest = max(longest, await answered_in(port))
        await asyncio.sleep(PROBE_EVERY)
    return longest


async def measure(site: servers.Served, options: Options) -> list[tuple[str, str]]:
    path = await stream_path(site.port)
    await asyncio.sleep(1.5)  # the first guest written and published
    rss, started = servers.rss(site.pid), time.perf_counter()
    phases = [time.time()]
    streams = await open_streams(site.port, path, options.streams, options.batch)
    opened = time.perf_counter() - started
    phases.append(time.time())
    await asyncio.sleep(2)
    rss_after, connected = servers.rss(site.pid), len(servers.connections(site.port))
    cpu, started = servers.process_cpu(site.pid), time.perf_counter()
    await asyncio.sleep(options.idle)
    idle = (servers.process_cpu(site.pid) - cpu) / (time.perf_counter() - started)
    subscribers_seen = subscribers(site)
    stop = asyncio.Event()
    probe = asyncio.ensure_future(longest_pause(site.port, stop))
    rounds = [await change(site, streams, number) for number in range(options.rounds)]
    stop.set()
    pause = await probe
    phases.append(time.time())
    for stream in streams:
        stream.close()
    await asyncio.sleep(PROBE_EVERY)
    again = await answered_in(site.port)
    closing = await closed(site.port)
    await asyncio.sleep(2)  # a pause under way, and ``LiveStreams``' thaw (a second later)
    phases.append(time.time())
    memory = (rss, rss_after, opened, connected, closing)
    pauses = (pause, again)
    return report(
        site,
        options,
        memory,
        idle=idle,
        subscribed=subscribers_seen,
        rounds=rounds,
        pauses=pauses,
        noted=worker_pauses(site, phases),
    )


def worker_pauses(site: servers.Served, phases: list[float]) -> list[tuple[str, str]]:
    """The worker's longest pause and its collector's full passes, in each phase: while the
    streams opened, while they were open (idle, then the rounds), as they all went."""
    noted = list(asgi.pauses(site.log.parent))
    late, passes = [], []
    for start, end in itertools.pairwise(phases):
        within = [pause for pause in noted if start <= pause.ended < end]
        late.append(max((p.seconds for p in within if p.kind == "late"), default=0.0))
        full = [p.seconds for p in within if p.kind == "collection"]
        passes.append(f"{len(full)}, {max(full, default=0.0):.3f} s")
    return [
        (
            "the worker's longest pause (its event loop late, as it noted), while the streams "
            "opened / while they were open / as they all went",
            " / ".join(f"{one:.3f} s" for one in late),
        ),
        (
            "full passes of the garbage collector (how many, the longest), in the same phases",
            " / ".join(passes),
        ),
    ]


def report(
    site: servers.Served,
    options: Options,
    memory: tuple[int, int, float, int, float],
    *,
    idle: float,
    subscribed: list[object],
    rounds: list[Round],
    pauses: tuple[float, float],
    noted: list[tuple[str, str]],
) -> list[tuple[str, str]]:
    """Each measure of one application, and its value (``noted``: the worker's own pauses)."""
    (rss, rss_after, opened, connected, closing), mib = memory, 1024 * 1024
    return [
        ("streams open on one uvicorn worker", f"{options.streams} (opened in {opened:.1f} s)"),
        ("worker RSS before / after", f"{rss / mib:.1f} / {rss_after / mib:.1f} MiB"),
        ("memory per stream", f"{(rss_after - rss) / options.streams / 1024:.1f} KiB"),
        (
            f"worker CPU, idle, all streams open ({options.idle:g} s)",
            f"{idle * 100:.2f} % of a core",
        ),
        (
            "Redis: subscribers of the changes' channel (`PUBSUB NUMSUB`) / connections "
            "subscribed to anything (`CLIENT LIST`)",
            f"{subscribed[1]} / {subscribed[2]}",
        ),
        *round_rows(options, rounds),
        (
            f"longest answer to a request (one every {PROBE_EVERY * 1000:.0f} ms) during the "
            "rounds",
            f"{pauses[0]:.3f} s",
        ),
        ("every page gone at once: the worker's next answer took", f"{pauses[1]:.2f} s"),
        *noted,
        (
            "worker's connections on its port: with the streams open / after the pages went",
            f"{connected} / {len(servers.connections(site.port))} ({closing:.1f} s later)",
        ),
        ("lines in the worker's log (warnings, errors)", str(len(site.log_lines()))),
    ]


def round_rows(options: Options, rounds: list[Round]) -> list[tuple[str, str]]:
    """What the rounds measured: Redis's publishes, the times to the first stream and to every
    stream, the worker's CPU."""
    latencies = [at for found in rounds for at in found[0] if at is not None] or [0.0]
    firsts = [min((at for at in found[0] if at is not None), default=0) for found in rounds]
    spreads = {"median": statistics.median(latencies), "p95": percentile(latencies, 0.95)}
    per_stream = [found[2] / options.streams * 1e6 for found in rounds]
    return [
        (
            "PUBLISH per change (`INFO commandstats`), each round",
            ", ".join(str(r[1]) for r in rounds),
        ),
        (
            "visit to the first stream's new state, each round",
            ", ".join(f"{a:.3f} s" for a in firsts),
        ),
        (
            "worker CPU from the visit until every stream had it, each round",
            ", ".join(f"{found[2]:.2f} s" for found in rounds),
        ),
        (
            "worker CPU per stream per change, median",
            f"{statistics.median(per_stream):.1f} µs (rounds: "
            + ", ".join(f"{one:.0f}" for one in per_stream)
            + ")",
        ),
        *(
            (
                f"visit to state on every stream, {label} ({options.rounds} rounds)",
                f"{value:.3f} s = {value / TARGET:.2f} × the 2 s target = "
                f"{value / POLLING:.3f} × the 30 s polling",
            )
            for label, value in (*spreads.items(), ("max", max(latencies)))
        ),
        (
            "stream-rounds that missed the change within 30 s",
            str(sum(1 for found in rounds for at in found[0] if at is None)),
        ),
    ]


def run(options: Options) -> Section:
    servers.raise_open_files(options.streams + 1000)
    columns = []
    for factory in APPLICATIONS.values():
        with servers.serving(
            "streams", asgi=True, workers=1, factory=factory, http=options.http
        ) as site:
            columns.append(asyncio.run(measure(site, options)))
    # Each row: its measure (the same in every column), then each application's value.
    rows = [[pairs[0][0], *(value for _, value in pairs)] for pairs in zip(*columns, strict=True)]
    return Section("Live streams", "", [table(" | ".join(["measure", *APPLICATIONS]), rows)])
