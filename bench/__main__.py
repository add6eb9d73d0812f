"""Run the benchmarks and print their tables as markdown: ``python -m bench`` (from the
repository root, in the environment ``scripts/dev.py bench`` makes).

Every part starts its own throw-away servers on loopback and stops them. ``--only`` runs some
parts; ``--repeats`` and ``--seconds`` shorten the throughput part for a quick look.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Final

from bench.report import targets_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from bench.report import Section

PARTS: Final = (
    "throughput",
    "redis-work",
    "request-cost",
    "process-cpu",
    "tags",
    "cleanup",
    "room-flood",
    "memory",
    "rooms",
)
#: Parts that run only when ``--only`` names them: a few minutes each, on a million people.
ON_REQUEST: Final = ("batching",)


def _setup_django() -> None:
    """This process serves the in-process parts with the bench site's settings."""
    import django
    from django.core.management import call_command

    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.site"
    os.environ["WHOS_ONLINE_BENCH_VARIANT"] = "throttled"
    django.setup()
    call_command("migrate", verbosity=0)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _first_line(command: list[str]) -> str:
    found = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = (found.stdout or found.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    from tests.support.redis_server import server_binary

    redis_server = _first_line([server_binary(), "--version"]).split(" v=")[-1].split()[0]
    return (
        f"{datetime.now(timezone.utc):%Y-%m-%d}, {os.cpu_count()} cores ({_cpu()}), "
        f"{platform.system()} {platform.release()}; Python {platform.python_version()}, "
        f"Django {_version('django')}, redis-py {_version('redis')} with hiredis "
        f"{_version('hiredis')}, redis-server {redis_server}, gunicorn {_version('gunicorn')}, "
        f"{_first_line(['wrk', '--version']).split(' [')[0]}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated of {PARTS + ON_REQUEST}"
    )
    parser.add_argument("--repeats", type=int, default=12, help="throughput repetitions")
    parser.add_argument(
        "--seconds", type=int, default=1, help="seconds of load per throughput cell (wrk: whole)"
    )
    parser.add_argument(
        "--variants",
        help="comma-separated throughput variants to measure besides bare Django "
        "(throttled, recording, recording_hits, naive, online_users, online_status; default: all)",
    )
    parser.add_argument(
        "--against",
        type=Path,
        metavar="CHECKOUT",
        help="also serve the whos_online variants from this other checkout of the project, "
        "interleaved, and compare (e.g. a `git worktree` of the commit before a change): the "
        "throughput and process-cpu parts",
    )
    parser.add_argument(
        "--asgi",
        action="store_true",
        help="serve the throughput sites as ASGI with uvicorn instead of WSGI with gunicorn",
    )
    options = parser.parse_args(argv)
    wanted = [part.strip() for part in options.only.split(",") if part.strip()]
    unknown = sorted(set(wanted) - set(PARTS) - set(ON_REQUEST))
    if unknown:
        parser.error(f"unknown parts {unknown}; choose from {PARTS + ON_REQUEST}")
    if "throughput" in wanted and shutil.which("wrk") is None:
        print(
            "bench: wrk is not installed; it is Debian's package wrk (apt-get install wrk), "
            "which `python3 scripts/dev.py bench` installs when run as root.",
            file=sys.stderr,
        )
        return 1
    started = time.monotonic()
    _setup_django()
    from bench import (
        batching,
        cleanup,
        memory,
        process_cpu,
        redis_work,
        request_cost,
        room_flood,
        rooms,
        tags,
        throughput,
    )

    with tempfile.TemporaryDirectory(prefix="whos-online-bench-") as workdir:
        runs: dict[str, Callable[[], Section]] = {
            "throughput": lambda: throughput.run(
                options.seconds,
                options.repeats,
                Path(workdir),
                only=options.variants.split(",") if options.variants else None,
                against=options.against,
                asgi=options.asgi,
            ),
            "batching": batching.run,
            "redis-work": redis_work.run,
            "request-cost": request_cost.run,
            "process-cpu": lambda: process_cpu.run(options.against),
            "tags": tags.run,
            "cleanup": cleanup.run,
            "room-flood": room_flood.run,
            "memory": memory.run,
            "rooms": rooms.run,
        }
        sections = []
        for part in wanted:
            part_started = time.monotonic()
            print(f"bench: {part}…", file=sys.stderr, flush=True)
            sections.append(runs[part]())
            print(
                f"bench: {part} took {time.monotonic() - part_started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    print(f"Measured on {machine()}.\n")
    for section in sections:
        print(section.markdown() + "\n")
    targets = [target for section in sections for target in section.targets]
    if targets:
        print(targets_table(targets))
    print(f"The whole run took {time.monotonic() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
