"""Throw-away servers on loopback for the benchmarks: redis-server and gunicorn.

redis-server comes from the pip package the tests use (``tests.support.redis_server``); gunicorn
serves ``bench.site`` with two sync workers. Each runs in its own process group and is stopped, with
its workers, when its block ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support import wsgi_server
from tests.support.redis_server import running

if TYPE_CHECKING:
    import subprocess

ROOT = Path(__file__).resolve().parent.parent
#: A path every variant answers without recording anyone (whos_online ignores static paths).
READY_PATH = "/static/ready"


#: A redis-server on a free port for the block's duration.
redis_server = running


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


def gunicorn(
    env: dict[str, str], log: Path
) -> contextlib.AbstractContextManager[tuple[int, subprocess.Popen[bytes]]]:
    """Serve ``bench.site`` with two sync workers from the checkout in ``env["PYTHONPATH"]``;
    the block gets the port and the master process."""
    return wsgi_server.gunicorn(env, log, ready_path=READY_PATH, checkout=Path(env["PYTHONPATH"]))


def uvicorn(
    env: dict[str, str], log: Path
) -> contextlib.AbstractContextManager[tuple[int, subprocess.Popen[bytes]]]:
    """Serve ``bench.site`` as ASGI with uvicorn, two workers, like ``gunicorn``."""
    return wsgi_server.uvicorn(
        env, log, ready_path=READY_PATH, workers=2, checkout=Path(env["PYTHONPATH"])
    )


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
