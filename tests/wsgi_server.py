"""gunicorn serving a Django settings module on a free loopback port, for the load test and the
benchmarks. It runs in its own process group, which is stopped with its workers when the block
ends, however it ends."""

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

from tests.redis_server import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent


class GunicornError(RuntimeError):
    """gunicorn exited, or did not answer in time; the message ends with its log."""


@contextlib.contextmanager
def gunicorn(
    env: dict[str, str],
    log: Path,
    *,
    ready_path: str,
    workers: int = 2,
    threads: int = 1,
    checkout: Path = ROOT,
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Serve until the block ends; yields the port and the master process.

    One thread per worker means gunicorn's sync workers, more means its gthread workers.
    ``ready_path`` is requested until it answers; ``checkout`` is where the code is imported from.
    """
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        *(["--worker-class", "gthread", "--threads", str(threads)] if threads > 1 else []),
        "--graceful-timeout",
        "10",
        "--log-level",
        "warning",
        "--pythonpath",
        str(checkout),
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
        _wait_until_serving(process, port, log, ready_path)
        yield port, process
    finally:
        stop(process)


def _wait_until_serving(
    process: subprocess.Popen[bytes], port: int, log: Path, ready_path: str
) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            msg = f"gunicorn exited with {process.returncode}:\n{log.read_text()}"
            raise GunicornError(msg)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", ready_path)
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            connection.close()
        time.sleep(0.05)
    msg = f"gunicorn did not answer in 60 s:\n{log.read_text()}"
    raise GunicornError(msg)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group (a graceful stop: workers write their buffered hits), then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    # Workers left behind by a master that died first go too.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
