"""``python -m bench [PART …] [--quick] [options]``: run benches and print their tables as
markdown, each under the command that printed it and the date.

With no part named the default set runs (``--only a,b`` names parts too). ``--quick`` runs each
part small, to see that it works in seconds: its figures mean little. An option applies to every
part run that has it (``--repeats``, ``--against CHECKOUT``…); ``python -m bench PART --help``
lists a part's own. Each part is a module of ``bench`` with ``Options`` (a dataclass: the
defaults), ``QUICK`` and ``run(options) -> Section``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import itertools
import os
import shutil
import sys
import time
import typing
from pathlib import Path
from typing import Any, Final

from bench.harness.report import machine, progress, targets_table, today

DEFAULT: Final = (
    "throughput",
    "redis_work",
    "request_cost",
    "request_parts",
    "process_cpu",
    "tags",
    "cleanup",
    "room_flood",
    "memory",
    "rooms",
)
#: Parts run only when named: minutes each, or of another kind (failures, streams).
ON_REQUEST: Final = (
    "batching",
    "capacity",
    "lua_replay",
    "instructions",
    "outages",
    "outage_queue",
    "restart_empty",
    "failover",
    "streams",
    "streams_requests",
    "streams_outage",
    "streams_stalled",
    "pubsub",
)
#: Parts that load the site with wrk.
WITH_WRK: Final = ("throughput", "streams_requests")


def _parts(argv: list[str]) -> list[str]:
    """The parts named first on the command line or by ``--only``; the default set else."""
    named = list(itertools.takewhile(lambda word: not word.startswith("-"), argv))
    for index, word in enumerate(argv):
        if word == "--only" and index + 1 < len(argv):
            named += argv[index + 1].split(",")
        elif word.startswith("--only="):
            named += word.removeprefix("--only=").split(",")
    found = [name.strip().replace("-", "_") for name in named if name.strip()]
    unknown = sorted(set(found) - {*DEFAULT, *ON_REQUEST})
    if unknown:
        raise SystemExit(f"bench: unknown parts {unknown}; choose from {DEFAULT + ON_REQUEST}")
    return found or list(DEFAULT)


def _setup_django() -> None:
    """This process serves the in-process parts with the bench site's settings."""
    import django
    from django.core.management import call_command

    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.site"
    os.environ.setdefault("WHOS_ONLINE_BENCH_VARIANT", "throttled")
    # Where a part's settings are gone, a flush still due finds a Redis that never answers.
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:9/0")
    django.setup()
    call_command("migrate", verbosity=0)


def _option_type(hint: Any) -> Any:
    return Path if Path in typing.get_args(hint) else hint


def _parser(modules: dict[str, Any]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("parts", nargs="*", help=f"of {', '.join(DEFAULT + ON_REQUEST)}")
    parser.add_argument("--only", help="parts, comma-separated")
    parser.add_argument("--quick", action="store_true", help="each part small: does it work?")
    defaults: dict[str, dict[str, Any]] = {}
    for part, module in modules.items():
        hints = typing.get_type_hints(module.Options)
        for option in dataclasses.fields(module.Options):
            kind = _option_type(hints[option.name])
            found = defaults.setdefault(option.name, {"type": kind, "defaults": []})
            found["defaults"].append(f"{part} {option.default}")
            if found["type"] is not kind:  # parts differ: each reads the text its own way
                found["type"] = str
    for name, found in sorted(defaults.items()):
        flag, shown = "--" + name.replace("_", "-"), "; ".join(found["defaults"])
        if found["type"] is bool:
            parser.add_argument(flag, dest=name, action="store_true", default=None, help=shown)
        else:
            parser.add_argument(flag, dest=name, type=found["type"], help=f"default: {shown}")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parts = _parts(argv)
    if set(parts) & set(WITH_WRK) and shutil.which("wrk") is None:
        progress("wrk is not installed: it is Debian's package wrk (apt-get install wrk)")
        return 1
    _setup_django()
    modules = {part: importlib.import_module(f"bench.{part}") for part in parts}
    parser = _parser(modules)
    given = vars(parser.parse_args(argv))
    if given["parts"] != list(itertools.takewhile(lambda word: not word.startswith("-"), argv)):
        parser.error("name the parts first, before the options")
    command = " ".join(["python3 scripts/dev.py bench", *argv])
    started = time.monotonic()
    print(f"Measured on {today()}, {machine()}.\n")
    targets = []
    for part, module in modules.items():
        names = {option.name for option in dataclasses.fields(module.Options)}
        hints = typing.get_type_hints(module.Options)
        chosen = {
            name: _option_type(hints[name])(value)
            for name, value in given.items()
            if name in names and value is not None
        }
        options = dataclasses.replace(
            module.QUICK if given["quick"] else module.Options(), **chosen
        )
        progress(f"{part}…")
        part_started = time.monotonic()
        section = module.run(options)
        progress(f"{part} took {time.monotonic() - part_started:.0f} s")
        print(section.markdown(command) + "\n", flush=True)
        targets += section.targets
    if targets:
        print(targets_table(targets) + "\n")
    print(f"The whole run took {time.monotonic() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
