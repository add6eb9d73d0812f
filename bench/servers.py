"""Throw-away servers on loopback for the benchmarks: redis-server and gunicorn.

redis-server comes from the pip package the tests use (``tests.redis_server``); gunicorn serves
``bench.site`` with two sync workers. Each runs in its own process group and is stopped, with its
workers, when its block ends, however it ends.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tests.redis_server import RedisServer, free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent
#: A path every variant answers at once without recording anyone (whos_online ignores static).
READY_PATH = "/static/ready"


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


def site_env(
    variant: str, redis_url: str, database: Path, *, checkout: Path = ROOT
) -> dict[str, str]:
    """The environment of a site that serves ``bench.site`` (and whos_online) from ``checkout``."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.site",
        "WHOS_ONLINE_BENCH_VARIANT": variant,
        "WHOS_ONLINE_BENCH_DB": str(database),
        "REDIS_URL": redis_url,
        "PYTHONPATH": str(checkout),
    }


@contextlib.contextmanager
def gunicorn(
    env: dict[str, str], log: Path, *, workers: int = 2
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Serve ``bench.site`` with sync workers on a free port; yields the port and the master."""
    checkout = env["PYTHONPATH"]
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--worker-class",
        "sync",
        "--log-level",
        "warning",
        "--pythonpath",
        checkout,
        "django.core.wsgi:get_wsgi_application()",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=checkout,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_until_serving(process, port, log)
        yield port, process
    finally:
        _stop_group(process)


def _wait_until_serving(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            msg = f"gunicorn exited with {process.returncode}:\n{log.read_text()}"
            raise RuntimeError(msg)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", READY_PATH)
            connection.getresponse().read()
            return
        except OSError:
            time.sleep(0.05)
        finally:
            connection.close()
    msg = f"gunicorn did not answer in 60 s:\n{log.read_text()}"
    raise RuntimeError(msg)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux), such as gunicorn's workers."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()]


def cpu_seconds(pids: list[int]) -> float:
    """CPU time the live threads of ``pids`` have run, in nanosecond precision (Linux)."""
    total = 0
    for pid in pids:
        for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError):
                total += int(stat.read_text().split()[0])
    return total / 1e9
