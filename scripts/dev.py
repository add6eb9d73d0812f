#!/usr/bin/env python3
"""One command from a fresh clone, with nothing but Python 3.10+: runs a nox session.

    python3 scripts/dev.py test [pytest arguments]    # nox -s tests
    python3 scripts/dev.py lint                       # nox -s lint
    python3 scripts/dev.py example [host:port]        # nox -s example
    python3 scripts/dev.py bench [bench arguments]    # nox -s bench
    python3 scripts/dev.py bench failover             # capacity, failover, outages: run alone
    python3 scripts/dev.py nox [nox arguments]        # anything else nox does

It installs nox and uv (the ``tools`` dependency group) into ``.venv-tools`` once, then hands
over to nox, which builds each session's environment under ``.nox/``. With nox installed already,
``nox -s tests`` and the rest do the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".venv-tools"
SESSIONS = {"test": "tests", "lint": "lint", "example": "example", "bench": "bench"}


def tools_python() -> Path:
    bin_dir = "Scripts" if os.name == "nt" else "bin"
    return TOOLS / bin_dir / ("python.exe" if os.name == "nt" else "python")


def ensure_tools() -> Path:
    python = tools_python()
    if not python.exists():
        venv.create(TOOLS, with_pip=True)
    if subprocess.run([python, "-c", "import nox"], capture_output=True, check=False).returncode:
        pyproject = ROOT / "pyproject.toml"
        # pip reads dependency groups from 25.1 on; older ones get the two names directly.
        subprocess.run([python, "-m", "pip", "install", "-q", "pip>=25.1"], check=True)
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "--group", f"{pyproject}:tools"], check=True
        )
    return python


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {*SESSIONS, "nox"}:
        print(__doc__, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    python = ensure_tools()
    nox = [str(python), "-m", "nox", "--noxfile", str(ROOT / "noxfile.py")]
    arguments = rest if command == "nox" else ["-s", SESSIONS[command], "--", *rest]
    return subprocess.call([*nox, *arguments], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
