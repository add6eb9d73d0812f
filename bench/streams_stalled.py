"""Live streams whose clients stop reading: the worker's memory over minutes, and when the server
ends each stream.

Run from the repository root: ``python3 scripts/dev.py bench streams_stalled`` (``--help`` for
the options; ``--minutes`` bounds its time).

A real redis-server and ONE uvicorn process (no supervisor) serving ``bench.streams_site``, its
streams lasting ``--stream-seconds`` (``ROOM_TOKEN_MAX_AGE``), the send bound at its default
(30 s). This process opens ``--stalled`` streams that it never reads, on sockets with as small a
receive buffer as Linux gives: half of them show 32 different site widgets (a state of about
20 KB), enough to fill what the kernel holds for them within minutes, after which the server's
``send`` waits and the stream is ended at the send bound; the other half show one widget, whose
states never fill it, and are ended at their end time. One stream of one widget is read
throughout, as a control. A page view by a new guest each second changes every stream's state.

Every ``--every`` seconds it samples the worker's resident memory, what the kernel holds unsent
for each stalled connection, whether the worker still holds it open, and how many responses
uvicorn says the application ended before their end (``ASGI callable returned without completing
response``, one per stream ended at the bound). At the end each stalled client reads what was
buffered for it, and the benchmark counts those whose response had ended.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlencode

from bench import stats, streams

STALLED: Final = 20
MINUTES: Final = 5.0
STREAM_SECONDS: Final = 240
EVERY: Final = 5.0
#: Widgets of a stream meant to fill what the kernel holds for it (the most a stream takes).
WIDGETS: Final = 32
CUT: Final = "ASGI callable returned without completing response."


def stream_path(widgets: int) -> str:
    """The stream of ``widgets`` different site widgets (their queries differ by interval)."""
    from whos_online.live.widget import widget_query

    queries = [
        widget_query(None, peak=False, visitors=False, refresh=30 + number)
        for number in range(widgets)
    ]
    return "/online/stream/?" + urlencode([("widget", query) for query in queries])


def open_stream(port: int, path: str, *, receive_buffer: int = 0) -> socket.socket:
    connection = socket.socket()
    if receive_buffer:
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    connection.connect(("127.0.0.1", port))
    connection.sendall(
        f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    return connection


def server_sides(port: int) -> dict[int, tuple[str, int]]:
    """The worker's side of each connection to ``port``, by the client's port: its TCP state
    (Linux's hexadecimal code, "01" for established) and the bytes it holds unsent."""
    found = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state = fields[1], fields[2], fields[3]
        if int(local.rpartition(":")[2], 16) == port and state != "0A":
            found[int(remote.rpartition(":")[2], 16)] = (state, int(fields[4].split(":")[0], 16))
    return found


def page_view(port: int, number: int) -> None:
    """The page at ``/`` by a new guest: a change of every stream's state."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    address = f"10.2.{number >> 8 & 255}.{number & 255}"
    try:
        connection.request("GET", "/", headers={"X-Forwarded-For": address})
        connection.getresponse().read()
    finally:
        connection.close()


class Control:
    """A stream read throughout: when its end came."""

    def __init__(self, port: int) -> None:
        self.connection = open_stream(port, stream_path(1))
        self.opened = time.monotonic()
        self.ended_after: float | None = None
        self.received = b""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while chunk := self.connection.recv(1 << 16):
            self.received += chunk
        self.ended_after = time.monotonic() - self.opened


@dataclass
class Sample:
    at: float
    rss: int
    #: Stalled connections the worker still holds established, and the most it holds unsent.
    established: int
    unsent: int
    cut: int


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)
    #: Per stalled stream: seconds from its opening until the worker no longer held it
    #: established (ended at its end time), None if it still did.
    released_after: list[float | None] = field(default_factory=list)
    #: Stalled clients that, reading at last, found their response over.
    over: int = 0
    state_bytes: int = 0


def drained(connection: socket.socket) -> bool:
    """Read what was buffered; whether the response had ended (the worker closed it)."""
    connection.settimeout(10)
    with contextlib.suppress(TimeoutError):
        while connection.recv(1 << 20):
            pass
        return True
    return False


def measure(port: int, pid: int, log: Path, args: argparse.Namespace) -> tuple[Run, Control]:
    run = Run()
    control = Control(port)
    half = args.stalled // 2
    stalled = [
        open_stream(port, stream_path(WIDGETS if n < half else 1), receive_buffer=4096)
        for n in range(args.stalled)
    ]
    opened = time.monotonic()
    clients = {connection.getsockname()[1]: connection for connection in stalled}
    released: dict[int, float] = {}
    changes, next_sample = 0, opened
    while (elapsed := time.monotonic() - opened) < args.minutes * 60:
        changes += 1
        page_view(port, changes)
        if time.monotonic() >= next_sample:
            next_sample += args.every
            sides = server_sides(port)
            for client in clients:
                if sides.get(client, ("", 0))[0] != "01":
                    released.setdefault(client, elapsed)
            mine = [sides[client] for client in clients if client in sides]
            run.samples.append(
                Sample(
                    at=elapsed,
                    rss=streams.rss_bytes(pid),
                    established=sum(1 for state, _ in mine if state == "01"),
                    unsent=max((unsent for _, unsent in mine), default=0),
                    cut=log.read_text().count(CUT),
                )
            )
            streams.progress(f"{elapsed:.0f} s: {run.samples[-1]}")
        time.sleep(max(0.0, opened + changes - time.monotonic()))
    run.released_after = [released.get(client) for client in clients]
    run.over = sum(1 for connection in stalled if drained(connection))
    run.state_bytes = max(
        (len(block) for block in control.received.split(b"\n\n") if block.startswith(b"data:")),
        default=0,
    )
    return run, control


def nearest(samples: list[Sample], at: float) -> Sample:
    return min(samples, key=lambda sample: abs(sample.at - at))


def report(run: Run, control: Control, args: argparse.Namespace) -> list[str]:
    mib = 1024 * 1024
    minute, last = nearest(run.samples, 60), run.samples[-1]
    cut_at = [sample.at for sample in run.samples if sample.cut]
    released = [after for after in run.released_after if after is not None]
    rss = [sample.rss for sample in run.samples]
    rows = [
        [
            "stalled streams (32 widgets / 1 widget)",
            f"{args.stalled // 2} / {args.stalled - args.stalled // 2}, a change a second, "
            f"{args.minutes:g} min",
        ],
        [
            "worker RSS after 1 min / at the end",
            f"{minute.rss / mib:.1f} / {last.rss / mib:.1f} "
            f"MiB ({(last.rss / minute.rss - 1) * 100:+.1f} %)",
        ],
        [
            "worker RSS, lowest / highest sample",
            f"{min(rss) / mib:.1f} / {max(rss) / mib:.1f} MiB",
        ],
        [
            "most the kernel held unsent for one stalled connection",
            f"{max(s.unsent for s in run.samples) / 1024:.0f} KiB",
        ],
        [
            "streams ended at the send bound (uvicorn's line each)",
            f"{last.cut}" + (f", the first {cut_at[0]:.0f} s after opening" if cut_at else ""),
        ],
        [
            "streams ended at their end time and closed by the worker",
            f"{len(released)}"
            + (f", {min(released):.0f}–{max(released):.0f} s after opening" if released else ""),
        ],
        [
            "stalled clients that, reading at last, found their response over",
            f"{run.over} of {args.stalled}",
        ],
        [
            "control stream (read throughout): its end came after",
            "never" if control.ended_after is None else f"{control.ended_after:.1f} s",
        ],
        ["largest state sent to the control stream (1 widget)", f"{run.state_bytes} bytes"],
    ]
    return [stats.table(["measure", "value"], rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--stalled", type=int, default=STALLED)
    parser.add_argument("--minutes", type=float, default=MINUTES)
    parser.add_argument("--every", type=float, default=EVERY, help="seconds between samples")
    parser.add_argument(
        "--stream-seconds",
        type=int,
        default=STREAM_SECONDS,
        help="how long a stream lasts (ROOM_TOKEN_MAX_AGE, at least 60)",
    )
    args = parser.parse_args(argv)
    os.environ["WHOS_ONLINE_BENCH_STREAM_SECONDS"] = str(args.stream_seconds)
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.streams_site"
    import django

    django.setup()
    with streams.streams_worker() as (_server, port, process, log):
        run, control = measure(port, process.pid, log, args)
    streams.print_report(
        "Stalled live streams", "streams_stalled", argv, report(run, control, args), []
    )
    return 0


if __name__ == "__main__":
    os.environ.pop("DJANGO_SETTINGS_MODULE", None)
    sys.exit(main())
