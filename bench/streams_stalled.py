"""Live streams whose clients stop reading: the worker's memory over minutes, and when the
server ends each stream.

ONE uvicorn process, its streams lasting ``stream_seconds`` (``ROOM_TOKEN_MAX_AGE``) and bound
to 30 s per send; ``stalled`` streams never read, on the smallest receive buffers Linux gives:
half show 32 widgets (states of about 20 KB, which fill what the kernel holds within minutes:
the server's send waits, and the stream ends at the bound), half one widget (ended at their
end time); one stream read throughout as a control; a new guest's page view every second.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Final
from unittest import mock
from urllib.parse import urlencode

from django.test import override_settings

from bench import internals as whos
from bench.harness import servers
from bench.harness.clients import Browser, address
from bench.harness.report import Section, progress, table
from bench.site import BY_NAME, whos_online_settings

#: Widgets of a stream meant to fill what the kernel holds for it.
WIDGETS: Final = 32
#: What uvicorn logs for each response the application ended before its end.
CUT: Final = "ASGI callable returned without completing response."


@dataclass(frozen=True)
class Options:
    stalled: int = 20
    minutes: float = 5.0
    #: Seconds between samples, and how long a stream lasts (at least 60).
    every: float = 5.0
    stream_seconds: int = 240


QUICK = Options(stalled=4, minutes=0.3, every=2.0, stream_seconds=60)


def stream(port: int, widgets: int, receive_buffer: int = 0) -> socket.socket:
    """A stream of ``widgets`` different site widgets (their queries differ by interval)."""
    with override_settings(WHOS_ONLINE=whos_online_settings(BY_NAME["streams"])):
        queries = [
            whos.widget.WidgetOptions(peak=False, visitors=False, refresh=30 + n).query(None)
            for n in range(widgets)
        ]
    connection = socket.socket()
    if receive_buffer:
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    connection.connect(("127.0.0.1", port))
    path = "/online/stream/?" + urlencode([("widget", query) for query in queries])
    connection.sendall(f"GET {path} HTTP/1.0\r\nAccept: text/event-stream\r\n\r\n".encode())
    return connection


@dataclass
class Control:
    """A stream read throughout: what it received, and when its end came."""

    connection: socket.socket
    opened: float = field(default_factory=time.monotonic)
    ended_after: float | None = None
    received: bytes = b""

    def read(self) -> None:
        while chunk := self.connection.recv(1 << 16):
            self.received += chunk
        self.ended_after = time.monotonic() - self.opened


def drained(connection: socket.socket) -> bool:
    """Read what was buffered; whether the response had ended (the worker closed it)."""
    connection.settimeout(10)
    with contextlib.suppress(TimeoutError):
        while connection.recv(1 << 20):
            pass
        return True
    return False


def measure(site: servers.Served, options: Options) -> list[list[str]]:
    control = Control(stream(site.port, 1))
    threading.Thread(target=control.read, daemon=True).start()
    stalled = [
        stream(site.port, WIDGETS if n < options.stalled // 2 else 1, 4096)
        for n in range(options.stalled)
    ]
    clients, released, samples = {c.getsockname()[1]: c for c in stalled}, dict[int, float](), []
    opened, changes, next_sample = time.monotonic(), 0, time.monotonic()
    while (elapsed := time.monotonic() - opened) < options.minutes * 60:
        changes += 1
        Browser(address(changes, "10.2")).visit(site.port)
        if time.monotonic() >= next_sample:
            next_sample += options.every
            sides = servers.connections(site.port)
            released |= {
                c: elapsed for c in clients if sides.get(c, ("",))[0] != "01" and c not in released
            }
            mine = [sides[c] for c in clients if c in sides]
            established, unsent = (
                sum(1 for state, _ in mine if state == "01"),
                max((u for _, u in mine), default=0),
            )
            samples.append(
                (
                    elapsed,
                    servers.rss(site.pid),
                    established,
                    unsent,
                    site.log.read_text().count(CUT),
                )
            )
            progress(f"{elapsed:.0f} s: {samples[-1]}")
        time.sleep(max(0.0, opened + changes - time.monotonic()))
    over = sum(1 for connection in stalled if drained(connection))
    states = [len(block) for block in control.received.split(b"\n\n") if block.startswith(b"data:")]
    return report(
        samples,
        [released[c] for c in clients if c in released],
        over=over,
        control=control,
        state=max(states, default=0),
        options=options,
    )


def report(
    samples: list[tuple[float, int, int, int, int]],
    released: list[float],
    *,
    over: int,
    control: Control,
    state: int,
    options: Options,
) -> list[list[str]]:
    mib, rss = 1024 * 1024, [sample[1] for sample in samples]
    minute, last = min(samples, key=lambda sample: abs(sample[0] - 60))[1], samples[-1]
    cut_at = [sample[0] for sample in samples if sample[4]]
    half = options.stalled // 2
    return [
        [
            "stalled streams (32 widgets / 1 widget)",
            f"{half} / {options.stalled - half}, a change a second, {options.minutes:g} min",
        ],
        [
            "worker RSS after 1 min / at the end",
            f"{minute / mib:.1f} / {last[1] / mib:.1f} MiB ({(last[1] / minute - 1) * 100:+.1f} %)",
        ],
        ["worker RSS, lowest / highest sample", f"{min(rss) / mib:.1f} / {max(rss) / mib:.1f} MiB"],
        [
            "most the kernel held unsent for one stalled connection",
            f"{max(sample[3] for sample in samples) / 1024:.0f} KiB",
        ],
        [
            "streams ended at the send bound (uvicorn's line each)",
            f"{last[4]}" + (f", the first {cut_at[0]:.0f} s after opening" if cut_at else ""),
        ],
        [
            "streams ended at their end time and closed by the worker",
            f"{len(released)}"
            + (f", {min(released):.0f}–{max(released):.0f} s after opening" if released else ""),
        ],
        [
            "stalled clients that, reading at last, found their response over",
            f"{over} of {options.stalled}",
        ],
        [
            "control stream (read throughout): its end came after",
            "never" if control.ended_after is None else f"{control.ended_after:.1f} s",
        ],
        ["largest state sent to the control stream (1 widget)", f"{state} bytes"],
    ]


def run(options: Options) -> Section:
    with (
        mock.patch.dict(os.environ, WHOS_ONLINE_BENCH_STREAM_SECONDS=str(options.stream_seconds)),
        servers.serving("streams", asgi=True, workers=1) as site,
    ):
        rows = measure(site, options)
    return Section("Stalled live streams", "", [table("measure | value", rows)])
