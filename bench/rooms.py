"""What rooms cost: per request, per read of a room, and per member in Redis memory.

* Requests, in this process, through the middleware and a view that puts its request in a room
  (the CPU time of the process, Redis on loopback): bare (the view alone), a throttled request
  that stays in its room (its cookie names that room), and a request that moves to another room
  each time (so each one is recorded, and takes its visitor out of the room they were in).
  Batches of each run in turn; the table gives medians over the batches, and ratios to bare.
* Reading a room (``{% whos_online room=… %}``'s one script call, 50 names) with 10, 10 000 and
  1 000 000 people in it, among 100 000 rooms: the round trip's median, and Redis's own time per
  call from ``INFO commandstats``. The big rooms are filled with ZADD, the others hold one member
  each; a read touches the sets of its own room only.
* Memory per room member: ``used_memory`` after 10 000 guests recorded in rooms, less after the
  same guests recorded without a room, per guest (the room's set, the HASH of who is where, the
  index of rooms).
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Final

import redis
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory, override_settings

import whos_online
from bench import servers, sorted_sets, stats
from bench.report import Section
from whos_online.backend import keyspace
from whos_online.config import settings as conf
from whos_online.middleware import WhosOnlineMiddleware
from whos_online.recording import rooms, throttle
from whos_online.store import keys, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable

    from whos_online.config.settings import Config

REQUESTS: Final = 2_000
BATCHES: Final = 7
ROOM_SIZES: Final = (10, 10_000, 1_000_000)
ROOMS: Final = 100_000
READS: Final = 300
MEMORY_GUESTS: Final = 10_000
BROWSER: Final = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"


def _requests(count: int, *, cookies: Callable[[int], dict[str, str]]) -> list[HttpRequest]:
    factory = RequestFactory()
    found: list[HttpRequest] = []
    for number in range(count):
        address = f"10.1.{number // 250}.{number % 250 + 1}"
        request = factory.get("/topic/", REMOTE_ADDR=address, HTTP_USER_AGENT=BROWSER)
        request.COOKIES.update(cookies(number))
        request.user = AnonymousUser()
        found.append(request)
    return found


def _view(room: Callable[[HttpRequest], str]) -> Callable[[HttpRequest], HttpResponse]:
    def view(request: HttpRequest) -> HttpResponse:
        rooms.set_room(request, room(request))
        return HttpResponse("topic")

    return view


def _cpu_per_request(handler: Callable[[HttpRequest], object], batch: list[HttpRequest]) -> float:
    """The CPU of the process (all its threads) per request of ``batch``, the writing of what
    it queued included: flushed here, so that the flusher's thread does not write it while the
    next variant is timed."""
    started = time.process_time()
    for request in batch:
        handler(request)
    if not whos_online.flush():
        raise RuntimeError("the visits of a batch could not be written")
    return (time.process_time() - started) / len(batch)


def _request_costs() -> list[list[str]]:
    """Rows: bare, staying in a room (throttled), moving to another room each time."""
    # Each visitor's cookie, issued for topic:1 by a recorded visit first, once the process
    # knows the shard's epoch (from its first flush), as it does after its first second: a
    # cookie handed out before then is renewed by the visitor's next request.
    first_visits = _requests(REQUESTS, cookies=lambda number: {})
    to_topic_1 = WhosOnlineMiddleware(_view(lambda request: "topic:1"))
    to_topic_1(_requests(1, cookies=lambda number: {})[0])
    if not whos_online.flush():
        raise RuntimeError("the first visit could not be written")
    cookie_of: dict[str, str] = {}
    for request in first_visits:
        response = to_topic_1(request)
        assert isinstance(response, HttpResponse)
        cookie_of[request.META["REMOTE_ADDR"]] = response.cookies[throttle.COOKIE_NAME].value

    def with_cookie(number: int) -> dict[str, str]:
        return {throttle.COOKIE_NAME: cookie_of[f"10.1.{number // 250}.{number % 250 + 1}"]}

    staying = _requests(REQUESTS, cookies=with_cookie)
    moving = _requests(REQUESTS, cookies=with_cookie)
    last_room: dict[str, str] = {}

    def next_room(request: HttpRequest) -> str:
        """Another room than the visitor's last (and than the cookie's): always recorded."""
        address = request.META["REMOTE_ADDR"]
        room = last_room[address] = "topic:3" if last_room.get(address) == "topic:2" else "topic:2"
        return room

    variants: list[tuple[str, Callable[[HttpRequest], object], list[HttpRequest]]] = [
        ("bare (the view alone)", _view(lambda request: "topic:1"), staying),
        ("staying in its room (throttled: no Redis command)", to_topic_1, staying),
        (
            "moving to another room (recorded, out of the former room)",
            WhosOnlineMiddleware(_view(next_room)),
            moving,
        ),
    ]
    measured: dict[str, list[float]] = {label: [] for label, _, _ in variants}
    for batch in range(BATCHES):
        for label, handler, requests in stats.rotated(variants, batch):
            measured[label].append(_cpu_per_request(handler, requests))
    bare_median = statistics.median(measured[variants[0][0]])
    return [
        [
            label,
            f"{statistics.median(values) * 1e6:.1f}",
            stats.ratio(statistics.median(values) / bare_median),
        ]
        for label, values in measured.items()
    ]


def _evalsha_usec(client: redis.Redis) -> tuple[int, float]:
    found = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(found.get("calls", 0)), float(found.get("usec", 0))


def _room_reads(client: redis.Redis, config: Config) -> list[list[str]]:
    client.flushall()
    now = time.time()
    base = keyspace.layout(config)[0]
    for size in ROOM_SIZES:
        key = keys.room_key(base, f"room-{size}", "guests")
        sorted_sets.fill(client, key, ((f"g{size}-{n}", now - n / 1000) for n in range(size)))
    pipe = client.pipeline(transaction=False)
    for number in range(ROOMS - len(ROOM_SIZES)):
        pipe.zadd(keys.room_key(base, f"topic:{number}", "users"), {str(number): now})
        pipe.zadd(base.key(keys.ROOMS_INDEX), {f"topic:{number}": now})
        if number % 5_000 == 4_999:
            pipe.execute()
    pipe.execute()
    rows = []
    for size in ROOM_SIZES:
        room = f"room-{size}"
        snapshot.snapshot(client, config, limit=50, now=now, room=room)  # the script is loaded
        calls, usec = _evalsha_usec(client)
        took = []
        for _ in range(READS):
            started = time.perf_counter()
            snapshot.snapshot(client, config, limit=50, now=now, room=room)
            took.append(time.perf_counter() - started)
        more_calls, more_usec = _evalsha_usec(client)
        per_call = (more_usec - usec) / max(more_calls - calls, 1)
        rows.append([stats.number(size), stats.us(statistics.median(took)), f"{per_call:.1f}"])
    return rows


def _member_bytes(client: redis.Redis, config: Config) -> float:
    from whos_online import api

    used = []
    for room in (None, "topic"):
        client.flushall()
        before = int(client.info("memory")["used_memory"])
        for number in range(MEMORY_GUESTS):
            name = None if room is None else f"{room}:{number % 1_000}"
            api.record_guest(f"10.2.{number // 250}.{number % 250 + 1}", room=name)
        used.append(int(client.info("memory")["used_memory"]) - before)
    return (used[1] - used[0]) / MEMORY_GUESTS


def run() -> Section:
    with (
        servers.redis_server() as server,
        override_settings(WHOS_ONLINE={"REDIS_URL": server.url, "SNAPSHOT_MAX_AGE": 0}),
    ):
        config = conf.get_config()
        client = redis.Redis.from_url(server.url)
        requests = _request_costs()
        member = _member_bytes(client, config)
        reads = _room_reads(client, config)
    return Section(
        title="Rooms",
        intro=(
            f"`python3 scripts/dev.py bench --only rooms`. Requests: {REQUESTS} per batch, "
            f"{BATCHES} batches of each kind in turn, CPU time of this process (the middleware, "
            "a view that sets the room, redis-py) per request, median over the batches. Reads: "
            f"{READS} reads of a room's 50 newest names and its counts, among "
            f"{stats.number(ROOMS)} rooms."
        ),
        tables=[
            stats.table(["request", "CPU µs", "× bare"], requests),
            stats.table(
                ["people in the room read", "round trip, median", "Redis µs per call"], reads
            ),
            stats.table(
                ["memory", "bytes"],
                [["per room member (its set, who-is-where HASH, index of rooms)", f"{member:.0f}"]],
            ),
        ],
    )
