"""Request throughput of the same small site with each middleware, against bare Django.

Each variant of ``bench.variants`` is served by its own gunicorn (two sync workers) and its own
redis-server, all started at once and left idle while another is measured. wrk plays a reverse
proxy in front of a crowd: every request carries the ``X-Forwarded-For`` of one of ``GUESTS``
anonymous clients, or the address and session cookie of one of ``USERS`` logged-in users, in
turn. For the throttled variant each client first makes one recorded visit, and then sends the
throttle cookie it got, as a browser would; the check that the cookie works is that its Redis
runs no command at all while it is measured.

The machines this runs on are shared, and other work comes and goes within seconds, so every
cell of a variant is measured between two cells of bare Django (bare, A, bare, B, bare, …, with
the order of the variants rotating each repetition), and its ratio is taken to the mean of those
two neighbours. "bare again" is the same ratio for bare Django itself: the noise floor. Besides
requests per second, the table gives the CPU time the site's workers and its Redis spent per
request, which other work on the machine disturbs far less than it disturbs throughput.
"""

from __future__ import annotations

import contextlib
import http.client
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Final

import redis

from bench import servers, stats, wrk
from bench.report import Section, Target
from bench.variants import BARE, VARIANTS, Variant
from whos_online.config.settings import DEFAULTS
from whos_online.recording import throttle

if TYPE_CHECKING:
    from collections.abc import Callable, Collection
    from pathlib import Path

IDENTITIES: Final = ("anonymous", "authenticated")
#: Distinct anonymous clients, and logged-in users, that the load generator plays in turn.
GUESTS: Final = 200
USERS: Final = 20
BROWSER: Final = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
#: Seconds of load per cell before the measured repetitions, to warm every worker.
WARM_UP: Final = 1
#: Seconds a set of throttle cookies must still be good for when a cell takes them.
COOKIE_MARGIN: Final = 15
#: The target of a recorded request (``THROTTLE`` 0): this many times the naive ZADD's req/s.
RECORDED_VS_NAIVE: Final = 1.1

PREPARE: Final = f"""
import django
django.setup()
from django.core.management import call_command
from django.contrib.auth.models import User
call_command("migrate", verbosity=0)
User.objects.bulk_create([User(username=f"bench{{n}}") for n in range({USERS})])
"""


@dataclass
class Browser:
    address: str
    cookies: dict[str, str] = field(default_factory=dict)

    def headers(self, extra_cookies: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"X-Forwarded-For": self.address, "User-Agent": BROWSER}
        cookies = {**self.cookies, **(extra_cookies or {})}
        if cookies:
            headers["Cookie"] = "; ".join(f"{name}={value}" for name, value in cookies.items())
        return headers


def visit(port: int, path: str, headers: dict[str, str]) -> dict[str, str]:
    """GET ``path``; returns the cookies the response set."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            msg = f"GET {path} answered {response.status}"
            raise RuntimeError(msg)
        found: dict[str, str] = {}
        for header in response.headers.get_all("Set-Cookie") or []:
            found.update({name: morsel.value for name, morsel in SimpleCookie(header).items()})
        return found
    finally:
        connection.close()


@dataclass(frozen=True)
class Site:
    """One variant, served: its port, its gunicorn master and its redis-server."""

    variant: Variant
    port: int
    master: int
    redis: redis.Redis
    redis_pid: int

    def cpu_seconds(self) -> float:
        return servers.cpu_seconds([*servers.children(self.master), self.redis_pid])

    def redis_cpu_seconds(self) -> float:
        return servers.cpu_seconds([self.redis_pid])

    def commands(self) -> int:
        """Commands run so far, not counting the INFO that asks (it counts once it has run)."""
        return int(self.redis.info("stats")["total_commands_processed"])


@dataclass(frozen=True)
class Sample:
    result: wrk.Result
    #: CPU seconds the site's workers and its Redis spent during the cell.
    cpu: float
    commands: int
    #: The part of ``cpu`` that its Redis spent.
    redis_cpu: float = 0.0

    @property
    def cpu_per_request(self) -> float:
        return self.cpu / max(self.result.requests, 1)

    @property
    def redis_cpu_per_request(self) -> float:
        return self.redis_cpu / max(self.result.requests, 1)


METRICS: Final[dict[str, Callable[[Sample], float]]] = {
    "req/s": lambda s: s.result.per_second,
    "p50": lambda s: s.result.p50,
    "p99": lambda s: s.result.p99,
    "cpu": lambda s: s.cpu_per_request,
}


@dataclass
class Measured:
    samples: dict[tuple[str, str], list[Sample]] = field(default_factory=lambda: defaultdict(list))
    #: Per (variant, identity) and metric: ratios to the mean of the two neighbouring bare cells.
    ratios: dict[tuple[str, str], dict[str, list[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )


class ThrottleCookies:
    """The throttle cookie of every client of the throttled site, fetched again before the
    first of them runs out, so that each is valid all through the cell that sends it."""

    def __init__(self, browsers: dict[str, list[Browser]]) -> None:
        self.browsers = browsers
        #: By (variant, identity): when the first of the cookies runs out (Unix time), and them.
        self.fetched: dict[tuple[str, str], tuple[float, list[dict[str, str]]]] = {}

    def get(self, site: Site, identity: str) -> list[dict[str, str]]:
        key = (site.variant.name, identity)
        expiry, found = self.fetched.get(key, (0.0, []))
        if time.time() + COOKIE_MARGIN < expiry:
            return found
        # Fetched again before they run out, the cookies would come back unchanged: each
        # process remembers the visits it recorded, and a cookie it hands out for one runs out
        # THROTTLE after that visit. Once they have run out, the visits are recorded anew.
        time.sleep(max(expiry - time.time() + 0.5, 0.0))
        found = []
        for browser in self.browsers[identity]:
            cookie = visit(site.port, "/", browser.headers()).get(throttle.COOKIE_NAME)
            if cookie is None:
                raise RuntimeError("the throttled site handed out no throttle cookie")
            found.append({throttle.COOKIE_NAME: cookie})
        settle(site)
        # A worker that did not know its shard's epoch yet (before its first write) hands out a
        # cookie without one, which the workers renew once they know it: a browser's next page
        # takes the renewed cookie, and so do these clients, before the cell sends them.
        for _round in range(3):
            renewed = False
            for index, browser in enumerate(self.browsers[identity]):
                again = visit(site.port, "/", browser.headers(found[index]))
                if (
                    again.get(throttle.COOKIE_NAME, found[index][throttle.COOKIE_NAME])
                    != (found[index][throttle.COOKIE_NAME])
                ):
                    found[index] = {throttle.COOKIE_NAME: again[throttle.COOKIE_NAME]}
                    renewed = True
            settle(site)
            if not renewed:
                break
        # A cookie begins with the Unix time at which it stops sparing a write (EXPIRY.MAC…).
        expiry = min(int(cookie[throttle.COOKIE_NAME].partition(".")[0]) for cookie in found)
        self.fetched[key] = (expiry, found)
        return found


def settle(site: Site, longest: float = 10.0) -> None:
    """Wait for the site's Redis to fall idle: its flushers write the visits that handed out
    the cookies up to FLUSH_INTERVAL later (longer on a busy machine), and the cell that sends
    the cookies must find no command but its own."""
    pause = 2 * DEFAULTS["FLUSH_INTERVAL"]
    deadline = time.monotonic() + longest
    count = site.commands()
    while time.monotonic() < deadline:
        time.sleep(pause)
        now = site.commands()
        if now == count + 1:  # the INFO that asked, and nothing else
            return
        count = now


def unavailable(variant: Variant, env: dict[str, str]) -> str | None:
    """Why ``variant`` cannot run here (its package does not install or import), or None."""
    if variant.module is None:
        return None
    code = f"import django; django.setup(); import {variant.module}"
    found = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if found.returncode == 0:
        return None
    lines = found.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit code {found.returncode}"


def run(
    seconds: int,
    repeats: int,
    workdir: Path,
    *,
    only: Collection[str] | None = None,
    against: Path | None = None,
    asgi: bool = False,
) -> Section:
    """Measure every variant (or bare Django and those named in ``only``); with ``against``,
    also the whos_online ones served from that checkout of the project, interleaved with the
    others, to compare two versions of the code. With ``asgi``, every site is served as ASGI by
    uvicorn instead of gunicorn."""
    serve, server_name = (servers.uvicorn, "uvicorn") if asgi else (servers.gunicorn, "gunicorn")
    database = workdir / "bench.sqlite3"
    variants = [v for v in VARIANTS if only is None or v is BARE or v.name in only]
    if against is not None:
        variants += [v.served_from(against) for v in variants if v.whos_online is not None]
    env = {v.name: _env(v, "redis://unused", database) for v in variants}
    missing = {v.name: unavailable(v, env[v.name]) for v in variants}
    runnable = [v for v in variants if missing[v.name] is None]
    migrate_with = "online_users" if missing.get("online_users", "") is None else "bare"
    subprocess.run([sys.executable, "-c", PREPARE], env=env[migrate_with], check=True, timeout=300)
    with contextlib.ExitStack() as stack:
        sites = {}
        for variant in runnable:
            server = stack.enter_context(servers.redis_server())
            assert server.process is not None
            port, master = stack.enter_context(
                serve(
                    _env(variant, server.url, database),
                    workdir / f"{server_name}-{variant.name}.log",
                )
            )
            sites[variant.name] = Site(
                variant, port, master.pid, redis.Redis.from_url(server.url), server.process.pid
            )
        browsers = {
            "anonymous": [Browser(f"198.18.{n // 250}.{n % 250 + 1}") for n in range(GUESTS)],
            "authenticated": [Browser(f"198.19.0.{n + 1}") for n in range(USERS)],
        }
        for number, browser in enumerate(browsers["authenticated"]):
            browser.cookies = visit(sites["bare"].port, f"/login/bench{number}/", browser.headers())
        cookies = ThrottleCookies(browsers)
        groups = {
            identity: [
                sites[v.name]
                for v in runnable
                if v is not BARE and (identity == "authenticated" or v.records_guests)
            ]
            for identity in IDENTITIES
        }
        # The competitors record logged-in users only: alone, they leave a kind of client empty.
        groups = {identity: group for identity, group in groups.items() if group}

        def measure(site: Site, identity: str, duration: int) -> Sample:
            crowd = browsers[identity]
            extra = cookies.get(site, identity) if site.variant.throttled else [{}] * len(crowd)
            headers = [browser.headers(more) for browser, more in zip(crowd, extra, strict=True)]
            cpu, redis_cpu, commands = site.cpu_seconds(), site.redis_cpu_seconds(), site.commands()
            result = wrk.run(site.port, headers, duration)
            return Sample(
                result,
                site.cpu_seconds() - cpu,
                # Less the INFO that read the count before the cell.
                site.commands() - commands - 1,
                site.redis_cpu_seconds() - redis_cpu,
            )

        for identity, group in groups.items():
            for site in [sites["bare"], *group]:
                measure(site, identity, WARM_UP)
        measured = Measured()
        for repeat in range(repeats):
            for identity, group in groups.items():
                bare = [measure(sites["bare"], identity, seconds)]
                for site in stats.rotated(group, repeat):
                    sample = measure(site, identity, seconds)
                    bare.append(measure(sites["bare"], identity, seconds))
                    measured.samples[site.variant.name, identity].append(sample)
                    _add_ratios(
                        measured,
                        site.variant.name,
                        identity,
                        sample=sample,
                        before=bare[-2],
                        after=bare[-1],
                    )
                measured.samples["bare", identity] += bare
                for before, middle, after in zip(bare, bare[1:], bare[2:], strict=False):
                    _add_ratios(
                        measured, "bare", identity, sample=middle, before=before, after=after
                    )
        logs = {name: (workdir / f"{server_name}-{name}.log").read_text() for name in sites}
    return _section(
        measured,
        variants=variants,
        missing=missing,
        logs=logs,
        seconds=seconds,
        repeats=repeats,
        asgi=asgi,
    )


def _spread(ratios: list[float]) -> str:
    # Bare Django has no ratio of its own when a single variant sits between its cells.
    return stats.Spread.of(ratios).show(stats.ratio) if ratios else "—"


def _targets(measured: Measured, identity: str) -> list[Target]:
    found = []
    throttled = measured.ratios.get(("throttled", identity))
    if throttled:
        spread = stats.Spread.of(throttled["req/s"])
        found.append(
            Target(
                f"throttled request, {identity}: req/s ≥ 0.97 × bare",
                f"{spread.show(stats.ratio)} × bare",
                spread.median >= 0.97,
            )
        )
    recording = measured.ratios.get(("recording", identity))
    naive = measured.ratios.get(("naive", identity))
    if recording and naive:
        # Both as measured against their neighbouring bare cells, in the same repetition.
        spread = stats.ratios(recording["req/s"], naive["req/s"])
        found.append(
            Target(
                f"recorded request, {identity}: req/s ≥ {RECORDED_VS_NAIVE:g} × the naive ZADD "
                "middleware's",
                f"{spread.show(stats.ratio)} × naive",
                spread.median >= RECORDED_VS_NAIVE,
            )
        )
    return found


def _queued_against_at_once(measured: Measured) -> list[str]:
    """The recorded request with its visit queued (the default) against the same written in
    the request (``FLUSH_INTERVAL`` 0), and each against the naive ZADD, repetition by
    repetition."""
    found = []
    for identity in IDENTITIES:
        queued = measured.ratios.get(("recording", identity))
        at_once = measured.ratios.get(("recording_at_once", identity))
        if not queued or not at_once:
            continue
        parts = [
            f"queued / written in the request: req/s "
            f"{stats.ratios(queued['req/s'], at_once['req/s']).show(stats.ratio)}, CPU per "
            f"request {stats.ratios(queued['cpu'], at_once['cpu']).show(stats.ratio)}"
        ]
        naive = measured.ratios.get(("naive", identity))
        if naive:
            parts.append(
                "written in the request / naive: req/s "
                f"{stats.ratios(at_once['req/s'], naive['req/s']).show(stats.ratio)}"
            )
        found.append(f"Recorded requests, {identity}: " + "; ".join(parts) + ".")
    return found


def _comparisons(measured: Measured, runnable: list[Variant]) -> list[str]:
    """This checkout against the other one, variant by variant, repetition by repetition."""
    found = []
    for other in runnable:
        if other.checkout is None:
            continue
        for identity in IDENTITIES:
            mine = measured.ratios.get((other.settings_name, identity))
            theirs = measured.ratios.get((other.name, identity))
            if not mine or not theirs:
                continue
            rate = stats.ratios(mine["req/s"], theirs["req/s"]).show(stats.ratio)
            cpu = stats.ratios(mine["cpu"], theirs["cpu"]).show(stats.ratio)
            found.append(
                f"{other.settings_name}, {identity}: this checkout / {other.checkout}: "
                f"req/s {rate}, CPU per request {cpu}."
            )
    return found


def _env(variant: Variant, redis_url: str, database: Path) -> dict[str, str]:
    return servers.site_env(
        variant.settings_name, redis_url, database, checkout=variant.checkout or servers.ROOT
    )


def _add_ratios(
    measured: Measured, name: str, identity: str, *, sample: Sample, before: Sample, after: Sample
) -> None:
    for metric, value in METRICS.items():
        reference = (value(before) + value(after)) / 2
        measured.ratios[name, identity][metric].append(value(sample) / reference)


def _section(
    measured: Measured,
    *,
    variants: list[Variant],
    missing: dict[str, str | None],
    logs: dict[str, str],
    seconds: int,
    repeats: int,
    asgi: bool = False,
) -> Section:
    runnable = [v for v in variants if missing[v.name] is None]
    rows = []
    targets = []
    notes = []
    for identity in IDENTITIES:
        for variant in runnable:
            samples = measured.samples.get((variant.name, identity))
            if not samples:
                continue
            ratios = measured.ratios[variant.name, identity]
            label = "bare Django again (the noise floor)" if variant is BARE else variant.label
            rows.append(
                [
                    label,
                    identity,
                    stats.Spread.of([s.result.per_second for s in samples]).show(stats.number),
                    _spread(ratios["req/s"]),
                    stats.ms(statistics.median(s.result.p50 for s in samples)),
                    _spread(ratios["p50"]),
                    stats.ms(statistics.median(s.result.p99 for s in samples)),
                    _spread(ratios["p99"]),
                    stats.us(statistics.median(s.cpu_per_request for s in samples)),
                    _spread(ratios["cpu"]),
                    stats.us(statistics.median(s.redis_cpu_per_request for s in samples)),
                ]
            )
            errors = sum(s.result.errors for s in samples)
            if errors:
                notes.append(
                    f"{variant.label}, {identity}: {errors} of "
                    f"{sum(s.result.requests for s in samples)} requests failed (socket errors, "
                    "time-outs or non-2xx answers)."
                )
        targets += _targets(measured, identity)
    for variant in variants:
        reason = missing[variant.name]
        if reason is not None:
            notes.append(f"{variant.label}: not measured, it does not import here ({reason}).")
    notes += _queued_against_at_once(measured)
    notes += _comparisons(measured, runnable)
    cookie_path = [s for i in IDENTITIES for s in measured.samples.get(("throttled", i), [])]
    if cookie_path:
        notes.append(
            f"The throttled site's Redis ran {sum(s.commands for s in cookie_path)} commands "
            f"while the site served {sum(s.result.requests for s in cookie_path)} requests."
        )
    for name, log in logs.items():
        if "Traceback" in log:
            notes.append(f"The {name} site logged tracebacks (its server's log).")
    header = [
        "variant",
        "clients",
        "req/s",
        "× bare",
        "p50 ms",
        "× bare",
        "p99 ms",
        "× bare",
        "CPU µs/req",
        "× bare",
        "of which Redis",
    ]
    return Section(
        title="Request throughput, ASGI" if asgi else "Request throughput",
        intro=(
            ("uvicorn (ASGI) with 2 workers" if asgi else "gunicorn with 2 sync workers")
            + f"; wrk with {wrk.THREADS} thread and "
            f"{wrk.CONNECTIONS} connections; {GUESTS} anonymous clients or {USERS} logged-in "
            f"users in turn, each with its own X-Forwarded-For (one trusted proxy). {repeats} "
            f"repetitions of {seconds} s cells, each variant between two cells of bare Django; "
            "ratios are to the mean of those two: median (min–max). CPU µs/req is the CPU "
            "time of the site's workers and its own redis-server per request, and the last "
            "column the redis-server's part of it."
        ),
        tables=[stats.table(header, rows)],
        notes=notes,
        targets=targets,
    )
