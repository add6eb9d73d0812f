from __future__ import annotations

import os
import signal
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import redis
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.test import Client
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support import asgi_stream
from tests.support.helpers import (
    BreakerClock,
    RedisCalls,
    configure,
    counting_redis_calls,
    single_redis,
)
from tests.support.live_gate import LiveServerGate
from tests.support.redis_server import RedisServer, database_of_worker, free_port
from whos_online.backend import clients, connection
from whos_online.backend.clients import admin_client
from whos_online.config import settings as conf
from whos_online.signals import users_went_offline
from whos_online.store import lua

if TYPE_CHECKING:
    from collections.abc import Iterator


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C raises ``KeyboardInterrupt`` in the tests and the processes they start, as in a
    terminal, even when the suite runs as a shell's background job (which starts with SIGINT
    ignored, and hands that on): the stopping tests check that whos_online leaves it so."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def real_redis_url() -> Iterator[str]:
    """``REDIS_URL`` if set (its database is flushed!), else a redis-server started for the run.

    Under pytest-xdist each worker starts its own server; on ``REDIS_URL`` worker ``gwN`` takes
    database N of that server, so that one worker's flush never empties another's keys."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield database_of_worker(url, os.environ.get("PYTEST_XDIST_WORKER", ""))
        return
    server = RedisServer()
    server.start()
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture(autouse=True)
def _fresh_state(settings) -> Iterator[None]:
    """Every test starts with empty Redis data, no cached clients and a closed breaker."""
    conf.reset()
    admin_client().flushdb()
    yield
    conf.reset()


@pytest.fixture(autouse=True)
def _live_server_gate(request) -> Iterator[None]:
    """Opens the live server to a test that uses it and closes it, drained, before the test's
    database is flushed (tests/support/live_gate.py says why). pytest-django's autouse fixture that
    gives the test its database is set up before this one, so it is torn down after it."""
    if "live_server" not in request.fixturenames:
        yield
        return
    httpd = request.getfixturevalue("live_server").thread.httpd
    gate = httpd.get_app()
    if not isinstance(gate, LiveServerGate):
        gate = LiveServerGate(gate)
        httpd.set_app(gate)
    gate.open()
    yield
    gate.close_and_drain()


@pytest.fixture
def mid_utc_day(monkeypatch) -> float:
    """Moves the wall clock (``time.time``) to today's noon UTC and lets it run on from there.

    For tests that count a UTC day's unique visitors from visits made "now": run in the last
    moments of a day, their visits and the read that counts them would fall on two days. The
    clock stays today's, so that keys which expire at a time computed from it outlive the test.
    Returns the noon.
    """
    real_time = time.time
    start = real_time()
    noon = start - start % 86400 + 43200
    offset = noon - start
    monkeypatch.setattr(time, "time", lambda: real_time() + offset)
    return noon


@pytest.fixture(params=["fake", "real"])
def backend(request, settings) -> str:
    """Run a behaviour test on fakeredis and again on a real redis-server."""
    if request.param == "real":
        url = request.getfixturevalue("real_redis_url")
        settings.WHOS_ONLINE = {
            **getattr(settings, "WHOS_ONLINE", {}),
            "REDIS_URL": url,
        }
        admin_client().flushdb()
    return str(request.param)


@pytest.fixture(params=sorted(asgi_stream.APPLICATIONS))
def served_by(request, monkeypatch) -> str:
    """Serve a test's live streams by Django's ASGI application, and again by the same in
    ``whos_online.asgi.LiveStreams`` (``tests.support.asgi_stream``)."""
    monkeypatch.setattr(asgi_stream, "SERVED_BY", request.param)
    return str(request.param)


@pytest.fixture
def r(backend) -> redis.Redis:
    """A client on whichever Redis the test runs against, for looking at what was stored."""
    return single_redis()


@pytest.fixture
def alice(db) -> AbstractUser:
    user = get_user_model().objects.create_user("alice", password="pw")
    assert isinstance(user, AbstractUser)
    return user


@pytest.fixture
def bob(db) -> AbstractUser:
    user = get_user_model().objects.create_user("bob", password="pw")
    assert isinstance(user, AbstractUser)
    return user


@pytest.fixture
def staff(db) -> AbstractUser:
    user = get_user_model().objects.create_user("sam", password="pw", is_staff=True)
    assert isinstance(user, AbstractUser)
    return user


@pytest.fixture
def hiding_bob(settings) -> None:
    """HIDE_USER hides bob: he is counted, never named."""
    configure(settings, HIDE_USER="tests.support.helpers.hide_bob")


@pytest.fixture
def breaker_clock(monkeypatch) -> BreakerClock:
    """Back-off periods of the circuit breaker pass when the test says, without sleeping."""
    clock = BreakerClock()
    monkeypatch.setattr(connection, "time", SimpleNamespace(monotonic=clock))
    monkeypatch.setattr(connection, "time", SimpleNamespace(monotonic=clock))
    return clock


@pytest.fixture
def offline_ids() -> Iterator[list[list[object]]]:
    """The ``user_ids`` of every ``users_went_offline`` signal, from any thread."""
    received: list[list[object]] = []

    def receiver(sender: object, user_ids: list[object], **kwargs: Any) -> None:
        received.append(list(user_ids))

    users_went_offline.connect(receiver, weak=False, dispatch_uid="tests.offline_ids")
    yield received
    users_went_offline.disconnect(dispatch_uid="tests.offline_ids")


@pytest.fixture
def redis_down(settings) -> str:
    """Point the app at a loopback port where nothing listens, retrying Redis on every call;
    returns that Redis URL."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    settings.WHOS_ONLINE = {
        **getattr(settings, "WHOS_ONLINE", {}),
        "REDIS_URL": url,
        "FAILURE_BACKOFF": 0,
    }
    return url


@pytest.fixture
def client() -> Client:
    return Client(REMOTE_ADDR="203.0.113.7")


#: Every Lua script of the app, loaded before counting so that no count includes a first-use load.
SCRIPTS = (
    lua.RECORD,
    lua.SNAPSHOT,
    lua.PRUNE_CHUNK,
    lua.LEAVE,
    lua.PRUNE_ROOMS,
    lua.RECENT_ROOMS,
    lua.UPDATE_COUNTERS,
    lua.DELETE_SLICES,
    lua.DROP_COUNTER,
)


@pytest.fixture
def redis_calls(backend) -> Iterator[RedisCalls]:
    """Count round trips at the socket boundary, which fakeredis and redis-py share.

    Connection set-up is left out, and every script is loaded beforehand: both are paid once per
    process (or per Redis restart), not per request.
    """
    client = admin_client()
    for source in SCRIPTS:
        client.script_load(source)
    with counting_redis_calls() as calls:
        yield calls


class Outage:
    """Points the app's request client at a port where nothing listens, and back, with the
    breaker's back-off passed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.live = clients.request_client
        self.dead = redis.Redis.from_url(
            f"redis://127.0.0.1:{free_port()}/0",
            socket_connect_timeout=0.5,
            socket_timeout=0.5,
            retry=Retry(NoBackoff(), 0),
        )

    def begin(self) -> None:
        self.monkeypatch.setattr(connection, "request_client", lambda: self.dead)

    def end(self) -> None:
        """Redis answers again, and FAILURE_BACKOFF has passed since the failure."""
        self.monkeypatch.setattr(connection, "request_client", self.live)
        later = time.monotonic() + conf.get_config().failure_backoff + 1
        clock = SimpleNamespace(monotonic=lambda: later)
        self.monkeypatch.setattr(connection, "time", clock)
        self.monkeypatch.setattr(connection, "time", clock)


@pytest.fixture
def outage(monkeypatch) -> Iterator[Outage]:
    down = Outage(monkeypatch)
    yield down
    down.dead.connection_pool.disconnect()
