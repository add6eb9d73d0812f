"""gunicorn (WSGI) or uvicorn (ASGI) serving a Django settings module on a free loopback port, for
the load test, the ASGI tests and the benchmarks, and Django's runserver for the example site's
browser tests. The server runs in its own process group, which is stopped with its workers when
the block ends, however it ends."""

from __future__ import annotations

import contextlib
import http.client
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.redis_server import free_port

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ROOT = Path(__file__).resolve().parents[2]


class GunicornError(RuntimeError):
    """The server (gunicorn or uvicorn) exited, or did not answer in time; the message ends with
    its log."""


@contextlib.contextmanager
def gunicorn(
    env: dict[str, str],
    log: Path,
    *,
    ready_path: str,
    workers: int = 2,
    threads: int = 1,
    worker_class: str = "",
    preload: bool = False,
    checkout: Path = ROOT,
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Serve until the block ends; yields the port and the master process.

    One thread per worker means gunicorn's sync workers, more means its gthread workers;
    ``worker_class`` names another kind ("gevent"). ``preload`` loads the site in the master,
    before it forks the workers. ``ready_path`` is requested until it answers; ``checkout`` is
    where the code is imported from.
    """
    if not worker_class:
        worker_class = "gthread" if threads > 1 else "sync"
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
        worker_class,
        *(["--threads", str(threads)] if threads > 1 else []),
        *(["--preload"] if preload else []),
        "--graceful-timeout",
        "10",
        "--log-level",
        "warning",
        "--pythonpath",
        str(checkout),
        "django.core.wsgi:get_wsgi_application()",
    ]
    with _serving(command, env, log, port=port, ready_path=ready_path, cwd=checkout) as process:
        yield port, process


@contextlib.contextmanager
def uvicorn(
    env: dict[str, str],
    log: Path,
    *,
    ready_path: str,
    workers: int = 1,
    checkout: Path = ROOT,
    factory: str = "django.core.asgi:get_asgi_application",
    log_level: str = "warning",
    open_files: int | None = None,
    options: tuple[str, ...] = (),
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Serve Django's ASGI application (or the one ``factory`` returns) with uvicorn until the
    block ends (see ``gunicorn``); ``open_files`` lowers the server's soft limit of open files,
    ``options`` go to uvicorn as they are."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--log-level",
        log_level,
        "--no-access-log",
        "--app-dir",
        str(checkout),
        *options,
        "--factory",
        factory,
    ]
    with _serving(
        command,
        env,
        log,
        port=port,
        ready_path=ready_path,
        cwd=checkout,
        limit=None if open_files is None else _open_files_limit(open_files),
    ) as process:
        yield port, process


def _open_files_limit(soft: int) -> Callable[[], None]:
    def limit() -> None:
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return limit


@contextlib.contextmanager
def runserver(
    env: dict[str, str], log: Path, *, ready_path: str, checkout: Path = ROOT
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Serve ``manage.py``'s site with Django's development server, which also serves the static
    files while ``DEBUG`` is on, until the block ends (see ``gunicorn``)."""
    port = free_port()
    command = [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]
    with _serving(command, env, log, port=port, ready_path=ready_path, cwd=checkout) as process:
        yield port, process


@contextlib.contextmanager
def _serving(
    command: list[str],
    env: dict[str, str],
    log: Path,
    *,
    port: int,
    ready_path: str,
    cwd: Path,
    limit: Callable[[], None] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=limit,  # noqa: PLW1509 - setrlimit only, in the child
        )
    try:
        _wait_until_serving(process, port, log, ready_path)
        yield process
    finally:
        stop(process)


def server_name(process: subprocess.Popen[bytes]) -> str:
    """ "gunicorn" or "uvicorn": the module that ``python -m`` ran."""
    args = process.args
    return str(args[2]) if isinstance(args, list) else "the server"


def _wait_until_serving(
    process: subprocess.Popen[bytes], port: int, log: Path, ready_path: str
) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            msg = f"{server_name(process)} exited with {process.returncode}:\n{log.read_text()}"
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
    msg = f"{server_name(process)} did not answer in 60 s:\n{log.read_text()}"
    raise GunicornError(msg)


def stop(process: subprocess.Popen[bytes]) -> None:
    """A graceful stop, in which workers write their buffered hits, then SIGKILL to the group.

    gunicorn's workers take SIGTERM from the group as well as from their master; uvicorn's are
    stopped by their supervisor alone, since a second SIGTERM makes them exit at once."""
    with contextlib.suppress(ProcessLookupError):
        if server_name(process) == "uvicorn":
            process.send_signal(signal.SIGTERM)
        else:
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
