"""Throw-away servers on loopback, and what their processes spend.

redis-server comes from the pip package the tests use (``tests.support.redis_server``); the bench
site (``bench.site``, one variant per server) is served by gunicorn or uvicorn as the tests serve
theirs. CPU, memory and connections are read from Linux's ``/proc``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from tests.support import wsgi_server
from tests.support.redis_server import RedisServer, running

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

ROOT = Path(__file__).resolve().parents[2]
#: A path every variant answers without recording anyone (whos_online ignores static paths).
READY_PATH = "/static/ready"
#: The site's database made (sessions, auth), and ``bench`` users for logging in.
MIGRATE = (
    "import django; django.setup(); from django.core.management import call_command; "
    "call_command('migrate', verbosity=0)"
)

#: Django's ASGI application, and the same in ``whos_online.asgi.LiveStreams``, each noting its
#: worker's pauses (``bench.asgi``).
DJANGO_ASGI = "bench.asgi:django"
LIVE_STREAMS_ASGI = "bench.asgi:live_streams"
#: uvicorn's event loop and HTTP parser: asyncio's and h11 (pure Python), or uvloop and httptools
#: (C), which ``uvicorn[standard]`` installs and uvicorn then picks by itself.
UVICORN: dict[str, tuple[str, ...]] = {
    "h11": ("--loop", "asyncio", "--http", "h11"),
    "httptools": ("--loop", "uvloop", "--http", "httptools"),
}

redis_server = running
__all__ = ["ROOT", "Node", "RedisServer", "redis_server"]


def site_env(
    variant: str, redis_url: str, database: Path, *, checkout: Path = ROOT
) -> dict[str, str]:
    """The environment of a process of ``bench.site`` (whos_online from ``checkout``)."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.site",
        "WHOS_ONLINE_BENCH_VARIANT": variant,
        "WHOS_ONLINE_BENCH_DB": str(database),
        "REDIS_URL": redis_url,
        "PYTHONPATH": str(checkout),
    }


def temporary_directory() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="whos-online-bench-")


def checkouts(against: Path | None) -> dict[str, Path]:
    """This checkout, and another to compare with (``--against``), by label."""
    return {"this checkout": ROOT} | ({str(against): against.resolve()} if against else {})


def python(env: dict[str, str], code: str, cwd: Path = ROOT) -> None:
    subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, check=True, timeout=600)


@contextlib.contextmanager
def site(
    env: dict[str, str],
    log: Path,
    *,
    asgi: bool = False,
    workers: int = 2,
    factory: str = DJANGO_ASGI,
    http: str = "h11",
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Serve ``env``'s site with gunicorn's sync workers, or uvicorn's (``asgi``: the ASGI
    application ``factory`` makes, on ``UVICORN[http]``); with one uvicorn worker its process
    is the worker (no supervisor). Yields the port and the process."""
    checkout = Path(env["PYTHONPATH"])
    if not asgi:
        serving = wsgi_server.gunicorn(env, log, ready_path=READY_PATH, checkout=checkout)
    else:
        serving = wsgi_server.uvicorn(
            env,
            log,
            ready_path=READY_PATH,
            workers=workers,
            checkout=checkout,
            factory=factory,
            options=UVICORN[http],
        )
    with serving as (port, process):
        if asgi and workers == 1 and children(process.pid):
            raise RuntimeError("uvicorn started workers: the worker is not its process")
        yield port, process


@dataclass(frozen=True)
class Served:
    """A bench site served on its own redis-server: its port, process, Redis and log."""

    port: int
    pid: int
    node: Node
    server: RedisServer
    log: Path

    def log_lines(self) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if line.strip()]


@contextlib.contextmanager
def serving(
    variant: str,
    *,
    asgi: bool = False,
    workers: int = 2,
    factory: str = DJANGO_ASGI,
    http: str = "h11",
) -> Iterator[Served]:
    """A redis-server, and the bench site of ``variant`` on it with its database made."""
    with temporary_directory() as workdir, redis_server() as server:
        env = site_env(variant, server.url, Path(workdir) / "db.sqlite3")
        python(env, MIGRATE)
        log = Path(workdir) / "server.log"
        with site(env, log, asgi=asgi, workers=workers, factory=factory, http=http) as (
            port,
            process,
        ):
            yield Served(port, process.pid, Node.of(server), server, log)


def children(pid: int) -> list[int]:
    """The processes ``pid`` started, such as gunicorn's workers."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def threads_cpu(pids: Iterable[int]) -> float:
    """CPU seconds the live threads of ``pids`` have run, to the nanosecond (schedstat)."""
    total = 0
    for pid in pids:
        for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError):
                total += int(stat.read_text().split()[0])
    return total / 1e9


def process_cpu(pid: int) -> float:
    """CPU seconds of a whole process, threads that ended included (``utime`` + ``stime``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def connections(port: int) -> dict[int, tuple[str, int]]:
    """The server's side of each connection to ``port``, by the client's port: its TCP state
    (Linux's code: "01" established) and the bytes it holds unsent; not those closing."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, remote, state = fields[1], fields[2], fields[3]
                if int(local.rpartition(":")[2], 16) == port and state not in {"0A", "06", "07"}:
                    unsent = int(fields[4].split(":")[0], 16)
                    found[int(remote.rpartition(":")[2], 16)] = (state, unsent)
    return found


def raise_open_files(wanted: int) -> None:
    """Raise this process's soft limit of open files (its servers inherit it), or fail."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = hard if hard == resource.RLIM_INFINITY else min(hard, max(soft, wanted))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    if limit < wanted:
        raise RuntimeError(f"{wanted} open files wanted, the limit is {limit}")


@dataclass(frozen=True)
class Usage:
    """What a redis-server did over a phase: calls of a command and Redis's µs in them
    (``INFO commandstats``, a script's own commands apart), and the process's CPU µs."""

    calls: int
    command_us: float
    cpu_us: float


@dataclass(frozen=True)
class Node:
    """A redis-server whose work is measured: a client for INFO, and its process."""

    client: redis.Redis
    pid: int
    label: str = ""

    @classmethod
    def of(cls, server: RedisServer, label: str = "") -> Node:
        assert server.process is not None
        return cls(redis.Redis.from_url(server.url), server.process.pid, label)

    def cpu(self) -> float:
        return threads_cpu([self.pid])

    def commands(self) -> int:
        """Commands run so far; the INFO that asks counts once it has run."""
        return int(self.client.info("stats")["total_commands_processed"])

    def calls(self) -> dict[str, tuple[int, float]]:
        """(calls, µs) of each command run since the last reset (``INFO commandstats``)."""
        found = self.client.info("commandstats").items()
        return {k.removeprefix("cmdstat_"): (int(v["calls"]), float(v["usec"])) for k, v in found}

    def start(self) -> float:
        """Counts from zero; the CPU to give ``usage``."""
        self.client.config_resetstat()
        return self.cpu()

    def usage(self, cpu_before: float, command: str = "evalsha") -> Usage:
        calls, us = self.calls().get(command, (0, 0.0))
        return Usage(calls, us, (self.cpu() - cpu_before) * 1e6)

    def used_cpu(self) -> float:
        """CPU seconds Redis says it used (``INFO cpu``)."""
        found = self.client.info("cpu")
        return float(found["used_cpu_sys"]) + float(found["used_cpu_user"])

    def slowlog_on(self) -> None:
        """Log every command slower than 100 µs, from an empty log."""
        self.client.config_set("slowlog-log-slower-than", 100)
        self.client.config_set("slowlog-max-len", 100_000)
        self.client.slowlog_reset()

    def longest_command(self) -> float:
        """Seconds of the slowest command logged since the reset, the bench's own left out."""
        entries = self.client.slowlog_get(100_000)
        own = (b"SLOWLOG", b"CONFIG", b"INFO")
        durations = [
            int(e["duration"]) for e in entries if not e["command"].upper().startswith(own)
        ]
        return max(durations, default=0) / 1e6


def fill(client: redis.Redis, key: str, scored: Iterable[tuple[str, float]]) -> None:
    """ZADD the (member, score) pairs to ``key``, 10 000 a command: millions at once would block
    Redis, and be built whole in memory."""
    pairs = iter(scored)
    while batch := dict(itertools.islice(pairs, 10_000)):
        client.zadd(key, batch)


@contextlib.contextmanager
def stall_probe(port: int) -> Iterator[dict[str, float]]:
    """PING ``port`` every millisecond from a process of its own (not held up by the work it
    watches, as a thread would be by the GIL); the dict then holds the longest, ``max``."""
    command = [sys.executable, "-m", "bench.harness.probe", str(port)]
    process = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None
    assert process.stdout is not None
    found: dict[str, float] = {}
    try:
        if process.stdout.readline().strip() != b"ready":
            raise RuntimeError("the PING probe did not start")
        time.sleep(0.05)
        yield found
        time.sleep(0.05)
    finally:
        process.stdin.close()
        line = process.stdout.readline()
        process.wait(timeout=30)
    found.update(json.loads(line))
