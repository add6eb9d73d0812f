"""Running a command of the tests in a process of its own (its output kept as text, its time
bounded so that a hung process fails the test rather than the run, its exit left to the test),
or a function in a forked child, as a server's worker starts."""

from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

#: The repository's root, where the tests' own processes start.
ROOT = Path(__file__).resolve().parents[2]


def run(
    command: Sequence[str], *, env: Mapping[str, str], cwd: Path = ROOT, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in ``cwd`` with ``env`` as its whole environment; the test reads its
    return code and output."""
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def load_env(redis_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a script on ``tests.load_settings`` and the Redis at ``redis_url``,
    whose ``FLUSH_INTERVAL`` is long enough that no flushing thread writes before it ends."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.load_settings",
        "REDIS_URL": redis_url,
        "WHOS_ONLINE_LOAD_DB": str(tmp_path / "unused.sqlite3"),
        "FLUSH_INTERVAL": "10",
    }


def in_a_fork(child: Callable[[], str]) -> tuple[str, int]:
    """What ``child`` returns when a forked child of this process runs it, and the child's exit
    code: the child starts with the parent's state as it is at the call."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns about forking with a thread running; the child exits at once.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.write(write_end, child().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    return report, os.waitstatus_to_exitcode(status)
