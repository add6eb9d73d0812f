"""Redis work per request: round trips counted at the client's socket, commands at the server.

Requests go through Django's test client and the whole middleware stack of ``bench.site``, in this
process, against a throw-away redis-server. A round trip is one ``send_packed_command`` of
redis-py (a pipeline or a script is one); commands are what Redis executed, read from ``INFO
commandstats``, which also counts the commands a Lua script runs. Every script is loaded, and the
connection made, before counting: both are paid once per process, not per request.
"""

from __future__ import annotations

import os
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import redis
from django.conf import settings
from django.test import Client, override_settings

from bench import servers, stats
from bench.report import Section, Target
from bench.variants import NAIVE_MIDDLEWARE, WHOS_ONLINE_MIDDLEWARE
from tests.support.helpers import CONNECTION_SET_UP, counting_redis_calls
from whos_online.flushing import flusher as flushing
from whos_online.recording import throttle

if TYPE_CHECKING:
    from collections.abc import Callable

#: Requests counted per scenario, each from another client (address), one after the other.
REQUESTS: Final = 40
#: Commands a client sends on a new connection, and what resets and reads the counts and loads
#: the scripts; none are per request.
NOT_PER_REQUEST: Final = frozenset(
    {name.lower() for name in CONNECTION_SET_UP} | {"config", "info", "script"}
)


@dataclass(frozen=True)
class Scenario:
    label: str
    middleware: str
    whos_online: dict[str, Any]
    authenticated: bool
    #: Send the throttle cookie that the previous, recorded visit of the same client got.
    with_cookie: bool = False
    #: Every request from the same address: the visitor is online already, as they are on most
    #: recorded visits of a site (one per THROTTLE seconds per person).
    returning: bool = False


SCENARIOS: Final = (
    Scenario("naive ZADD middleware, guest (baseline)", NAIVE_MIDDLEWARE, {}, False),
    Scenario("naive ZADD middleware, user", NAIVE_MIDDLEWARE, {}, True),
    Scenario("throttled guest (cookie present)", WHOS_ONLINE_MIDDLEWARE, {}, False, True),
    Scenario("throttled user (cookie present)", WHOS_ONLINE_MIDDLEWARE, {}, True, True),
    Scenario("recorded guest, first visit (defaults)", WHOS_ONLINE_MIDDLEWARE, {}, False),
    Scenario("recorded user, first visit (defaults)", WHOS_ONLINE_MIDDLEWARE, {}, True),
    Scenario(
        "recorded guest, online already (defaults)",
        WHOS_ONLINE_MIDDLEWARE,
        {},
        False,
        returning=True,
    ),
    Scenario(
        "recorded user, online already (defaults)",
        WHOS_ONLINE_MIDDLEWARE,
        {},
        True,
        returning=True,
    ),
    Scenario(
        "recorded guest (`THROTTLE=0`, `COUNT_HITS=True`)",
        WHOS_ONLINE_MIDDLEWARE,
        {"THROTTLE": 0, "COUNT_HITS": True},
        False,
    ),
    Scenario(
        "recorded user (`THROTTLE=0`, `COUNT_HITS=True`)",
        WHOS_ONLINE_MIDDLEWARE,
        {"THROTTLE": 0, "COUNT_HITS": True},
        True,
    ),
)


@dataclass(frozen=True)
class Counted:
    round_trips: list[int]
    commands: list[int]
    by_name: Counter[str]


def _commands(admin: redis.Redis) -> Counter[str]:
    found = admin.info("commandstats")
    return Counter(
        {
            name.removeprefix("cmdstat_"): int(values["calls"])
            for name, values in found.items()
            if name.removeprefix("cmdstat_") not in NOT_PER_REQUEST
        }
    )


def _count(scenario: Scenario, admin: redis.Redis, url: str) -> Counted:
    from django.contrib.auth.models import User

    middleware = [*settings.MIDDLEWARE[:2], scenario.middleware]
    whos_online = {"REDIS_URL": url, "TRUSTED_PROXY_COUNT": 1, **scenario.whos_online}
    with override_settings(MIDDLEWARE=middleware, WHOS_ONLINE=whos_online):
        admin.flushall()
        client = Client()
        if scenario.authenticated:
            client.force_login(User.objects.get_or_create(username="counted")[0])
        visit: Callable[[int], Any] = lambda n: client.get(  # noqa: E731
            "/", HTTP_X_FORWARDED_FOR=f"198.18.{n // 250}.{n % 250 + 1}"
        )
        if scenario.returning:
            visit = lambda n: client.get("/", HTTP_X_FORWARDED_FOR="198.18.9.9")  # noqa: E731
        visit(REQUESTS + 1)  # connects and loads the scripts
        round_trips: list[int] = []
        commands: list[int] = []
        by_name: Counter[str] = Counter()
        for number in range(REQUESTS):
            if scenario.with_cookie:
                visit(number)  # recorded; its response carries the throttle cookie
            else:
                # A first visit: no cookie, and not in the memory of recent cookie-less clients.
                client.cookies.pop(throttle.COOKIE_NAME, None)
                throttle.recent.clear()
            # A flush by the flusher's thread is not part of the request.
            flushing.current().thread.deadline = None
            admin.config_resetstat()
            with counting_redis_calls() as calls:
                response = visit(number)
            if response.status_code != 200:
                msg = f"{scenario.label}: the page answered {response.status_code}"
                raise RuntimeError(msg)
            ran = _commands(admin)
            round_trips.append(len(calls.trips))
            commands.append(sum(ran.values()))
            by_name += ran
    return Counted(round_trips, commands, by_name)


def _describe(counted: Counted) -> str:
    if not counted.by_name:
        return "none"
    requests = len(counted.commands)
    return ", ".join(
        f"{name.upper()} {count / requests:.1f}".replace(".0", "")
        for name, count in counted.by_name.most_common()
    )


def run() -> Section:
    with servers.redis_server() as server:
        admin = redis.Redis.from_url(server.url)
        # The naive middleware, like the sites the throughput part starts, reads its URL here.
        os.environ["REDIS_URL"] = server.url
        try:
            results = [(scenario, _count(scenario, admin, server.url)) for scenario in SCENARIOS]
        finally:
            del os.environ["REDIS_URL"]
    baseline = results[0][1]
    rows = []
    targets = []
    for scenario, counted in results:
        trips = stats.Spread.of(counted.round_trips)
        commands = stats.Spread.of(counted.commands)
        rows.append(
            [
                scenario.label,
                trips.show(stats.number),
                f"{trips.median / statistics.median(baseline.round_trips):.0f}",
                commands.show(stats.number),
                _describe(counted),
            ]
        )
        if scenario.whos_online.get("THROTTLE") == 0:
            who = "user" if scenario.authenticated else "guest"
            targets.append(
                Target(
                    f"recorded {who} with counters on: one round trip",
                    f"{trips.show(stats.number)} round trips",
                    trips.high == 1,
                )
            )
    header = ["request", "round trips", "× naive", "commands run by Redis", "which (per request)"]
    return Section(
        title="Redis work per request",
        intro=(
            f"{REQUESTS} requests per row through the middleware stack, each from another "
            "client address; median (min–max). Commands include those a Lua script runs. "
            "With counters on, each recorded request also carries the page hits buffered "
            "since the last write."
        ),
        tables=[stats.table(header, rows)],
        targets=targets,
    )
