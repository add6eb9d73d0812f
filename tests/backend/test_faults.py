"""Fault injection on a real redis-server: every request path fails open, the cleanup fails loudly.

Each test starts its own redis-server (``tests.support.redis_server.RedisServer``) and breaks it for
real: stopped (nothing listening), killed with SIGKILL while the app holds open connections, frozen
with SIGSTOP, slow (every reply held back a second by a proxy in front of it), full (``maxmemory``
with ``noeviction``, filled until writes get ``OOM``) or demoted to a read-only replica of another
server. No Redis call is mocked; the circuit breaker's clock
(``whos_online.backend.connection.time.monotonic``) is replaced so that back-off periods pass
without sleeping, and the request client's connections are watched (not changed) to count calls.
How long requests take during each outage is measured by ``bench/outages.py``, not asserted here.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import pytest
import redis
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command, execute_from_command_line
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import engines
from django.test import Client
from django.urls import path
from redis.connection import AbstractConnection, Connection

import whos_online
from tests import urls as test_urls
from tests.support.delaying_proxy import DelayingProxy
from tests.support.helpers import configure, guest
from tests.support.redis_faults import (
    allow_writes_without_snapshots,
    demote,
    fail_snapshots,
    fill_until_oom,
)
from tests.support.redis_server import RedisServer
from whos_online.backend import clients, connection
from whos_online.config import settings as conf
from whos_online.config.settings import get_config
from whos_online.recording import throttle
from whos_online.store import epochs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from django.contrib.auth.models import AbstractUser
    from django.http.response import HttpResponseBase

pytestmark = [pytest.mark.urls(__name__), pytest.mark.django_db]

#: The default FAILURE_BACKOFF, which these tests leave in place.
BACKOFF = 10.0
#: A guest recorded before the fault; the pages show "alice and 1 guest" while Redis is healthy.
SEEDED_GUEST = "198.51.100.1"
COOKIE = throttle.COOKIE_NAME

# A page that uses every template tag, and a view that reads every part of the API.
TAGS = engines["django"].from_string(
    "{% load whos_online %}{% whos_online visitors=True %}"
    "<p>total={% online_count %};users={% online_count 'users' %};"
    "guests={% online_count 'guests' %};seen={% last_seen alice %};</p>"
)


def tags_page(request: HttpRequest) -> HttpResponse:
    alice = get_user_model().objects.get(username="alice")
    return HttpResponse(TAGS.render({"alice": alice}, request))


def api_view(request: HttpRequest) -> JsonResponse:
    alice = get_user_model().objects.get(username="alice")
    seen = whos_online.last_seen(alice)
    return JsonResponse(
        {
            "users": [user.name for user in whos_online.online_users(limit=10)],
            "counts": list(whos_online.online_counts()),
            "is_online": whos_online.is_online(alice),
            "last_seen": seen.isoformat() if seen else None,
            "peak": whos_online.peak().people,
            "visitors": whos_online.unique_visitors(),
            "guest_samples": len(whos_online.get_counter("online:guests", 60)),
        }
    )


urlpatterns = [
    *test_urls.urlpatterns,
    path("tags/", tags_page),
    path("api/", api_view),
]

EMPTY_API = {
    "users": [],
    "counts": [0, 0, 0, 0],
    "is_online": False,
    "last_seen": None,
    "peak": 0,
    "visitors": 0,
    "guest_samples": 0,
}


# Faults


class Fault:
    """A real redis-server at a fixed URL that a test can break and heal again."""

    name: ClassVar[str]
    #: True when Redis still answers reads and only refuses writes (OOM, read-only replica).
    only_writes_fail: ClassVar[bool] = False
    #: True when a call waits for its timeout rather than failing at once (frozen, slow): the
    #: first such failure is a strike, and the breaker opens with the second.
    times_out: ClassVar[bool] = False

    def __init__(self) -> None:
        self.server = RedisServer()
        self.server.start()
        self.port = self.server.port
        self.url = self.server.url
        self.others: list[RedisServer] = []
        self._direct: redis.Redis | None = None

    def direct(self) -> redis.Redis:
        """A client of the test's own, for setting up faults and looking at what was stored."""
        if self._direct is None:
            self._direct = redis.Redis.from_url(self.server.url, socket_timeout=5)
        return self._direct

    def inject(self) -> None:
        raise NotImplementedError

    def heal(self) -> None:
        raise NotImplementedError

    def commands_processed(self) -> int | None:
        """Commands the server has run other than INFO (and replication pings); None if it
        cannot answer."""
        if not self.only_writes_fail:
            return None
        stats = self.direct().info("commandstats")
        ignored = {"cmdstat_info", "cmdstat_ping", "cmdstat_replconf"}
        return sum(int(value["calls"]) for name, value in stats.items() if name not in ignored)

    def close(self) -> None:
        if self._direct is not None:
            self._direct.close()
        for server in [self.server, *self.others]:
            kill(server)


def kill(server: RedisServer) -> None:
    """Stop a test server at once (SIGKILL ends a frozen one too) and remove its directory."""
    if server.process is not None:
        server.process.kill()
        server.process.wait(timeout=5)
        server.process = None
    server.close()


class Stopped(Fault):
    """Nothing listening: the server was shut down; it comes back empty on the same port."""

    name = "stopped"

    def inject(self) -> None:
        self.server.stop()

    def heal(self) -> None:
        self.server.close()
        self.server = RedisServer(port=self.port)
        self.server.start()


class Killed(Stopped):
    """SIGKILL while the app's pool holds open connections to it."""

    name = "killed"

    def inject(self) -> None:
        assert self.server.process is not None
        kill(self.server)


class Frozen(Fault):
    """SIGSTOP: connections are still accepted by the kernel, but nothing ever answers."""

    name = "frozen"
    times_out = True

    def inject(self) -> None:
        self.server.freeze()

    def heal(self) -> None:
        self.server.resume()


class Slow(Fault):
    """Every reply arrives a second late, four times the request timeout; the server is fine."""

    name = "slow"
    times_out = True

    def __init__(self) -> None:
        super().__init__()
        self.proxy = DelayingProxy(self.port)
        self.url = self.proxy.url

    def inject(self) -> None:
        self.proxy.delay = 1.0

    def heal(self) -> None:
        self.proxy.delay = 0.0

    def close(self) -> None:
        self.proxy.close()
        super().close()


class OutOfMemory(Fault):
    """``maxmemory`` with ``noeviction``, filled until writes get OOM errors."""

    name = "out-of-memory"
    only_writes_fail = True

    def inject(self) -> None:
        fill_until_oom(self.direct())

    def heal(self) -> None:
        self.direct().config_set("maxmemory", 0)


class ReadOnlyReplica(Fault):
    """Demoted to a read-only replica of another server holding the same data."""

    name = "read-only-replica"
    only_writes_fail = True

    def inject(self) -> None:
        if not self.others:
            primary = RedisServer()
            primary.start()
            self.others.append(primary)
        primary = self.others[0]
        client = self.direct()
        with redis.Redis.from_url(primary.url, socket_timeout=5) as target:
            target.flushall()
            for key in client.scan_iter(count=1000):
                dumped = client.dump(key)
                assert dumped is not None
                target.restore(key, max(int(client.pttl(key)), 0), dumped, replace=True)
        demote(client, primary)

    def heal(self) -> None:
        self.direct().replicaof("NO", "ONE")


class SnapshotsFailing(Fault):
    """Snapshots fail with ``stop-writes-on-bgsave-error``: writes get ``MISCONF``."""

    name = "misconf"
    only_writes_fail = True

    def inject(self) -> None:
        fail_snapshots(self.direct(), self.server.directory)

    def heal(self) -> None:
        allow_writes_without_snapshots(self.direct())


FAULTS: dict[str, type[Fault]] = {
    kind.name: kind
    for kind in (Stopped, Killed, Frozen, Slow, OutOfMemory, ReadOnlyReplica, SnapshotsFailing)
}


F = TypeVar("F", bound=Fault)


@contextlib.contextmanager
def serving(settings: Any, made: F) -> Iterator[F]:
    """``made``'s URL as ``WHOS_ONLINE['REDIS_URL']`` for the block; its servers end with it."""
    try:
        configure(settings, REDIS_URL=made.url)
        yield made
    finally:
        made.close()


@pytest.fixture(params=list(FAULTS))
def fault(request, settings) -> Iterator[Fault]:
    """A healthy redis-server for ``WHOS_ONLINE['REDIS_URL']``, ready to be broken."""
    with serving(settings, FAULTS[request.param]()) as made:
        yield made


@pytest.fixture(params=[name for name, kind in FAULTS.items() if not kind.only_writes_fail])
def outage(request, settings) -> Iterator[Fault]:
    """A healthy redis-server that the test makes unreachable, frozen or slow."""
    with serving(settings, FAULTS[request.param]()) as made:
        yield made


@pytest.fixture(params=[name for name, kind in FAULTS.items() if kind.only_writes_fail])
def refusing(request, settings) -> Iterator[Fault]:
    """A healthy redis-server that the test makes refuse writes, while it still answers reads."""
    with serving(settings, FAULTS[request.param]()) as made:
        yield made


@pytest.fixture
def frozen(settings) -> Iterator[Frozen]:
    with serving(settings, Frozen()) as made:
        yield made


# Time and calls


@dataclass
class Touches:
    """Connection attempts and commands sent by the request client (short timeouts)."""

    connects: int = 0
    commands: int = 0

    @property
    def total(self) -> int:
        return self.connects + self.commands

    def clear(self) -> None:
        self.connects = self.commands = 0


@pytest.fixture
def touches(monkeypatch) -> Touches:
    seen = Touches()
    original_connect: Any = Connection._connect
    original_send: Any = AbstractConnection.send_packed_command

    def is_request_client(conn: Any) -> bool:
        return bool(conn.socket_timeout == clients.REQUEST_TIMEOUT)

    def spy_connect(self: Any) -> Any:
        if is_request_client(self):
            seen.connects += 1
        return original_connect(self)

    def spy_send(self: Any, command: Any, check_health: bool = True) -> None:
        if is_request_client(self):
            seen.commands += 1
        original_send(self, command, check_health)

    monkeypatch.setattr(Connection, "_connect", spy_connect)
    monkeypatch.setattr(AbstractConnection, "send_packed_command", spy_send)
    return seen


# Helpers


def addresses() -> Iterator[str]:
    """Fresh client addresses (198.18.0.0/15, for benchmarks), one per new visitor."""
    start = int(IPv4Address("198.18.0.1"))
    return (str(IPv4Address(start + index)) for index in range(100_000))


def seed(alice: AbstractUser) -> None:
    """Alice and one guest online, through the API, while Redis is healthy.

    Both are recorded at one instant, so that their counter samples share a minute's slice
    even when the wall clock crosses a minute between the two writes.
    """
    now = time.time()
    assert whos_online.record_user(alice, now=now) is True
    assert whos_online.record_guest(SEEDED_GUEST, now=now) is True


def page(response: Any) -> str:
    assert response.status_code == 200
    return str(response.content.decode())


def shows_nobody(html: str) -> bool:
    return 'data-total="0"' in html and "nobody" in html and "alice" not in html


def is_recorded(fault: Fault, ip: str) -> bool:
    return fault.direct().zscore("{whos_online}:guests", guest(ip)) is not None


def warnings_and_infos(caplog) -> list[str]:
    return [
        record.levelname
        for record in caplog.records
        if record.name == "whos_online" and record.levelno >= logging.INFO
    ]


def fail_once(fault: Fault, ips: Iterator[str]) -> HttpResponseBase:
    """A request that tries to write (a new guest) and fails, which opens the breaker."""
    response = Client(REMOTE_ADDR=next(ips)).get("/plain/")
    assert response.status_code == 200
    assert COOKIE not in response.cookies
    return response


# Pages and API


def test_pages_render_nobody_during_the_fault(outage, alice):
    seed(alice)
    seeded = Client(REMOTE_ADDR=SEEDED_GUEST)
    healthy = page(seeded.get("/"))
    assert "alice" in healthy
    assert 'data-total="2"' in healthy
    tags = page(seeded.get("/tags/"))
    assert "total=2;users=1;guests=1;seen=" in tags
    assert "seen=;" not in tags

    outage.inject()
    visitor = Client(REMOTE_ADDR="203.0.113.7")
    assert shows_nobody(page(visitor.get("/")))

    for client in (visitor, seeded, Client(REMOTE_ADDR="192.0.2.9")):
        assert shows_nobody(page(client.get("/")))
        assert page(client.get("/plain/")) == "plain"
        assert "total=0;users=0;guests=0;seen=;" in page(client.get("/tags/"))


def test_pages_show_who_is_online_while_writes_are_refused(refusing, alice):
    """A full or read-only Redis still answers reads: the pages go on showing the people who
    were online, and their viewer, while no new visit can be stored."""
    seed(alice)
    refusing.inject()
    visitor = Client(REMOTE_ADDR="203.0.113.7")
    first = page(visitor.get("/"))  # its visit is refused
    assert COOKIE not in visitor.cookies

    for client, shown_total in (
        (visitor, 3),  # not stored, but reading the page
        # Online already, but the process no longer vouches for what it stored before Redis
        # refused a write, and nothing else says so: counted once more on its own page.
        (Client(REMOTE_ADDR=SEEDED_GUEST), 3),
        (Client(REMOTE_ADDR="192.0.2.9"), 3),
    ):
        shown = page(client.get("/"))
        assert "alice" in shown
        assert f'data-total="{shown_total}"' in shown
        guests = shown_total - 1
        assert f"total={shown_total};users=1;guests={guests};seen=" in page(client.get("/tags/"))
    assert "alice" in first
    assert not is_recorded(refusing, "203.0.113.7")


def test_api_returns_empty_values_during_the_fault(fault, alice):
    seed(alice)
    healthy = Client(REMOTE_ADDR=SEEDED_GUEST).get("/api/").json()
    assert healthy["users"] == ["alice"]
    assert healthy["counts"] == [1, 1, 0, 2]
    assert healthy["is_online"] is True
    assert healthy["last_seen"] is not None
    assert healthy["peak"] == 2
    assert healthy["visitors"] == 2
    assert healthy["guest_samples"] == 1

    fault.inject()
    first = Client(REMOTE_ADDR=SEEDED_GUEST).get("/api/").json()
    assert first == (healthy if fault.only_writes_fail else EMPTY_API)
    fail_once(fault, addresses())

    # A Redis that refuses writes still answers every read.
    after = Client(REMOTE_ADDR=SEEDED_GUEST).get("/api/").json()
    assert after == (healthy if fault.only_writes_fail else EMPTY_API)
    # Writers report that nothing was stored, rather than raising.
    assert whos_online.record_user(alice) is False
    assert whos_online.record_guest("192.0.2.1") is False
    assert whos_online.update_counter("signups") is False
    assert whos_online.forget_user(alice) is False
    assert whos_online.prune() == 0


# The circuit breaker


def test_breaker_stops_calling_redis_for_the_backoff(outage, breaker_clock, touches, alice):
    fault = outage
    seed(alice)
    ips = addresses()
    fault.inject()
    touches.clear()

    fail_once(fault, ips)
    # The write was tried once, not retried as redis-py does by default: one new connection
    # or one command.
    assert touches.total == 1
    if fault.times_out:  # a strike: the next write is tried, times out too, and opens it
        touches.clear()
        fail_once(fault, ips)
        assert touches.commands == 1  # on a new connection: a timeout drops the one it was on
    touches.clear()
    before = fault.commands_processed()

    breaker_clock.advance(BACKOFF - 0.01)
    for route in ("/", "/plain/", "/tags/", "/api/"):
        for _ in range(3):
            assert Client(REMOTE_ADDR=next(ips)).get(route).status_code == 200
    assert whos_online.record_guest(next(ips)) is False

    assert touches.total == 0
    if before is not None:
        assert fault.commands_processed() == before

    # Once the back-off has passed, one request tries Redis again, fails, and re-opens it.
    breaker_clock.advance(0.02)
    fail_once(fault, ips)
    assert touches.total > 0
    touches.clear()
    fail_once(fault, ips)
    assert touches.total == 0


def test_refused_writes_stop_writes_for_the_backoff_and_reads_go_on(
    refusing, breaker_clock, touches, alice
):
    seed(alice)
    ips = addresses()
    throttled = Client(REMOTE_ADDR=next(ips))
    throttled.get("/")
    touches.clear()
    page(throttled.get("/"))
    reads = touches.total  # what a page costs that writes nothing
    refusing.inject()
    touches.clear()
    fail_once(refusing, ips)  # "/plain/" only writes: one refused attempt
    assert touches.total == 1

    breaker_clock.advance(BACKOFF - 0.01)
    touches.clear()
    for _ in range(3):
        fail_once(refusing, ips)
        assert whos_online.record_guest(next(ips)) is False
    assert touches.total == 0  # no write tried
    assert "alice" in page(Client(REMOTE_ADDR=next(ips)).get("/"))
    assert touches.total == reads  # the page's reads, and still no write

    breaker_clock.advance(0.02)
    touches.clear()
    fail_once(refusing, ips)
    assert touches.total == 1  # the back-off is over: one write is tried, and refused


def test_one_warning_per_episode_of_refused_writes_and_one_line_when_they_resume(
    refusing, breaker_clock, caplog
):
    """Reads that succeed between refused writes are no recovery: the log does not flap."""
    caplog.set_level(logging.INFO, logger="whos_online")
    ips = addresses()
    refusing.inject()
    for _ in range(3):
        page(Client(REMOTE_ADDR=next(ips)).get("/"))
        breaker_clock.advance(BACKOFF + 0.1)
    [warning] = [r for r in caplog.records if r.name == "whos_online"]
    assert warning.levelname == "WARNING"
    assert "refuses writes" in warning.getMessage()
    assert refusing.url in warning.getMessage()

    refusing.heal()
    visitor_ip = next(ips)
    assert COOKIE in Client(REMOTE_ADDR=visitor_ip).get("/").cookies
    assert is_recorded(refusing, visitor_ip)
    assert warnings_and_infos(caplog) == ["WARNING", "INFO"]
    assert "takes writes again" in caplog.records[-1].getMessage()


def test_a_frozen_redis_costs_two_timeouts_then_none_for_the_backoff(frozen, touches, caplog):
    Client(REMOTE_ADDR="192.0.2.1").get("/")  # the pool now holds a connection
    frozen.inject()
    try:
        touches.clear()
        first = Client(REMOTE_ADDR="203.0.113.7").get("/")
        # The tag's read, and then the visit's write, each sent once and waited for, then given
        # up: redis-py's default retry would have sent each again, and its default timeout
        # would have waited minutes. The read's timeout is a strike; the write's opens it.
        assert touches.commands == 2
        touches.clear()

        second = Client(REMOTE_ADDR="203.0.113.8").get("/")
        assert touches.total == 0
    finally:
        frozen.heal()

    assert shows_nobody(page(first))
    assert shows_nobody(page(second))
    # It waited on the frozen server until the request timeout gave up.
    [warning] = [record for record in caplog.records if record.name == "whos_online"]
    assert "(TimeoutError: " in warning.getMessage()


def test_every_fault_costs_one_attempt_then_none(fault, touches):
    Client(REMOTE_ADDR="192.0.2.1").get("/")
    client = clients.request_client()
    assert isinstance(client, redis.Redis)
    request_pool = client.connection_pool.connection_kwargs
    assert request_pool["socket_timeout"] == clients.REQUEST_TIMEOUT
    assert request_pool["socket_connect_timeout"] == clients.REQUEST_TIMEOUT
    # Retry.get_retries() only exists from redis-py 6; _retries holds the count in 5.0 to 8.x.
    assert request_pool["retry"]._retries == 0
    fault.inject()
    attempts = []
    for ip in ("203.0.113.7", "203.0.113.8", "203.0.113.9"):
        touches.clear()
        page(Client(REMOTE_ADDR=ip).get("/"))
        attempts.append(touches.total)

    # The tag's read, then the write; where reads still work (OOM, read-only) both are sent,
    # and then the reads alone until the back-off ends. Where the read times out, that is a
    # strike, and the write is tried (on a new connection: a timeout drops the one it was on)
    # and opens the breaker; elsewhere the read fails and the write is not tried. Then
    # nothing is.
    if fault.only_writes_fail:
        assert attempts == [2, 1, 1]
    else:
        assert attempts == ([1 + 2, 0, 0] if fault.times_out else [1, 0, 0])


def test_a_slow_redis_within_the_timeout_still_records(settings, alice, caplog):
    caplog.set_level(logging.INFO, logger="whos_online")
    with serving(settings, Slow()) as slow:
        slow.proxy.delay = clients.REQUEST_TIMEOUT / 5
        seed(alice)

        response = Client(REMOTE_ADDR="203.0.113.7").get("/")

        assert "alice" in page(response)
        assert COOKIE in response.cookies
        assert whos_online.online_counts() == (1, 2, 0, 3)
    assert warnings_and_infos(caplog) == []


def test_one_slow_reply_under_load_is_no_outage(settings, caplog):
    """Redis is up, but one reply comes too late (a burst of CPU contention): that call fails
    and counts as a strike; the next goes through, and the log tells of no outage."""
    caplog.set_level(logging.INFO, logger="whos_online")
    with serving(settings, Slow()) as slow:
        configure(settings, LIVE_UPDATES=False)  # no publish from the thread takes the slow reply
        assert whos_online.record_guest("192.0.2.1") is True
        slow.proxy.hold_replies(1, clients.REQUEST_TIMEOUT * 4)

        assert whos_online.record_guest("203.0.113.7") is False  # timed out
        assert whos_online.record_guest("203.0.113.8") is True

        assert connection.breaker().allows(get_config().redis_target)
        assert warnings_and_infos(caplog) == []


def test_a_flush_that_timed_out_once_leaves_the_next_flush_to_go(settings, caplog):
    """The flushing thread's write times out once: the visits queued after it go with the next
    flush (and their visitors get throttle cookies), rather than wait out FAILURE_BACKOFF
    (10 s) as after an outage."""
    caplog.set_level(logging.INFO, logger="whos_online")
    with serving(settings, Slow()) as slow:
        configure(settings, FLUSH_INTERVAL=0.05, COUNT_HITS=False, LIVE_UPDATES=False)
        assert whos_online.record_guest("192.0.2.1") is True
        slow.proxy.hold_replies(1, clients.REQUEST_TIMEOUT * 4)
        generation = epochs.generation()

        assert Client(REMOTE_ADDR="203.0.113.7").get("/plain/").status_code == 200
        assert until(lambda: epochs.generation() != generation)  # the thread's write timed out
        later = Client(REMOTE_ADDR="203.0.113.8").get("/plain/")

        assert COOKIE in later.cookies
        assert until(lambda: is_recorded(slow, "203.0.113.8"))
        assert warnings_and_infos(caplog) == []


def until(condition: Callable[[], bool], timeout: float = BACKOFF / 2) -> bool:
    """Whether ``condition`` holds within ``timeout`` seconds (of a real server's doing)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# Logging, recovery and the throttle cookie


def test_one_warning_per_outage_and_recording_resumes(fault, breaker_clock, caplog):
    caplog.set_level(logging.INFO, logger="whos_online")
    ips = addresses()
    assert COOKIE in Client(REMOTE_ADDR=next(ips)).get("/").cookies
    assert warnings_and_infos(caplog) == []

    fault.inject()
    for _ in range(3):
        page(Client(REMOTE_ADDR=next(ips)).get("/"))
    breaker_clock.advance(BACKOFF + 0.1)
    fail_once(fault, ips)  # a second failure in the same outage
    assert warnings_and_infos(caplog) == ["WARNING"]
    assert fault.url in caplog.records[0].getMessage()

    fault.heal()
    # Redis is back, but the breaker keeps the app off it until the back-off has passed.
    visitor_ip = next(ips)
    visitor = Client(REMOTE_ADDR=visitor_ip)
    assert COOKIE not in visitor.get("/plain/").cookies
    assert not is_recorded(fault, visitor_ip)

    breaker_clock.advance(BACKOFF + 0.1)
    response = visitor.get("/plain/")
    assert COOKIE in response.cookies
    assert is_recorded(fault, visitor_ip)
    assert 'data-guests="0"' not in page(Client(REMOTE_ADDR=next(ips)).get("/"))
    assert warnings_and_infos(caplog) == ["WARNING", "INFO"]
    assert fault.url in caplog.records[1].getMessage()

    # A second outage is a second warning.
    fault.inject()
    fail_once(fault, ips)
    fail_once(fault, ips)
    assert warnings_and_infos(caplog) == ["WARNING", "INFO", "WARNING"]


def test_no_throttle_cookie_while_writes_fail(fault, breaker_clock):
    ips = addresses()
    assert COOKIE in Client(REMOTE_ADDR=next(ips)).get("/plain/").cookies

    fault.inject()
    visitor_ip = next(ips)
    visitor = Client(REMOTE_ADDR=visitor_ip)
    for step in (0.0, 1.0, BACKOFF):  # a failing write, a skipped one, a failing one again
        breaker_clock.advance(step)
        for route in ("/", "/plain/"):
            response = visitor.get(route)
            assert response.status_code == 200
            assert COOKIE not in response.cookies
            assert COOKIE not in visitor.cookies

    # The failed visits were not remembered as recorded: the next one after recovery is.
    fault.heal()
    breaker_clock.advance(BACKOFF + 0.1)
    assert COOKIE in visitor.get("/plain/").cookies
    assert is_recorded(fault, visitor_ip)


def test_a_client_remembered_before_an_outage_is_written_again_not_renewed(settings, breaker_clock):
    """The process remembers cookie-less clients it recorded; once Redis has failed, that
    memory no longer stands for a stored visit: no cookie during the outage, and the first visit
    after it is written to the Redis that came back empty."""
    ips = addresses()
    with serving(settings, Stopped()) as restarted:
        assert COOKIE in Client(REMOTE_ADDR=SEEDED_GUEST).get("/plain/").cookies
        assert is_recorded(restarted, SEEDED_GUEST)

        restarted.inject()
        fail_once(restarted, ips)  # this process sees the outage
        response = Client(REMOTE_ADDR=SEEDED_GUEST).get("/plain/")  # no cookie: a new client
        assert response.status_code == 200
        assert COOKIE not in response.cookies

        restarted.heal()  # a new process, empty
        breaker_clock.advance(BACKOFF + 0.1)
        assert COOKIE in Client(REMOTE_ADDR=SEEDED_GUEST).get("/plain/").cookies
        assert is_recorded(restarted, SEEDED_GUEST)


def test_a_restart_between_requests_costs_nothing(settings, caplog, touches):
    """A pooled connection to the old process is replaced without a failure or a warning."""
    caplog.set_level(logging.INFO, logger="whos_online")
    with serving(settings, Stopped()) as restarted:
        assert COOKIE in Client(REMOTE_ADDR="192.0.2.1").get("/").cookies
        restarted.inject()
        restarted.heal()  # a new process on the same port
        touches.clear()

        response = Client(REMOTE_ADDR="203.0.113.7").get("/")

        assert COOKIE in response.cookies
        assert touches.connects == 1
        # The new process starts empty and has just the one new guest.
        assert restarted.direct().zcard("{whos_online}:guests") == 1
    assert warnings_and_infos(caplog) == []


def test_killed_while_requests_are_in_flight(settings, caplog):
    caplog.set_level(logging.INFO, logger="whos_online")
    with serving(settings, Killed()) as killed:
        statuses: list[int] = []
        errors: list[BaseException] = []
        some_answered = threading.Event()

        def visit(worker: int) -> None:
            try:
                for index in range(100):
                    ip = f"198.18.{worker}.{index + 1}"
                    statuses.append(Client(REMOTE_ADDR=ip).get("/").status_code)
                    if len(statuses) >= 8:
                        some_answered.set()
            except BaseException as error:  # reported by the assertion below
                errors.append(error)

        workers = [threading.Thread(target=visit, args=(worker,)) for worker in range(4)]
        for worker in workers:
            worker.start()
        # Kill it while the four workers are busy with Redis.
        assert some_answered.wait(timeout=10)
        killed.inject()
        for worker in workers:
            worker.join(timeout=30)

    assert errors == []
    assert statuses == [200] * 400
    # Replies that raced the kill are no recovery (test_a_reply_that_raced_the_failure_…).
    assert warnings_and_infos(caplog) == ["WARNING"]


def test_a_reply_that_raced_the_failure_is_not_a_recovery(settings, caplog):
    """Thread A gets its reply; the server dies; thread B fails and warns; then A reports."""
    caplog.set_level(logging.INFO, logger="whos_online")
    with serving(settings, Killed()) as killed:

        def answered_just_before_the_kill(client: clients.Client, config: Any) -> bool:
            result = bool(client.ping())
            killed.inject()
            other = threading.Thread(target=Client(REMOTE_ADDR="203.0.113.7").get, args=("/",))
            other.start()
            other.join(timeout=10)
            return result

        assert connection.call(False, answered_just_before_the_kill) is True

    assert warnings_and_infos(caplog) == ["WARNING"]
    assert not connection.breaker().allows(get_config().redis_target)


# The cleanup command


def test_cleanup_fails_loudly_on_every_fault(fault, monkeypatch, capsys):
    monkeypatch.setattr(clients, "ADMIN_TIMEOUT", 0.3)
    conf.reset()
    call_command("whos_online_cleanup", verbosity=0)  # works while Redis is healthy

    fault.inject()
    with pytest.raises(CommandError) as excinfo:
        call_command("whos_online_cleanup", verbosity=0)

    assert str(excinfo.value).startswith(f"Cannot clean up: Redis at {fault.url} failed: ")
    assert excinfo.value.returncode == 1
    with pytest.raises(SystemExit) as exited:
        execute_from_command_line(["manage.py", "whos_online_cleanup"])
    assert exited.value.code == 1
    assert capsys.readouterr().err.startswith("CommandError: Cannot clean up: Redis at ")
