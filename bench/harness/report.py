"""What a bench hands back and how it prints: a markdown section under the command and the date
that produced it, figures formatted alike across benches, and the targets' verdicts."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence


@dataclass(frozen=True)
class Target:
    goal: str
    measured: str
    met: bool


@dataclass
class Section:
    title: str
    intro: str = ""
    tables: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)

    def markdown(self, command: str = "") -> str:
        """The section; ``command`` (what printed it) opens its first paragraph, dated."""
        opening = f"`{command}`, on {today()}. " if command else ""
        notes = "\n".join(f"- {note}" for note in self.notes)
        parts = [f"#### {self.title}", opening + self.intro, *self.tables, notes]
        return "\n\n".join(part.strip() for part in parts if part.strip())


def table(header: str, rows: Iterable[Sequence[object]]) -> str:
    """A markdown table; ``header`` names its columns, separated by " | "."""
    names = header.split(" | ")
    lines = ["| " + " | ".join(names) + " |", "|" + " --- |" * len(names)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def targets_table(targets: Sequence[Target]) -> str:
    rows = [[t.goal, t.measured, "met" if t.met else "**not met**"] for t in targets]
    return "#### Targets\n\n" + table("target | measured | ", rows)


def progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


# Figures, formatted alike everywhere.


def fixed(decimals: int) -> Callable[[float], str]:
    return lambda value: f"{value:.{decimals}f}"


ratio = fixed(2)


def number(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f}"


def people(count: float) -> str:
    if math.isinf(count):
        return "∞"
    return f"{count / 1e6:.1f} M" if count >= 1e6 else f"{count / 1e3:.0f} k"


# The machine, for the run's first line.


def today() -> str:
    return f"{datetime.now(timezone.utc):%Y-%m-%d}"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _first_line(command: list[str]) -> str:
    try:
        found = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError:
        return "not installed"
    lines = (found.stdout or found.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


def _cpu() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.partition(":")[2].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or "unknown CPU"


def machine() -> str:
    from tests.support.redis_server import server_binary

    redis_server = _first_line([server_binary(), "--version"]).split(" v=")[-1].split()[0]
    return (
        f"{os.cpu_count()} cores ({_cpu()}), {platform.system()} {platform.release()}; Python "
        f"{platform.python_version()}, Django {_version('django')}, redis-py {_version('redis')}"
        f" with hiredis {_version('hiredis')}, redis-server {redis_server}, gunicorn "
        f"{_version('gunicorn')}, uvicorn {_version('uvicorn')}, "
        f"{_first_line(['wrk', '--version']).split(' [')[0]}; load average "
        f"{os.getloadavg()[0]:.1f}"
    )
