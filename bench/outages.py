"""What a Redis outage costs a page, and how soon recording resumes once Redis is back.

Pages of the bench site, in this process through Django's test client, each from a new visitor
(so each is recorded), while Redis is healthy, not listening, frozen (SIGSTOP), slow behind a
proxy (replies 1 s late, or 50 ms), out of memory, a read-only replica, or failing its snapshots
(MISCONF, where ``CONFIG SET dir`` is allowed); a page with ``{% whos_online %}`` or one without,
each with the default ``FLUSH_INTERVAL`` and with 0. Per situation: pages served, time added,
warnings, page hits kept; then the time from Redis back to the first recorded visit.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import redis
from django.test import Client, override_settings

from bench import internals as whos
from bench.harness import servers
from bench.harness.clients import address
from bench.harness.report import Section, Target, fixed, ms, table
from bench.harness.rounds import interleaved, percentile, spread
from tests.support import redis_faults
from tests.support.delaying_proxy import DelayingProxy

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

#: Requests after the first of an outage, this far apart: they go on while the flusher waits.
FOLLOWING: Final = 10
EVERY: Final = 0.04
#: Setups: (label, path, FLUSH_INTERVAL; None for the default).
SETUPS: Final = (
    ("page with {% whos_online %}, defaults", "/tag/", None),
    ("page with {% whos_online %}, FLUSH_INTERVAL 0", "/tag/", 0.0),
    ("recorded request (no tag), defaults", "/", None),
    ("recorded request (no tag), FLUSH_INTERVAL 0", "/", 0.0),
)
#: The targets: the recorded requests' p99 at most this many ms more, every page served.
MOST_MS: Final = 2.0
TARGET_SITUATIONS: Final = ("frozen (SIGSTOP)", "sluggish: replies 50 ms late")


@dataclass(frozen=True)
class Options:
    #: Outages per situation and setup; of the recovery measures; at the default back-off.
    repeats: int = 10
    recoveries: int = 3
    checks: int = 1


QUICK = Options(repeats=1, recoveries=1, checks=0)


@dataclass(eq=False)
class Situation:
    name: str
    inject: Callable[[], object]
    heal: Callable[[], object]
    setup: tuple[str, str, float | None]
    url: str
    outage: bool = True
    #: Seconds for replies held back by the proxy to arrive, before the hits are counted.
    settle: float = 0.0
    times: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    warnings: int = 0
    #: Requests served during its episodes, and their page hits that Redis counted.
    served: int = 0
    counted: int = 0


class Site:
    """The redis-server, a primary for it to follow, the proxy, and the pages' client."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.server = stack.enter_context(servers.redis_server())
        self.primary = stack.enter_context(servers.redis_server())
        self.proxy = DelayingProxy(self.server.port)
        stack.callback(self.proxy.close)
        self.direct = redis.Redis.from_url(self.server.url, socket_timeout=5)
        self.client, self.visitors, self.levels = Client(), iter(range(1 << 24)), list[str]()
        handler = LevelsKept(self.levels)
        logger = logging.getLogger("whos_online")
        logger.addHandler(handler)
        stack.callback(logger.removeHandler, handler)
        stack.enter_context(mock_attribute(logger, "propagate", False))
        logger.setLevel(logging.INFO)

    def visit(self, path: str, statuses: list[int] | None = None) -> tuple[float, bool]:
        """Seconds a new visitor's page took, and whether it was recorded (it got a cookie)."""
        self.client.cookies.clear()
        started = time.perf_counter()
        response = self.client.get(path, REMOTE_ADDR=address(next(self.visitors), "198.18"))
        took = time.perf_counter() - started
        if statuses is not None:
            statuses.append(response.status_code)
        elif response.status_code != 200:
            raise RuntimeError(f"the page answered {response.status_code}")
        return took, whos.COOKIE_NAME in response.cookies

    @contextlib.contextmanager
    def using(
        self, url: str, interval: float | None, backoff: float | None = None
    ) -> Iterator[None]:
        settings = {"REDIS_URL": url, "COUNT_HITS": True, "TRUSTED_PROXY_COUNT": 0}
        settings |= {} if interval is None else {"FLUSH_INTERVAL": interval}
        with override_settings(
            WHOS_ONLINE=settings | ({} if backoff is None else {"FAILURE_BACKOFF": backoff})
        ):
            whos.close_breakers()
            yield

    def hits(self, written: bool = True) -> int:
        """Page hits in Redis, once the process has written what it holds."""
        if written and not whos.visits.flush_hits():
            raise RuntimeError("the buffered hits could not be written to a healthy Redis")
        return sum(
            count for _, count in whos.counters.get(self.direct, whos.get_config(), "hits", 86400)
        )

    def situations(self, setup: tuple[str, str, float | None]) -> list[Situation]:
        direct, proxied, nothing = self.server.url, self.proxy.url, lambda: None
        found = [
            Situation("healthy", nothing, nothing, setup, direct, outage=False),
            Situation("nothing listening", self.server.stop, self.server.start, setup, direct),
            Situation("frozen (SIGSTOP)", self.server.freeze, self.server.resume, setup, direct),
            Situation(
                "slow: replies 1 s late",
                self.delay(1.0),
                self.delay(0.0),
                setup,
                proxied,
                settle=1.1,
            ),
            Situation("out of memory", self.fill, self.unfill, setup, direct),
            Situation(
                "read-only replica",
                self.demote,
                lambda: self.direct.replicaof("NO", "ONE"),
                setup,
                direct,
            ),
            Situation("healthy, through the proxy", nothing, nothing, setup, proxied, outage=False),
            Situation(
                "sluggish: replies 50 ms late",
                self.delay(0.05),
                self.delay(0.0),
                setup,
                proxied,
                outage=False,
                settle=0.1,
            ),
        ]
        with contextlib.suppress(redis.ResponseError):  # Redis 7 and later protect ``dir``
            self.direct.config_set("dir", self.server.directory)
            found.insert(
                6,
                Situation(
                    "snapshots failing (MISCONF)",
                    self.fail_snapshots,
                    self.allow_writes,
                    setup,
                    direct,
                ),
            )
        return found

    def delay(self, seconds: float) -> Callable[[], None]:
        """What makes the proxy hold every reply back ``seconds``."""
        return lambda: setattr(self.proxy, "delay", seconds)

    def fill(self) -> None:
        redis_faults.fill_until_oom(self.direct)

    def unfill(self) -> None:
        self.direct.config_set("maxmemory", 0)
        if keys := list(self.direct.scan_iter(match="fill:*", count=1000)):
            self.direct.unlink(*keys)

    def demote(self) -> None:
        # The primary gets a copy of the data first, as after a failover: the hits counted
        # before the episode are there to compare with.
        with redis.Redis.from_url(self.primary.url, socket_timeout=5) as primary:
            primary.flushall()
            for key in self.direct.scan_iter(count=1000):
                if (dumped := self.direct.dump(key)) is not None:
                    primary.restore(key, max(int(self.direct.pttl(key)), 0), dumped, replace=True)
        redis_faults.demote(self.direct, self.primary)

    def fail_snapshots(self) -> None:
        # Into a directory of their own, removed under the server: its own stays for the rest.
        doomed = tempfile.mkdtemp(prefix="whos-online-misconf-")
        self.direct.config_set("dir", doomed)
        redis_faults.fail_snapshots(self.direct, doomed)

    def allow_writes(self) -> None:
        redis_faults.allow_writes_without_snapshots(self.direct)
        self.direct.config_set("dir", self.server.directory)


class LevelsKept(logging.Handler):
    def __init__(self, levels: list[str]) -> None:
        super().__init__(logging.INFO)
        self.levels = levels

    def emit(self, record: logging.LogRecord) -> None:
        self.levels.append(record.levelname)


@contextlib.contextmanager
def mock_attribute(target: object, name: str, value: object) -> Iterator[None]:
    before = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, before)


def episode(site: Site, situation: Situation) -> None:
    """One outage: a warm-up page on a healthy Redis, the fault, the first page of the outage
    and the following ones, the cure; then the page hits Redis kept of them."""
    _label, path, interval = situation.setup
    with site.using(situation.url, interval):
        site.visit(path)
        before, warned = site.hits(), site.levels.count("WARNING")
        site.direct.set("bench:marker", situation.name)
        situation.inject()
        try:
            for number in range(1 + FOLLOWING):
                time.sleep(EVERY if number else 0)
                situation.times.append(site.visit(path, situation.statuses)[0])
        finally:
            situation.heal()
        situation.warnings += site.levels.count("WARNING") - warned
        situation.served += 1 + FOLLOWING
        whos.close_breakers()
        time.sleep(situation.settle)
        if site.direct.get("bench:marker") != situation.name.encode():
            before = site.hits(written=False)  # a server that restarted lost what it held
        situation.counted += site.hits() - before


def recovery(site: Site, situation: Situation, backoff: float) -> tuple[float, float]:
    """Seconds from Redis back (right after a failed request: the worst case) to the first
    recorded visit, and the same less the back-off still to run then; ``FLUSH_INTERVAL`` 0,
    where a throttle cookie says the visit was written."""
    with site.using(situation.url, 0.0, backoff):
        site.visit("/tag/")
        situation.inject()
        try:
            if site.visit("/tag/")[1]:
                raise RuntimeError(f"{situation.name}: a visit was recorded")
        finally:
            situation.heal()
        back = time.perf_counter()
        left = whos.backoff_left()
        while not site.visit("/tag/")[1]:
            time.sleep(0.005)
        took = time.perf_counter() - back
    return took, took - left


def added(values: list[float], healthy: list[float], share: float | None = None) -> str:
    found, base = (
        (statistics.median(values), statistics.median(healthy))
        if share is None
        else (percentile(values, share), percentile(healthy, share))
    )
    text = f"{'+' if found >= base else '-'}{ms(abs(found - base))} ms"
    return text if share is not None else f"{text} (x{found / base:.2f})"


def tables(situations: list[Situation]) -> list[str]:
    found = []
    for setup in SETUPS:
        mine = [s for s in situations if s.setup == setup]
        rows = []
        for s in mine:
            base = next(h for h in mine if not h.outage and h.url == s.url)
            first, following = (
                s.times[:: 1 + FOLLOWING],
                [t for i, t in enumerate(s.times) if i % (1 + FOLLOWING)],
            )
            base_first, base_following = (
                base.times[:: 1 + FOLLOWING],
                [t for i, t in enumerate(base.times) if i % (1 + FOLLOWING)],
            )
            served = f"{100 * s.statuses.count(200) / len(s.statuses):.0f} %"
            rows.append(
                [
                    s.name,
                    served,
                    spread(first, ms),
                    added(first, base_first),
                    spread(following, ms),
                    added(following, base_following),
                    added(s.times, base.times, 0.99),
                    s.warnings,
                    f"{s.counted} / {s.served}",
                ]
            )
        header = (
            "situation | HTTP 200 | first request of the outage | added vs healthy | following "
            "requests (within the back-off) | added vs healthy | p99 added | warnings | hits "
            "counted / served"
        )
        found += [f"{setup[0]}:", table(header, rows)]
    return found


def targets(situations: list[Situation]) -> list[Target]:
    """A frozen Redis, and one 50 ms slow, add at most ``MOST_MS`` to the p99 of recorded
    requests, every page served."""
    mine = [s for s in situations if s.setup == SETUPS[2]]
    found = []
    for s in (next(s for s in mine if s.name == name) for name in TARGET_SITUATIONS):
        base = next(h for h in mine if not h.outage and h.url == s.url)
        more, served = (
            (percentile(s.times, 0.99) - percentile(base.times, 0.99)) * 1000,
            s.statuses.count(200) / len(s.statuses),
        )
        goal = f"{s.name}, {SETUPS[2][0]}: p99 added ≤ {MOST_MS:g} ms, pages 100 % served"
        found.append(
            Target(
                goal,
                f"{added(s.times, base.times, 0.99)}, {100 * served:.0f} % served",
                more <= MOST_MS and served == 1,
            )
        )
    return found


def run(options: Options) -> Section:
    with contextlib.ExitStack() as stack:
        site = Site(stack)
        situations = [s for setup in SETUPS for s in site.situations(setup)]
        for _label, path, interval in SETUPS:  # Django, the templates and the scripts warmed up
            with site.using(site.server.url, interval):
                for _ in range(20):
                    site.visit(path)
        interleaved(situations, options.repeats, lambda s: episode(site, s), label="outages")
        faults = [s for s in situations if s.outage and s.setup == SETUPS[1]]
        runs = []
        for backoff, count, among in (
            (1.0, options.recoveries, faults),
            (10.0, options.checks, faults[:1]),
        ):
            runs += [
                (s.name, backoff, [recovery(site, s, backoff) for _ in range(count)])
                for s in among
                if count
            ]
        version = site.direct.info("server")["redis_version"]
    seconds = fixed(3)
    rows = [
        [
            name,
            f"{backoff:g} s",
            len(found),
            spread([t for t, _ in found], seconds),
            spread([e for _, e in found], ms),
        ]
        for name, backoff, found in runs
    ]
    return Section(
        "Redis outages",
        f"redis-server {version}; request timeout {whos.clients.REQUEST_TIMEOUT} s, "
        f"`FAILURE_BACKOFF` 10 s. One request = GET from a new visitor. {options.repeats} outages "
        f"per situation and setup, interleaved; {FOLLOWING} following requests each, "
        f"{EVERY * 1000:g} ms apart. Times in ms: median (min–max). Warnings: lines the "
        "'whos_online' logger wrote during the episodes. Hits: `COUNT_HITS` is on; counted once "
        "Redis is back and the process has written its buffer.",
        [
            *tables(situations),
            "Time to recover: from Redis back to the first recorded visit, polling every 5 ms; "
            "'beyond the back-off' is what remains once the back-off still to run is subtracted.",
            table(
                "situation | FAILURE_BACKOFF | runs | recovery, s: median (min–max) | beyond the "
                "back-off, ms",
                rows,
            ),
        ],
        notes=[
            f"Log lines from the 'whos_online' logger: {site.levels.count('WARNING')} warnings "
            f"and {site.levels.count('INFO')} info lines."
        ],
        targets=targets(situations),
    )
