"""What rooms cost: per request, per read of a room, and per member in Redis memory.

Requests in this process through the middleware and a view that puts its request in a room (the
process's CPU, the flush of what a batch queued included): bare (the view alone), a throttled
request staying in its room, a request moving to another room each time (so each is recorded);
batches of each in turn. Reads of a room's 50 newest names and counts with 10, 10 000 and
1 000 000 people in it, among 100 000 rooms. Memory: ``used_memory`` of guests recorded in rooms
less that of the same guests in none, per guest.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory, override_settings

import whos_online
from bench import internals as whos
from bench.harness import servers
from bench.harness.clients import BROWSER, address
from bench.harness.report import Section, number, ratio, table, us
from bench.harness.rounds import interleaved
from whos_online.middleware import WhosOnlineMiddleware

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis


@dataclass(frozen=True)
class Options:
    requests: int = 2_000
    batches: int = 7
    largest: int = 1_000_000
    rooms: int = 100_000
    reads: int = 300
    guests: int = 10_000


QUICK = Options(requests=100, batches=1, largest=20_000, rooms=1_000, reads=20, guests=500)


def requests(count: int, cookies: dict[str, str]) -> list[HttpRequest]:
    made: list[HttpRequest] = []
    for n in range(count):
        where = address(n, "10.1")
        request = RequestFactory().get("/topic/", REMOTE_ADDR=where, HTTP_USER_AGENT=BROWSER)
        request.COOKIES.update({} if not cookies else {whos.COOKIE_NAME: cookies[where]})
        request.user = AnonymousUser()
        made.append(request)
    return made


def in_room(room: Callable[[HttpRequest], str]) -> Callable[[HttpRequest], HttpResponse]:
    def view(request: HttpRequest) -> HttpResponse:
        whos_online.set_room(request, room(request))
        return HttpResponse("topic")

    return view


def request_costs(options: Options) -> list[list[str]]:
    """Rows: bare, staying in a room (throttled), moving to another room each time."""
    to_topic_1 = WhosOnlineMiddleware(in_room(lambda _: "topic:1"))
    # Each visitor's cookie, handed out for topic:1 once the process knows its shard's epoch
    # (from its first flush), as it does after its first second.
    to_topic_1(requests(1, {})[0])
    whos_online.flush()
    cookies = {}
    for request in requests(options.requests, {}):
        response = to_topic_1(request)
        assert isinstance(response, HttpResponse)
        cookies[request.META["REMOTE_ADDR"]] = response.cookies[whos.COOKIE_NAME].value
    last: dict[str, str] = {}

    def next_room(request: HttpRequest) -> str:
        """Another room than the visitor's last and than the cookie's: always recorded."""
        where = request.META["REMOTE_ADDR"]
        last[where] = "topic:3" if last.get(where) == "topic:2" else "topic:2"
        return last[where]

    mover = WhosOnlineMiddleware(in_room(next_room))
    handlers: dict[str, Callable[[HttpRequest], object]] = {
        "bare (the view alone)": in_room(lambda _: "topic:1"),
        "staying in its room (throttled: no Redis command)": to_topic_1,
        "moving to another room (recorded, out of the former room)": mover,
    }
    batch = requests(options.requests, cookies)

    def cpu_per_request(label: str) -> float:
        started = time.process_time()
        for request in batch:
            handlers[label](request)
        if not whos_online.flush():
            raise RuntimeError("the visits of a batch could not be written")
        return (time.process_time() - started) / len(batch)

    found = interleaved(list(handlers), options.batches, cpu_per_request, label="rooms")
    bare = statistics.median(found[next(iter(handlers))])
    return [
        [label, f"{statistics.median(v) * 1e6:.1f}", ratio(statistics.median(v) / bare)]
        for label, v in found.items()
    ]


def room_reads(node: servers.Node, config: whos.Config, options: Options) -> list[list[str]]:
    client, now = node.client, time.time()
    client.flushall()
    shard = whos.keyspace.layout(config)[0]
    sizes = (10, 10_000, options.largest)
    for size in sizes:
        key = whos.keyspace.room_key(shard, f"room-{size}", "guests")
        servers.fill(client, key, ((f"g{size}-{n}", now - n / 1000) for n in range(size)))
    pipe = client.pipeline(transaction=False)
    for n in range(options.rooms - len(sizes)):
        pipe.zadd(whos.keyspace.room_key(shard, f"topic:{n}", "users"), {str(n): now})
        pipe.zadd(shard.key(whos.keyspace.ROOMS_INDEX), {f"topic:{n}": now})
    pipe.execute()
    rows = []
    for size in sizes:
        room = f"room-{size}"
        whos.snapshot.snapshot(client, config, limit=50, now=now, room=room)  # the script loaded
        cpu, took = node.start(), []
        for _ in range(options.reads):
            started = time.perf_counter()
            whos.snapshot.snapshot(client, config, limit=50, now=now, room=room)
            took.append(time.perf_counter() - started)
        usage = node.usage(cpu)
        rows.append(
            [number(size), us(statistics.median(took)), f"{usage.command_us / usage.calls:.1f}"]
        )
    return rows


def member_bytes(client: redis.Redis, guests: int) -> float:
    used = []
    for room in (None, "topic"):
        client.flushall()
        before = int(client.info("memory")["used_memory"])
        for n in range(guests):
            whos_online.record_guest(address(n, "10.2"), room=room and f"{room}:{n % 1_000}")
        used.append(int(client.info("memory")["used_memory"]) - before)
    return (used[1] - used[0]) / guests


def run(options: Options) -> Section:
    settings = {"SNAPSHOT_MAX_AGE": 0, "TRUSTED_PROXY_COUNT": 0}
    with (
        servers.redis_server() as server,
        override_settings(WHOS_ONLINE={"REDIS_URL": server.url, **settings}),
    ):
        node = servers.Node.of(server)
        costs = request_costs(options)
        member = member_bytes(node.client, options.guests)
        reads = room_reads(node, whos.get_config(), options)
    return Section(
        "Rooms",
        f"Requests: {options.requests} per batch, {options.batches} batches of each kind in turn, "
        "CPU time of this process (the middleware, a view that sets the room, redis-py, and the "
        "flush of what the batch queued) per request, median over the batches. Reads: "
        f"{options.reads} reads of a room's 50 newest names and its counts, among "
        f"{number(options.rooms)} rooms.",
        [
            table("request | CPU µs | × bare", costs),
            table("people in the room read | round trip, median | Redis µs per call", reads),
            table(
                "memory | bytes",
                [["per room member (its set, who-is-where HASH, index of rooms)", f"{member:.0f}"]],
            ),
        ],
    )
