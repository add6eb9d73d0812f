"""What a Redis outage costs a page, and how soon recording resumes once Redis is back.

Starts a throw-away redis-server (and a second one to be its primary in the read-only case),
configures a small Django site with the whos_online middleware, a page that renders
``{% whos_online %}`` and one that does not, and times ``django.test.Client`` requests while
Redis is:

* healthy;
* not listening (the server was shut down);
* frozen (SIGSTOP: the kernel accepts connections, nothing answers);
* slow: a proxy in front of it holds every reply back 1 s (beyond the request timeout), or 50 ms
  (within it); the same proxy without delay is measured too, as the baseline of those two;
* out of memory (``maxmemory`` with ``noeviction``, filled until writes get OOM errors);
* a read-only replica (``REPLICAOF`` another server; writes get READONLY errors);
* unable to snapshot (``MISCONF``: the directory it saves to is gone; only where ``CONFIG SET
  dir`` is allowed, as on Redis 6.2: later versions protect it).

Each situation is measured in four setups (``SETUPS``): the page with the tag, or the page
without it (a request that only records), each with the default ``FLUSH_INTERVAL`` (the visit
queued, written by the process's flusher thread) and with 0 (written before the response).
Every request comes from a new visitor, so that every one of them is recorded (the path that
talks to Redis; throttled requests never do). Each repetition runs every situation of every
setup once, in a rotating order: a warm-up request on a healthy Redis (the pool holds a live
connection, as on a busy site), then the fault, then the first request of the outage and the
following ones, 40 ms apart so that they go on while the flusher waits on the broken Redis,
all within the back-off. Per situation it reports the share of HTTP 200 answers, the median and
p99 time added to a request, the warnings logged, and the page hits (``COUNT_HITS`` is on) that
reached Redis against the requests served, once Redis is back and the buffer written. Then it
measures recovery with ``FLUSH_INTERVAL`` 0, where a throttle cookie is only set once the write
succeeded: the fault, one failing request, Redis back, and requests every few milliseconds until
one is recorded. Recovery is measured with a short FAILURE_BACKOFF so as to fit the run time,
and once with the default 10 s as a check. The targets' table ends the run. Run from the
repository root (``--repeats`` for fewer outages per situation):

    python3 scripts/dev.py bench outages
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import django
import redis
from django.conf import settings

from bench import servers, stats
from bench.report import Target, targets_table
from tests.support import redis_faults
from tests.support.delaying_proxy import DelayingProxy

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from django.http import HttpRequest, HttpResponse

    from tests.support.redis_server import RedisServer

#: Repetitions of every situation, interleaved.
REPEATS = 10
#: Requests timed after the first one of each outage, all within the back-off, this many seconds
#: apart: together longer than a flush's wait and a timeout, so that the requests of an outage
#: go on while the flusher thread waits on the broken Redis.
FOLLOWING = 10
FOLLOWING_EVERY = 0.04
#: FAILURE_BACKOFF for the recovery measurements, and how many of them per fault.
RECOVERY_BACKOFF = 1.0
RECOVERY_REPEATS = 3
#: Pause between the requests that wait for recording to resume.
POLL = 0.005
URLCONF = "bench_outages_urls"
#: A key set before each episode: gone or older after it if the server restarted.
MARKER = "bench:outages:marker"
#: The situations where Redis does not answer (the others answer reads but refuse writes).
UNREACHABLE = ("nothing listening", "frozen (SIGSTOP)", "slow: replies 1 s late")


class LogCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.levels: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.levels.append(record.levelname)


def configure(url: str) -> LogCounter:
    from django.urls import path

    urls = types.ModuleType(URLCONF)
    sys.modules[URLCONF] = urls
    settings.configure(
        SECRET_KEY="bench-only",  # noqa: S106 (a throw-away site)
        DEBUG=False,
        ALLOWED_HOSTS=["*"],
        USE_TZ=True,
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "whos_online",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "whos_online.middleware.WhosOnlineMiddleware",
        ],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        ROOT_URLCONF=URLCONF,
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
            }
        ],
        WHOS_ONLINE={"REDIS_URL": url, "COUNT_HITS": True},
    )
    django.setup()
    urls.urlpatterns = [  # type: ignore [attr-defined]
        path("", page),
        path("plain/", plain_page),
    ]
    counter = LogCounter()
    logger = logging.getLogger("whos_online")
    logger.addHandler(counter)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return counter


def page(request: HttpRequest) -> HttpResponse:
    from django.http import HttpResponse
    from django.template import engines

    template = engines["django"].from_string(
        "{% load whos_online %}<main>page</main>{% whos_online %}"
    )
    return HttpResponse(template.render({}, request))


def plain_page(request: HttpRequest) -> HttpResponse:
    """A page that reads nothing from Redis: its request only records."""
    from django.http import HttpResponse

    return HttpResponse("<main>page</main>")


@dataclass(frozen=True)
class Setup:
    """What the site's pages do: read Redis (a page with the tag) or only record, and when
    they write (``FLUSH_INTERVAL``; None for the default)."""

    label: str
    path: str
    flush_interval: float | None = None


SETUPS = (
    Setup("page with {% whos_online %}, defaults", "/"),
    Setup("page with {% whos_online %}, FLUSH_INTERVAL 0", "/", 0.0),
    Setup("recorded request (no tag), defaults", "/plain/"),
    Setup("recorded request (no tag), FLUSH_INTERVAL 0", "/plain/", 0.0),
)
#: The recorded requests of the targets: at most this many ms added to their p99, all served.
TARGET_P99_MS = 2.0
TARGET_SITUATIONS = ("frozen (SIGSTOP)", "sluggish: replies 50 ms late")


@dataclass
class Situation:
    name: str
    inject: Callable[[], None]
    heal: Callable[[], None]
    #: The Redis URL the site uses in this situation: the server's, or the proxy's in front of it.
    url: str = ""
    #: Whether Redis fails in this situation (so the breaker opens and recovery can be timed).
    outage: bool = True
    #: Seconds for replies held back by the proxy to arrive, before the hits are counted.
    settle: float = 0.0
    setup: Setup = SETUPS[0]
    first: list[float] = field(default_factory=list)
    following: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    warnings: int = 0
    #: Requests served during its episodes, and the page hits of them that Redis counted.
    served: int = 0
    counted: int = 0

    @property
    def times(self) -> list[float]:
        return self.first + self.following


def nothing() -> None:
    """Neither breaks nor heals: the healthy situations."""


class Faults:
    """Breaks and heals one redis-server at a fixed URL, as the tests do, in the ways that take
    more than a call of the server's own stop/start or freeze/resume."""

    def __init__(self, server: RedisServer, primary: RedisServer, proxy: DelayingProxy) -> None:
        self.primary = primary
        self.proxy = proxy
        self.directory = server.directory
        self.direct = redis.Redis.from_url(server.url, socket_timeout=5)

    def fill(self) -> None:
        redis_faults.fill_until_oom(self.direct)

    def unfill(self) -> None:
        self.direct.config_set("maxmemory", 0)
        keys = list(self.direct.scan_iter(match="fill:*", count=1000))
        if keys:
            self.direct.unlink(*keys)

    def demote(self) -> None:
        # The primary gets a copy of the data first, as after a failover, so that the hits
        # counted before the episode are still there to compare with.
        with redis.Redis.from_url(self.primary.url, socket_timeout=5) as primary:
            primary.flushall()
            for key in self.direct.scan_iter(count=1000):
                dumped = self.direct.dump(key)
                if dumped is not None:
                    ttl = max(int(self.direct.pttl(key)), 0)
                    primary.restore(key, ttl, dumped, replace=True)
        redis_faults.demote(self.direct, self.primary)

    def can_move_snapshots(self) -> bool:
        """Whether ``CONFIG SET dir`` works (Redis 7 and later protect it by default)."""
        try:
            self.direct.config_set("dir", self.directory)
        except redis.exceptions.ResponseError:
            return False
        return True

    def fail_snapshots(self) -> None:
        # Snapshots go to a directory of their own, removed under the server, so that the
        # server's own directory stays for the other situations (a restart, a replica's sync).
        doomed = tempfile.mkdtemp(prefix="whos-online-misconf-")
        self.direct.config_set("dir", doomed)
        redis_faults.fail_snapshots(self.direct, doomed)

    def allow_writes(self) -> None:
        redis_faults.allow_writes_without_snapshots(self.direct)
        self.direct.config_set("dir", self.directory)

    def promote(self) -> None:
        self.direct.replicaof("NO", "ONE")

    def delay(self, seconds: float) -> Callable[[], None]:
        def hold_replies() -> None:
            self.proxy.delay = seconds

        return hold_replies

    def undelay(self) -> None:
        self.proxy.delay = 0.0


def use(url: str, flush_interval: float | None = None) -> None:
    """Point the site at ``url`` and write with ``flush_interval`` (None: the default), with
    fresh clients and a closed breaker."""
    from whos_online.config import settings as conf

    current = getattr(settings, "WHOS_ONLINE")  # noqa: B009 (not in django-stubs' Settings)
    wanted = {key: value for key, value in current.items() if key != "FLUSH_INTERVAL"}
    wanted["REDIS_URL"] = url
    if flush_interval is not None:
        wanted["FLUSH_INTERVAL"] = flush_interval
    if current != wanted:
        setattr(settings, "WHOS_ONLINE", wanted)  # noqa: B010
        conf.reset()


class Visitors:
    """Times requests to the page, each from a new visitor (198.18.0.0/15)."""

    def __init__(self) -> None:
        from django.test import Client

        from whos_online.recording import throttle

        self.client = Client()
        self.cookie = throttle.COOKIE_NAME
        self.addresses: Iterator[int] = iter(range(int(IPv4Address("198.18.0.1")), 2**32))

    def visit(self, statuses: list[int] | None = None, path: str = "/") -> tuple[float, bool]:
        """Seconds the request took, and whether it was recorded (it got a throttle cookie).
        The status is added to ``statuses``; without it, anything but a 200 is an error."""
        self.client.cookies.clear()
        address = str(IPv4Address(next(self.addresses)))
        started = time.perf_counter()
        response = self.client.get(path, REMOTE_ADDR=address)
        took = time.perf_counter() - started
        if statuses is not None:
            statuses.append(response.status_code)
        elif response.status_code != 200:
            raise RuntimeError(f"the page answered {response.status_code}")
        return took, self.cookie in response.cookies


def close_breakers() -> None:
    from whos_online.backend.connection import breaker, refusals

    breaker.reset()
    refusals.reset()


def stored_hits(direct: redis.Redis) -> int:
    """Page hits in Redis now."""
    from whos_online.config.settings import get_config
    from whos_online.store import counters

    return sum(count for _, count in counters.get(direct, get_config(), "hits", 86400))


def counted_hits(direct: redis.Redis) -> int:
    """Page hits in Redis, once the process has written what it holds."""
    from whos_online.recording import visits as recording

    if not recording.flush_hits():
        raise RuntimeError("the buffered hits could not be written to a healthy Redis")
    return stored_hits(direct)


def measure_latency(
    situations: list[Situation],
    visitors: Visitors,
    logs: LogCounter,
    direct: redis.Redis,
    repeats: int,
) -> None:
    for repeat in range(repeats):
        for situation in stats.rotated(situations, repeat):
            setup = situation.setup
            use(situation.url, setup.flush_interval)
            close_breakers()  # every episode is a new outage
            visitors.visit(path=setup.path)
            before = counted_hits(direct)
            episode = f"{repeat}:{setup.label}:{situation.name}"
            direct.set(MARKER, episode)
            warned = logs.levels.count("WARNING")
            situation.inject()
            try:
                situation.first.append(visitors.visit(situation.statuses, setup.path)[0])
                for _ in range(FOLLOWING):
                    time.sleep(FOLLOWING_EVERY)
                    situation.following.append(visitors.visit(situation.statuses, setup.path)[0])
            finally:
                situation.heal()
            situation.warnings += logs.levels.count("WARNING") - warned
            situation.served += 1 + FOLLOWING
            close_breakers()
            time.sleep(situation.settle)
            if direct.get(MARKER) != episode.encode():
                # A server that restarted lost what it held, or loaded an older snapshot (a
                # replica's sync leaves one): count from what it holds now.
                before = stored_hits(direct)
            situation.counted += counted_hits(direct) - before
    close_breakers()


def measure_recovery(
    situations: list[Situation], visitors: Visitors, backoff: float, repeats: int
) -> list[tuple[str, list[tuple[float, float]]]]:
    """Per fault: (seconds from Redis back to the first recorded visit, the same minus the
    back-off that was still to run when Redis came back)."""
    from django.test import override_settings

    from whos_online.backend.connection import breaker, refusals
    from whos_online.config.settings import get_config

    current = getattr(settings, "WHOS_ONLINE")  # noqa: B009 (not in django-stubs' Settings)
    results = []
    # The block's end restores the settings as they were, the URL that use() sets in it included.
    with override_settings(WHOS_ONLINE={**current, "FAILURE_BACKOFF": backoff}):
        for situation in situations:
            use(situation.url, situation.setup.flush_interval)
            target = get_config().redis_target
            found = []
            for _ in range(repeats):
                close_breakers()
                visitors.visit()
                situation.inject()
                try:
                    _, recorded = visitors.visit()
                    if recorded:
                        raise RuntimeError(f"{situation.name}: a visit was recorded")
                finally:
                    situation.heal()
                back = time.perf_counter()
                opened = breaker if situation.name in UNREACHABLE else refusals
                remaining = opened._open_until[target] - time.monotonic()
                while True:
                    _, recorded = visitors.visit()
                    if recorded:
                        break
                    time.sleep(POLL)
                recovered = time.perf_counter() - back
                found.append((recovered, recovered - remaining))
            results.append((situation.name, found))
    return results


def spread(values: list[float]) -> str:
    return stats.Spread.of(values).show(stats.ms)


def added(values: list[float], healthy: list[float]) -> str:
    median, base = statistics.median(values), statistics.median(healthy)
    sign = "+" if median >= base else "-"
    return f"{sign}{stats.ms(abs(median - base))} ms (x{median / base:.2f})"


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def p99_added(values: list[float], healthy: list[float]) -> str:
    difference = p99(values) - p99(healthy)
    return f"{'+' if difference >= 0 else '-'}{stats.ms(abs(difference))} ms"


def report(
    situations: list[Situation],
    recovery: list[tuple[str, list[tuple[float, float]]]],
    check: list[tuple[str, list[tuple[float, float]]]],
    logs: LogCounter,
    version: str,
    *,
    repeats: int,
) -> None:
    from whos_online.backend.clients import REQUEST_TIMEOUT
    from whos_online.config.settings import DEFAULTS

    # Each situation is compared with the first healthy one of its setup that reaches Redis the
    # same way.
    healthy: dict[tuple[Setup, str], Situation] = {}
    for situation in situations:
        if not situation.outage:
            healthy.setdefault((situation.setup, situation.url), situation)
    print(
        f"redis-server {version}, Django {django.get_version()}, redis-py {redis.__version__}; "
        f"request timeout {REQUEST_TIMEOUT} s, FAILURE_BACKOFF 10 s (default), FLUSH_INTERVAL "
        f"{DEFAULTS['FLUSH_INTERVAL']:g} s by default. One request = GET from a new visitor, "
        f"of a page with {{% whos_online %}} (a read and a recorded visit while Redis is "
        f"healthy) or of a page without it (a recorded visit only). {repeats} outages per "
        f"situation and setup, interleaved; {FOLLOWING} following requests each, "
        f"{FOLLOWING_EVERY * 1000:g} ms apart. Times in ms: median (min–max). Warnings: lines "
        f"the 'whos_online' logger wrote during the episodes, {repeats} of them. Hits: "
        "COUNT_HITS is on; counted once Redis is back and the process has written its buffer."
    )
    print()
    header = [
        "situation",
        "HTTP 200",
        "first request of the outage",
        "added vs healthy",
        "following requests (within the back-off)",
        "added vs healthy",
        "p99 added",
        "warnings",
        "hits counted / served",
    ]
    for setup in SETUPS:
        rows = []
        for situation in situations:
            if situation.setup != setup:
                continue
            base = healthy[setup, situation.url]
            rows.append(
                [
                    situation.name,
                    f"{100 * served(situation):.0f} %",
                    spread(situation.first),
                    added(situation.first, base.first),
                    spread(situation.following),
                    added(situation.following, base.following),
                    p99_added(situation.times, base.times),
                    str(situation.warnings),
                    f"{situation.counted} / {situation.served}",
                ]
            )
        print(f"{setup.label}:\n")
        print(stats.table(header, rows))
        print()
    print(
        f"Time to recover: from Redis back (server answering again) to the first recorded "
        f"visit, polling every {POLL * 1000:g} ms. Redis came back right after the outage's "
        "first failed request, the worst case, so the breaker's back-off is nearly all of it; "
        "'beyond the back-off' is what remains once the back-off still to run is subtracted."
    )
    print()
    header = [
        "situation",
        "FAILURE_BACKOFF",
        "runs",
        "recovery, s: median (min–max)",
        "beyond the back-off, ms",
    ]
    rows = [
        [
            name,
            f"{backoff:g} s",
            str(len(found)),
            stats.Spread.of([recovered for recovered, _ in found]).show(
                lambda seconds: f"{seconds:.3f}"
            ),
            spread([extra for _, extra in found]),
        ]
        for runs, backoff in ((recovery, RECOVERY_BACKOFF), (check, 10.0))
        for name, found in runs
    ]
    print(stats.table(header, rows))
    outages = sum(situation.outage for situation in situations) * repeats + sum(
        len(found) for rows in (recovery, check) for _, found in rows
    )
    print()
    print(
        f"Log lines from the 'whos_online' logger: {logs.levels.count('WARNING')} warnings and "
        f"{logs.levels.count('INFO')} info lines over {outages} outages "
        f"(the latency runs reset the breaker between outages, so they log no recovery)."
    )


def served(situation: Situation) -> float:
    return situation.statuses.count(200) / len(situation.statuses)


def targets(situations: list[Situation]) -> list[Target]:
    """The recorded requests' targets: a frozen Redis, and one 50 ms slow, add at most
    ``TARGET_P99_MS`` to their p99, with every page served."""
    setup = SETUPS[2]
    mine = [situation for situation in situations if situation.setup == setup]
    found = []
    for name in TARGET_SITUATIONS:
        situation = next(s for s in mine if s.name == name)
        base = next(s for s in mine if not s.outage and s.url == situation.url)
        difference = (p99(situation.times) - p99(base.times)) * 1000
        found.append(
            Target(
                f"{name}, {setup.label}: p99 added ≤ {TARGET_P99_MS:g} ms, pages 100 % served",
                f"{p99_added(situation.times, base.times)}, {100 * served(situation):.0f} % served",
                difference <= TARGET_P99_MS and served(situation) == 1.0,
            )
        )
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.outages", description=__doc__)
    parser.add_argument(
        "--repeats", type=int, default=REPEATS, help="outages per situation and setup"
    )
    options = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(servers.redis_server())
        primary = stack.enter_context(servers.redis_server())
        proxy = DelayingProxy(server.port)
        stack.callback(proxy.close)
        logs = configure(server.url)
        faults = Faults(server, primary, proxy)
        direct, proxied = server.url, proxy.url

        def kinds(setup: Setup) -> list[Situation]:
            found = [
                Situation("healthy", nothing, nothing, direct, outage=False, setup=setup),
                Situation("nothing listening", server.stop, server.start, direct, setup=setup),
                Situation("frozen (SIGSTOP)", server.freeze, server.resume, direct, setup=setup),
                # A reply held back a second arrives before the hits are read (settle).
                Situation(
                    "slow: replies 1 s late",
                    faults.delay(1.0),
                    faults.undelay,
                    proxied,
                    settle=1.1,
                    setup=setup,
                ),
                Situation("out of memory", faults.fill, faults.unfill, direct, setup=setup),
                Situation("read-only replica", faults.demote, faults.promote, direct, setup=setup),
                Situation(
                    "healthy, through the proxy",
                    nothing,
                    nothing,
                    proxied,
                    outage=False,
                    setup=setup,
                ),
                Situation(
                    "sluggish: replies 50 ms late",
                    faults.delay(0.05),
                    faults.undelay,
                    proxied,
                    outage=False,
                    settle=0.1,
                    setup=setup,
                ),
            ]
            if faults.can_move_snapshots():
                misconf = Situation(
                    "snapshots failing (MISCONF)",
                    faults.fail_snapshots,
                    faults.allow_writes,
                    direct,
                    setup=setup,
                )
                found.insert(6, misconf)
            return found

        situations = [situation for setup in SETUPS for situation in kinds(setup)]
        visitors = Visitors()
        for setup in SETUPS:  # warm up Django, the templates and the scripts
            use(direct, setup.flush_interval)
            for _ in range(20):
                visitors.visit(path=setup.path)
        started = time.perf_counter()
        measure_latency(situations, visitors, logs, faults.direct, options.repeats)
        # Recovery is timed where a throttle cookie says the visit was written: with
        # FLUSH_INTERVAL 0. (Queued, a visit gets its cookie before its flush, and one that
        # failed is written again by the first flush after the back-off.)
        outages = [s for s in situations if s.outage and s.setup == SETUPS[1]]
        recovery = measure_recovery(outages, visitors, RECOVERY_BACKOFF, RECOVERY_REPEATS)
        check = measure_recovery(outages[:1], visitors, 10.0, 1)
        version = str(faults.direct.info("server")["redis_version"])
        report(situations, recovery, check, logs, version, repeats=options.repeats)
        print(targets_table(targets(situations)))
        print(f"Run time {time.perf_counter() - started:.0f} s.")


if __name__ == "__main__":
    main()
