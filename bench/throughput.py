"""Requests a second of the same small site with each middleware, against bare Django.

Each variant of ``bench.site`` runs under its own gunicorn (2 sync workers; uvicorn with
``--asgi``) and redis-server; wrk plays a reverse proxy in front of 200 anonymous clients or 20
logged-in users in turn. The throttled variant's clients send the cookie their first visit got,
and its Redis must run nothing meanwhile. Every cell runs between two cells of bare Django, and
its ratio is to their mean; "bare again" is bare Django against itself: the noise floor.
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bench.harness import servers, wrk
from bench.harness.clients import ThrottleCookies, crowd, get
from bench.harness.report import Section, Target, ms, number, ratio, table, us
from bench.harness.rounds import Spread, neighbour_ratios, ratios, sandwich, spread
from bench.site import VARIANTS, Variant

if TYPE_CHECKING:
    from collections.abc import Callable

IDENTITIES: Final = ("anonymous", "authenticated")
USERS: Final = 20
#: The recorded request's target: this many times the naive ZADD's requests a second.
RECORDED_VS_NAIVE: Final = 1.1
PREPARE: Final = (
    f"{servers.MIGRATE}; from django.contrib.auth.models import User; "
    f"User.objects.bulk_create([User(username=f'bench{{n}}') for n in range({USERS})])"
)


@dataclass(frozen=True)
class Options:
    repeats: int = 12
    #: Seconds of each cell (whole seconds: wrk's).
    seconds: int = 1
    #: The variants besides bare Django, comma-separated (all by default).
    variants: str = ""
    #: Another checkout whose whos_online variants are served too, interleaved.
    against: Path | None = None
    asgi: bool = False


QUICK = Options(repeats=1, variants="throttled,recording,naive")


@dataclass(frozen=True, eq=False)
class Site:
    variant: Variant
    checkout: Path | None
    port: int
    pid: int
    node: servers.Node
    log: Path

    @property
    def name(self) -> str:
        return self.variant.name + ("" if self.checkout is None else "@against")

    @property
    def label(self) -> str:
        label = "bare Django again (the noise floor)" if self.name == "bare" else self.variant.label
        return label + ("" if self.checkout is None else f", from {self.checkout}")

    def cpu(self) -> float:
        return servers.threads_cpu([*servers.children(self.pid), self.node.pid])


@dataclass(frozen=True)
class Cell:
    result: wrk.Result
    #: CPU seconds of the site's workers and its Redis, of its Redis, and Redis's commands.
    cpu: float
    redis_cpu: float
    commands: int


METRICS: Final[dict[str, Callable[[Cell], float]]] = {
    "req/s": lambda cell: cell.result.per_second,
    "p50": lambda cell: cell.result.p50,
    "p99": lambda cell: cell.result.p99,
    "cpu": lambda cell: cell.cpu / max(cell.result.requests, 1),
}


def missing(variant: Variant, env: dict[str, str]) -> str | None:
    """Why ``variant`` cannot run here (its package does not import), or None."""
    code = f"import django; django.setup(); import {variant.module}"
    if variant.module is None:
        return None
    found = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    return None if found.returncode == 0 else (found.stderr.strip().splitlines() or ["failed"])[-1]


def serve(
    stack: contextlib.ExitStack, options: Options, workdir: Path
) -> tuple[list[Site], list[str]]:
    """Every variant runnable here served, with its own Redis; and why the others are not."""
    database, served, notes = workdir / "bench.sqlite3", list[Site](), list[str]()
    wanted = [
        v for v in VARIANTS if v.name == "bare" or v.name in (options.variants or v.name).split(",")
    ]
    wanted = [v for v in wanted if v.name != "streams"]
    copies = [(v, options.against) for v in wanted if v.whos_online is not None and options.against]
    for variant, checkout in [(v, None) for v in wanted] + copies:
        env = servers.site_env(
            variant.name, "redis://unused", database, checkout=checkout or servers.ROOT
        )
        if reason := missing(variant, env):
            notes.append(f"{variant.label}: not measured, it does not import here ({reason}).")
            continue
        if not served:
            prepare = "online_users" if not missing(VARIANTS[6], env) else "bare"
            servers.python(servers.site_env(prepare, "redis://unused", database), PREPARE)
        redis = stack.enter_context(servers.redis_server())
        env["REDIS_URL"] = redis.url
        log = workdir / f"{variant.name}-{len(served)}.log"
        port, process = stack.enter_context(servers.site(env, log, asgi=options.asgi))
        served.append(Site(variant, checkout, port, process.pid, servers.Node.of(redis), log))
    return served, notes


def measure(sites: list[Site], options: Options) -> dict[str, list[tuple[str, Cell]]]:
    """Per kind of client, the cells as they ran: bare, a variant, bare, another…"""
    clients = {"anonymous": crowd(200, "198.18"), "authenticated": crowd(USERS, "198.19")}
    bare = sites[0]
    for number_, browser in enumerate(clients["authenticated"]):
        browser.cookies = get(bare.port, f"/login/bench{number_}/", browser.headers())
    cookies = {(s, who): ThrottleCookies(clients[who], s.node) for s in sites for who in clients}

    def load(site: Site, who: str, seconds: int) -> Cell:
        extra = (
            cookies[site, who].get(site.port)
            if site.variant.throttled
            else [{}] * len(clients[who])
        )
        headers = [b.headers(more) for b, more in zip(clients[who], extra, strict=True)]
        cpu, redis_cpu, commands = site.cpu(), site.node.cpu(), site.node.commands()
        result = wrk.run(site.port, headers, seconds)
        spent = (site.cpu() - cpu, site.node.cpu() - redis_cpu)
        return Cell(result, *spent, site.node.commands() - commands - 1)  # less the INFO before

    ran = {}
    for who in IDENTITIES:
        group = [s for s in sites[1:] if who == "authenticated" or s.variant.module is None]
        if not group:
            continue
        for site in sites:
            load(site, who, 1)  # every worker warmed up
        order = sandwich(bare, group, options.repeats)
        ran[who] = [(site.name, load(site, who, options.seconds)) for site in order]
    return ran


def rows(sites: list[Site], ran: dict[str, list[tuple[str, Cell]]]) -> list[list[Any]]:
    found = []
    for who, cells in ran.items():
        ratio_of = {
            metric: neighbour_ratios(cells, "bare", value) for metric, value in METRICS.items()
        }
        for site in sites:
            mine = [cell for name, cell in cells if name == site.name]
            if not mine:
                continue
            ratios_of = [spread(ratio_of[m].get(site.name, []), ratio) for m in METRICS]
            rate = Spread.of([c.result.per_second for c in mine]).show(number)
            found.append([
                site.label, who, rate, ratios_of[0],
                ms(statistics.median(c.result.p50 for c in mine)), ratios_of[1],
                ms(statistics.median(c.result.p99 for c in mine)), ratios_of[2],
                us(statistics.median(METRICS["cpu"](c) for c in mine)), ratios_of[3],
                us(statistics.median(c.redis_cpu / max(c.result.requests, 1) for c in mine)),
            ])  # fmt: skip
    return found


def notes_and_targets(
    sites: list[Site], ran: dict[str, list[tuple[str, Cell]]]
) -> tuple[list[str], list[Target]]:
    notes, targets = [], []
    for who, cells in ran.items():
        rate = neighbour_ratios(cells, "bare", METRICS["req/s"])
        cpu = neighbour_ratios(cells, "bare", METRICS["cpu"])
        for site in sites:
            mine = [cell for name, cell in cells if name == site.name]
            if errors := sum(c.result.errors for c in mine):
                notes.append(
                    f"{site.label}, {who}: {errors} of {sum(c.result.requests for c in mine)} "
                    "requests failed (socket errors, time-outs or non-2xx answers)."
                )
            if site.variant.throttled and site.checkout is None and mine:
                notes.append(
                    f"The throttled site's Redis ran {sum(c.commands for c in mine)} commands "
                    f"while it served {sum(c.result.requests for c in mine)} requests ({who})."
                )
            if site.checkout is not None and site.variant.name in rate:
                ours, theirs = site.variant.name, site.name
                notes.append(
                    f"{ours}, {who}: this checkout / {site.checkout}: req/s "
                    f"{ratios(rate[ours], rate[theirs]).show(ratio)}, CPU per request "
                    f"{ratios(cpu[ours], cpu[theirs]).show(ratio)}."
                )
            if "Traceback" in site.log.read_text():
                notes.append(f"The {site.name} site logged tracebacks.")
        if "recording" in rate and "recording_at_once" in rate:
            queued = ratios(rate["recording"], rate["recording_at_once"])
            notes.append(
                f"Recorded requests, {who}: queued / written in the request: req/s "
                f"{queued.show(ratio)}."
            )
        if "throttled" in rate:
            found = Spread.of(rate["throttled"])
            targets.append(
                Target(
                    f"throttled request, {who}: req/s ≥ 0.97 × bare",
                    f"{found.show(ratio)} × bare",
                    found.median >= 0.97,
                )
            )
        if "recording" in rate and "naive" in rate:
            found = ratios(rate["recording"], rate["naive"])
            goal = f"recorded request, {who}: req/s ≥ {RECORDED_VS_NAIVE:g} × the naive ZADD's"
            targets.append(
                Target(goal, f"{found.show(ratio)} × naive", found.median >= RECORDED_VS_NAIVE)
            )
    return notes, targets


def run(options: Options) -> Section:
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(servers.temporary_directory()))
        sites, missing_notes = serve(stack, options, workdir)
        ran = measure(sites, options)
        notes, targets = notes_and_targets(sites, ran)
    server = "uvicorn (ASGI) with 2 workers" if options.asgi else "gunicorn with 2 sync workers"
    return Section(
        "Request throughput" + (", ASGI" if options.asgi else ""),
        f"{server}; wrk with {wrk.THREADS} thread and {wrk.CONNECTIONS} connections; 200 "
        f"anonymous clients or {USERS} logged-in users in turn, each with its own X-Forwarded-For "
        f"(one trusted proxy). {options.repeats} repetitions of {options.seconds} s cells, each "
        "variant between two cells of bare Django; ratios are to the mean of those two: median "
        "(min–max). CPU µs/req is the CPU time of the site's workers and its own redis-server "
        "per request, and the last column the redis-server's part of it.",
        [
            table(
                "variant | clients | req/s | × bare | p50 ms | × bare | p99 ms | × bare | CPU "
                "µs/req | × bare | of which Redis",
                rows(sites, ran),
            )
        ],
        notes=missing_notes + notes,
        targets=targets,
    )
