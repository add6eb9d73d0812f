"""Redis work per request, against the naive ZADD middleware: round trips counted at redis-py's
socket, and commands as Redis counts them (``INFO commandstats``, a script's own commands
included), for each kind of request through the bench site's middleware stack, in this process.

A recorded visit is queued and written by the process's next flush: each request is counted with
that flush (``whos_online.flush()`` right after it). Connecting and loading the scripts happen
before counting: they are paid once per process, not per request.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final
from unittest import mock

from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client, override_settings

import whos_online
from bench import internals as whos
from bench.harness import servers
from bench.harness.clients import address
from bench.harness.report import Section, Target, number, table
from bench.harness.rounds import Spread
from bench.site import NAIVE_MIDDLEWARE, WHOS_ONLINE_MIDDLEWARE
from tests.support.helpers import CONNECTION_SET_UP, counting_redis_calls

#: What opens a connection, resets and reads the counts, loads the scripts: not per request.
NOT_PER_REQUEST: Final = {name.lower() for name in CONNECTION_SET_UP} | {"config", "info", "script"}
HITS: Final = {"THROTTLE": 0, "COUNT_HITS": True}


@dataclass(frozen=True)
class Options:
    requests: int = 40


QUICK = Options(requests=5)


@dataclass(frozen=True)
class Scenario:
    label: str
    middleware: str = WHOS_ONLINE_MIDDLEWARE
    settings: tuple[tuple[str, Any], ...] = ()
    user: bool = False
    #: Sends the throttle cookie its previous, recorded visit got.
    cookie: bool = False
    #: Every request from one address: online already, as most recorded visitors are.
    returning: bool = False


SCENARIOS: Final = (
    Scenario("naive ZADD middleware, guest (baseline)", NAIVE_MIDDLEWARE),
    Scenario("naive ZADD middleware, user", NAIVE_MIDDLEWARE, user=True),
    Scenario("throttled guest (cookie present)", cookie=True),
    Scenario("throttled user (cookie present)", user=True, cookie=True),
    Scenario("recorded guest, first visit (defaults)"),
    Scenario("recorded user, first visit (defaults)", user=True),
    Scenario("recorded guest, online already (defaults)", returning=True),
    Scenario("recorded user, online already (defaults)", user=True, returning=True),
    Scenario("recorded guest (`THROTTLE=0`, `COUNT_HITS=True`)", settings=(*HITS.items(),)),
    Scenario(
        "recorded user (`THROTTLE=0`, `COUNT_HITS=True`)", settings=(*HITS.items(),), user=True
    ),
)


def count(scenario: Scenario, node: servers.Node, url: str, requests: int) -> list[Any]:
    """Per request: round trips, commands; and the commands by name over all of them."""
    middleware = [*settings.MIDDLEWARE[:2], scenario.middleware]
    options = {"REDIS_URL": url, "TRUSTED_PROXY_COUNT": 1, **dict(scenario.settings)}
    trips, commands, by_name = [], [], Counter[str]()
    with override_settings(MIDDLEWARE=middleware, WHOS_ONLINE=options):
        node.client.flushall()
        client = Client()
        if scenario.user:
            client.force_login(User.objects.get_or_create(username="counted")[0])

        def visit(number: int) -> Any:
            where = address(9 if scenario.returning else number, "198.18")
            return client.get("/", HTTP_X_FORWARDED_FOR=where)

        visit(requests + 1)  # connects and loads the scripts
        whos_online.flush()
        for number in range(requests):
            if scenario.cookie:
                visit(number)  # recorded; its response carries the throttle cookie
                whos_online.flush()
            else:  # a first visit: no cookie, and not in the memory of recent clients
                client.cookies.pop(whos.COOKIE_NAME, None)
                whos.forget_recent_clients()
            node.start()
            with counting_redis_calls() as calls:
                if visit(number).status_code != 200:
                    raise RuntimeError(f"{scenario.label}: the page did not answer 200")
                whos_online.flush()
            ran = Counter({k: n for k, (n, _) in node.calls().items() if k not in NOT_PER_REQUEST})
            trips.append(len(calls.trips))
            commands.append(sum(ran.values()))
            by_name += ran
    return [trips, commands, by_name]


def which(by_name: Counter[str], requests: int) -> str:
    found = [f"{k.upper()} {n / requests:.1f}".replace(".0", "") for k, n in by_name.most_common()]
    return ", ".join(found) or "none"


def run(options: Options) -> Section:
    with servers.redis_server() as server:
        node = servers.Node.of(server)
        # The naive middleware, like the sites the throughput part starts, reads its URL here.
        with mock.patch.dict(os.environ, REDIS_URL=server.url):
            counted = [(s, count(s, node, server.url, options.requests)) for s in SCENARIOS]
    naive = Spread.of(counted[0][1][0]).median
    rows, targets = [], []
    for scenario, (trips, commands, by_name) in counted:
        spread = Spread.of(trips)
        times_naive = f"{spread.median / naive:.0f}"
        row = [scenario.label, spread.show(number), times_naive, Spread.of(commands).show(number)]
        rows.append([*row, which(by_name, options.requests)])
        if scenario.settings:
            measured = f"{spread.show(number)} round trips"
            who = "user" if scenario.user else "guest"
            goal = f"recorded {who} with counters on: one round trip"
            targets.append(Target(goal, measured, spread.high == 1))
    return Section(
        "Redis work per request",
        f"{options.requests} requests per row through the middleware stack, each from another "
        "client address, each with the flush that writes it; median (min–max). Commands include "
        "those a Lua script runs. With counters on, each recorded request also carries the page "
        "hits buffered since the last write.",
        [
            table(
                "request | round trips | × naive | commands run by Redis | which (per request)",
                rows,
            )
        ],
        targets=targets,
    )
