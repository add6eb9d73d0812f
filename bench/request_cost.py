"""Where a recorded request's CPU goes, against the naive ZADD middleware's, part by part.

Both middlewares handle the same anonymous requests (guests online already, ``THROTTLE=0``,
whos_online writing each visit before its response: ``FLUSH_INTERVAL=0``) in this process, in
interleaved rounds. The worker's share: this thread's CPU per request, in all, inside the Redis
call (redis-py's ``zadd``, whos_online's ``scripts.run``) and with a no-op in its place (the
reply replayed), where the same Python runs with warm caches. Redis's share: its CPU per call
(``INFO cpu``) for the same calls sent alone, and two scripts that only return, one with the
visit's keys and arguments (the call's size) and one with a key and an argument.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from unittest import mock

from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse
from django.test import RequestFactory, override_settings

from bench import internals as whos
from bench.harness import servers
from bench.harness.clients import address
from bench.harness.report import Section, ratio, table, us
from bench.harness.rounds import Spread, interleaved, minus, ratios
from bench.naive import NaiveZaddMiddleware
from whos_online.middleware import WhosOnlineMiddleware

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from django.http import HttpRequest

#: One command as sent: its name, then its arguments.
Command = tuple[str | int | float, ...]
WORKER_ROWS: Final = {
    "naive": "naive middleware, whole request",
    "whos_online": "whos_online middleware, whole request",
    "naive, in the call": "naive middleware, inside its Redis call",
    "whos_online, in the call": "whos_online middleware, inside its Redis call",
    "naive, around": "naive middleware, around its Redis call",
    "whos_online, around": "whos_online middleware, around its Redis call",
    "naive, no Redis": "naive middleware, no Redis call (a no-op instead)",
    "whos_online, no Redis": "whos_online middleware, no Redis call (a no-op instead)",
}


@dataclass(frozen=True)
class Options:
    requests: int = 400
    rounds: int = 25


QUICK = Options(requests=50, rounds=2)


class Timed:
    """Stands in for a Redis call: times it (this thread's CPU, summed), or answers at once."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call, self.spent, self.replies = call, 0.0, list[Any]()

    def __call__(self, *args: Any) -> Any:
        started = time.thread_time()
        self.replies.append(self.call(*args))
        self.spent += time.thread_time() - started
        return self.replies[-1]


def worker(requests: Sequence[HttpRequest], rounds: int) -> dict[str, list[float]]:
    """CPU per request in this thread, by middleware: in all, inside the Redis call, and with
    a no-op in place of the call."""
    ours, naive = (
        WhosOnlineMiddleware(lambda _: HttpResponse()),
        NaiveZaddMiddleware(lambda _: HttpResponse()),
    )
    calls = {"naive": Timed(naive.client.zadd), "whos_online": Timed(whos.scripts.run)}
    for request in requests:  # connects, loads the script, puts everybody online
        ours(request)
        naive(request)
    replayed = calls["whos_online"].replies[-1] if calls["whos_online"].replies else None
    no_op = {"naive": lambda *_: 1, "whos_online": lambda *_: replayed}

    def serve(cell: str) -> tuple[float, float]:
        middleware, stub = cell.partition(", ")[::2]
        call = calls[middleware] if not stub else Timed(no_op[middleware])
        call.spent = 0.0
        with (
            mock.patch.object(naive.client, "zadd", call),
            mock.patch.object(whos.scripts, "run", call),
        ):
            started = time.thread_time()
            for request in requests:
                (ours if middleware == "whos_online" else naive)(request)
            spent = time.thread_time() - started
        return spent / len(requests), call.spent / len(requests)

    found = interleaved(
        ["naive", "whos_online", "naive, no Redis", "whos_online, no Redis"], rounds, serve
    )
    measured = {name: [whole for whole, _ in runs] for name, runs in found.items()}
    for name in ("naive", "whos_online"):
        measured[f"{name}, in the call"] = [inside for _, inside in found[name]]
        measured[f"{name}, around"] = minus(measured[name], measured[f"{name}, in the call"])
    return measured


def server(
    requests: Sequence[HttpRequest], node: servers.Node, rounds: int
) -> dict[str, list[float]]:
    """Redis's CPU per call: the naive ZADD, the recorded visit's script, two bare scripts."""
    sent, original = list[Any](), whos.scripts.run

    def capture(client: Any, calls: Sequence[Any]) -> list[Any]:
        sent.extend(calls)
        return original(client, calls)

    middleware = WhosOnlineMiddleware(lambda _: HttpResponse())
    with mock.patch.object(whos.scripts, "run", capture):
        for request in requests:
            middleware(request)
    bare, now = node.client.script_load("return 0"), time.time()
    script = [
        ("EVALSHA", whos.scripts.sha1_of(c.source), len(c.keys), *c.keys, *c.args) for c in sent
    ]
    commands: dict[str, list[Command]] = {
        "naive ZADD": [
            ("ZADD", "naive:guests", now, f"198.18.0.{n}") for n in range(len(requests))
        ],
        "recorded visit's script": script,
        "script that only returns, same keys and arguments": [
            ("EVALSHA", bare, *c[2:]) for c in script
        ],
        "script that only returns, one key and argument": [
            ("EVALSHA", bare, 1, "k", str(n)) for n in range(len(requests))
        ],
    }
    connection = node.client.connection_pool.get_connection()

    def send(name: str) -> float:
        before = node.used_cpu()
        for command in commands[name]:
            connection.send_command(*command)  # type: ignore [no-untyped-call]
            connection.read_response()
        return (node.used_cpu() - before) / len(commands[name])

    try:
        for name in commands:
            send(name)
        return interleaved(list(commands), rounds, send)
    finally:
        node.client.connection_pool.release(connection)


def rows(
    measured: dict[str, list[float]], labels: dict[str, str], base: list[float]
) -> list[list[str]]:
    return [
        [label, us(Spread.of(measured[k]).median), ratios(measured[k], base).show(ratio)]
        for k, label in labels.items()
    ]


def run(options: Options) -> Section:
    requests = []
    for n in range(options.requests):
        request = RequestFactory().get("/", HTTP_X_FORWARDED_FOR=address(n, "198.18"))
        request.user = AnonymousUser()
        requests.append(request)
    settings = {"TRUSTED_PROXY_COUNT": 1, "THROTTLE": 0, "FLUSH_INTERVAL": 0}
    with servers.redis_server() as redis_server:
        url = redis_server.url
        with (
            mock.patch.dict(os.environ, REDIS_URL=url),
            override_settings(WHOS_ONLINE={"REDIS_URL": url, **settings}),
        ):
            at_worker = worker(requests, options.rounds)
            at_redis = server(requests, servers.Node.of(redis_server), options.rounds)
    zadd = at_redis["naive ZADD"]
    return Section(
        "Where a recorded request's CPU goes",
        f"{options.requests} anonymous requests per round, guests online already, `THROTTLE=0`, "
        f"`FLUSH_INTERVAL=0`, {options.rounds} interleaved rounds; CPU µs per request, median, "
        "and its ratio to the baseline measured in the same round, median (min–max). First the "
        "worker's share (this thread's CPU, without the time spent waiting for Redis), against "
        "the naive middleware's whole request: in all, inside the Redis call (from redis-py's "
        "`zadd` or whos_online's `scripts.run` to the reply), around it, and with a no-op in "
        "place of the call; then Redis's share, per call, against the naive ZADD.",
        [
            table(
                "worker | CPU µs | × naive request",
                rows(at_worker, WORKER_ROWS, at_worker["naive"]),
            ),
            table("Redis | CPU µs | × naive ZADD", rows(at_redis, {k: k for k in at_redis}, zadd)),
        ],
    )
