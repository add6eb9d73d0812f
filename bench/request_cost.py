"""Where a recorded request's CPU goes, against the naive ZADD middleware's, part by part.

The throughput part tells how many requests a site serves; this part tells why a recorded one
costs more than a naive one. Both middlewares handle the same anonymous requests (guests online
already, a new address each time, ``THROTTLE=0``) in this process, with a view that does nothing,
in interleaved rounds:

* the worker's share: this thread's CPU time per request (Python, and the kernel's work for its
  socket calls, but not the time spent waiting for Redis), in all and inside the Redis call
  (the rest is the Python around it), and again with the call replaced by a no-op, where the
  same Python runs with warm caches;
* Redis's share: the throw-away redis-server's CPU time per call (``INFO cpu``), over the same
  calls sent on their own, along with two calls that tell the script's parts apart: an EVALSHA
  of a script that only returns, with the recorded visit's keys and arguments (what the call's
  size costs), and with one key and one argument (what running a script at all costs).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Final, TypeAlias
from unittest import mock

import redis
from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse
from django.test import RequestFactory, override_settings

from bench import servers, stats
from bench.naive import NaiveZaddMiddleware
from bench.report import Section
from whos_online import store
from whos_online.backend import clients
from whos_online.middleware import WhosOnlineMiddleware

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.http import HttpRequest

#: Requests per round and middleware; addresses repeat every round, so visitors stay online.
REQUESTS: Final = 400
ROUNDS: Final = 25
RETURN_ONLY: Final = "return 0"

#: One command as sent: its name, then its arguments.
Command: TypeAlias = tuple[str | int | float, ...]


def _requests() -> list[HttpRequest]:
    factory = RequestFactory()
    made: list[HttpRequest] = []
    for number in range(REQUESTS):
        request = factory.get(
            "/", HTTP_X_FORWARDED_FOR=f"198.18.{number // 250}.{number % 250 + 1}"
        )
        request.user = AnonymousUser()
        made.append(request)
    return made


def _cpu_per_call(calls: Callable[[], None], count: int) -> float:
    started = time.thread_time()
    calls()
    return (time.thread_time() - started) / count


def _server_cpu(admin: redis.Redis) -> float:
    found = admin.info("cpu")
    return float(found["used_cpu_sys"]) + float(found["used_cpu_user"])


class _ZaddOnly:
    """Stands in for the naive middleware's client, to time its ``zadd`` or replace it with a
    no-op: a plain object, because a ``Mock`` call costs more than the middleware itself."""

    def __init__(self, zadd: Callable[..., Any]) -> None:
        self.zadd = zadd


def _no_zadd(name: str, mapping: dict[str, float]) -> int:
    return 1


def _no_command(client: object, *command: str | int | float) -> int:
    return 0


class _CallTimer:
    """This thread's CPU time spent inside Redis calls, summed: the rest of a request's is the
    middleware's Python (and Django's) around them."""

    def __init__(self) -> None:
        self.spent = 0.0

    def timed(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return call(*args, **kwargs)
            finally:
                self.spent += time.thread_time() - started

        return timed_call


def _worker(requests: list[HttpRequest]) -> dict[str, list[float]]:
    """CPU per request in this thread, by middleware: in all, inside the Redis call, and with
    a no-op in place of the call."""

    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    ours = WhosOnlineMiddleware(view)
    naive = NaiveZaddMiddleware(view)
    timer = _CallTimer()
    real_client = naive.client
    timed_execute = timer.timed(clients.execute)

    def serve(middleware: Callable[[HttpRequest], Any]) -> None:
        for request in requests:
            middleware(request)

    def naive_with(client: object) -> Callable[[], None]:
        def calls() -> None:
            naive.client = client  # type: ignore [assignment]
            try:
                serve(naive)
            finally:
                naive.client = real_client

        return calls

    def ours_with(execute: Callable[..., Any]) -> Callable[[], None]:
        def calls() -> None:
            with mock.patch.object(store, "execute", execute):
                serve(ours)

        return calls

    runs = {
        "naive": naive_with(_ZaddOnly(timer.timed(real_client.zadd))),
        "whos_online": ours_with(timed_execute),
        "naive, no Redis": naive_with(_ZaddOnly(_no_zadd)),
        "whos_online, no Redis": ours_with(_no_command),
    }
    serve(ours)  # connects, loads the script, puts everybody online
    serve(naive)
    measured: dict[str, list[float]] = defaultdict(list)
    for round_number in range(ROUNDS):
        for name in stats.rotated(list(runs), round_number):
            timer.spent = 0.0
            measured[name].append(_cpu_per_call(runs[name], len(requests)))
            if "no Redis" not in name:
                measured[f"{name}, in the call"].append(timer.spent / len(requests))
    return measured


def _captured(requests: list[HttpRequest]) -> list[Command]:
    """The commands the whos_online middleware sends for ``requests``, as it sends them."""
    sent: list[Command] = []

    def capture(client: object, *command: str | int | float) -> int:
        sent.append(command)
        return 0

    middleware = WhosOnlineMiddleware(lambda request: HttpResponse())
    with mock.patch.object(store, "execute", capture):
        for request in requests:
            middleware(request)
    return sent


def _server(requests: list[HttpRequest], admin: redis.Redis) -> dict[str, list[float]]:
    """Redis's CPU per call: the naive ZADD, the recorded visit's script, and two bare scripts."""
    script = _captured(requests)
    if len(script) != len(requests) or any(command[0] != "EVALSHA" for command in script):
        msg = f"expected one EVALSHA per request, the middleware sent {len(script)} commands"
        raise RuntimeError(msg)
    bare = admin.script_load(RETURN_ONLY)
    now = time.time()
    commands: dict[str, list[Command]] = {
        "naive ZADD": [("ZADD", "naive:guests", now, f"198.18.0.{n}") for n in range(REQUESTS)],
        "recorded visit's script": script,
        "script that only returns, same keys and arguments": [
            ("EVALSHA", bare, *command[2:]) for command in script
        ],
        "script that only returns, one key and argument": [
            ("EVALSHA", bare, 1, "k", str(n)) for n in range(REQUESTS)
        ],
    }
    pool_connection = admin.connection_pool.get_connection()
    try:

        def send(sent: list[Command]) -> float:
            before = _server_cpu(admin)
            for command in sent:
                pool_connection.send_command(*command)  # type: ignore [no-untyped-call]
                pool_connection.read_response()
            return (_server_cpu(admin) - before) / len(sent)

        for sent in commands.values():
            send(sent)
        measured: dict[str, list[float]] = defaultdict(list)
        for round_number in range(ROUNDS):
            for name in stats.rotated(list(commands), round_number):
                measured[name].append(send(commands[name]))
    finally:
        admin.connection_pool.release(pool_connection)
    return measured


def _row(label: str, values: list[float], baseline: list[float]) -> list[str]:
    spread = stats.Spread.of(values)
    return [label, stats.us(spread.median), stats.ratios(values, baseline).show(stats.ratio)]


def run() -> Section:
    requests = _requests()
    with servers.redis_server() as server:
        admin = redis.Redis.from_url(server.url)
        os.environ["REDIS_URL"] = server.url  # the naive middleware reads it
        whos_online = {"REDIS_URL": server.url, "TRUSTED_PROXY_COUNT": 1, "THROTTLE": 0}
        try:
            with override_settings(WHOS_ONLINE=whos_online):
                worker = _worker(requests)
                redis_side = _server(requests, admin)
        finally:
            del os.environ["REDIS_URL"]
    naive, naive_python = worker["naive"], worker["naive, no Redis"]
    ours, ours_python = worker["whos_online"], worker["whos_online, no Redis"]
    zadd = redis_side["naive ZADD"]

    def minus(first: list[float], second: list[float]) -> list[float]:
        return [a - b for a, b in zip(first, second, strict=True)]

    naive_call, ours_call = worker["naive, in the call"], worker["whos_online, in the call"]
    worker_rows = [
        _row("naive middleware, whole request", naive, naive),
        _row("whos_online middleware, whole request", ours, naive),
        _row("naive middleware, inside its Redis call", naive_call, naive),
        _row("whos_online middleware, inside its Redis call", ours_call, naive),
        _row("naive middleware, around its Redis call", minus(naive, naive_call), naive),
        _row("whos_online middleware, around its Redis call", minus(ours, ours_call), naive),
        _row("naive middleware, no Redis call (a no-op instead)", naive_python, naive),
        _row("whos_online middleware, no Redis call (a no-op instead)", ours_python, naive),
    ]
    redis_rows = [_row(name, values, zadd) for name, values in redis_side.items()]
    return Section(
        title="Where a recorded request's CPU goes",
        intro=(
            f"{REQUESTS} anonymous requests per round, guests online already, `THROTTLE=0`, "
            f"{ROUNDS} interleaved rounds; CPU µs per request, median, and its ratio to the "
            "baseline measured in the same round, median (min–max). First the worker's share "
            "(this thread's CPU, without the time spent waiting for Redis), against the naive "
            "middleware's whole request: in all, inside the Redis call (from redis-py's method "
            "or whos_online's `execute` to the reply), around it (the middleware's Python, and "
            "the request's), and with a no-op in place of the call, where the same Python runs "
            "with warm caches; then Redis's share, per call, against the naive ZADD."
        ),
        tables=[
            stats.table(["worker", "CPU µs", "× naive request"], worker_rows),
            stats.table(["Redis", "CPU µs", "× naive ZADD"], redis_rows),
        ],
    )
