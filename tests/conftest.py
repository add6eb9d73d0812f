from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.redis_server import RedisServer, free_port
from whos_online import conf, counters, store
from whos_online.connection import admin_client

if TYPE_CHECKING:
    from collections.abc import Iterator

    import redis


@pytest.fixture(scope="session")
def real_redis_url() -> Iterator[str]:
    """``REDIS_URL`` if set (its database is flushed!), else a redis-server started for the run."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
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


@pytest.fixture
def r(backend) -> redis.Redis:
    """A client on whichever Redis the test runs against, for looking at what was stored."""
    return admin_client()


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


class RedisCalls:
    """Every round trip to Redis in a test, as lists of command names (one list per trip)."""

    def __init__(self) -> None:
        self.trips: list[list[str]] = []

    @property
    def commands(self) -> list[str]:
        return [name for trip in self.trips for name in trip]

    def clear(self) -> None:
        self.trips.clear()


def _command_names(packed: bytes) -> list[str]:
    # Requests are RESP arrays of bulk strings: "*N\r\n" then N times "$len\r\n<data>\r\n".
    names = []
    position = 0
    while position < len(packed):
        assert packed[position : position + 1] == b"*"
        end = packed.index(b"\r\n", position)
        count = int(packed[position + 1 : end])
        position = end + 2
        for index in range(count):
            end = packed.index(b"\r\n", position)
            length = int(packed[position + 1 : end])
            start = end + 2
            if index == 0:
                names.append(packed[start : start + length].decode().upper())
            position = start + length + 2
    return names


#: What redis-py sends once per new connection; a process pays it once, not per request.
CONNECTION_SET_UP = frozenset({"HELLO", "CLIENT", "AUTH", "SELECT"})

#: Every Lua script of the app, loaded before counting so that no count includes a first-use load.
SCRIPTS = (
    store._RECORD,
    store._SNAPSHOT,
    store._PRUNE_CHUNK,
    counters._UPDATE,
    counters._DELETE_SLICES,
    counters._DROP_COUNTER,
)


@pytest.fixture
def redis_calls(backend, monkeypatch) -> RedisCalls:
    """Count round trips at the socket boundary, which fakeredis and redis-py share.

    Connection set-up is left out, and every script is loaded beforehand: both are paid once per
    process (or per Redis restart), not per request.
    """
    from redis.connection import AbstractConnection

    client = admin_client()
    for source in SCRIPTS:
        client.script_load(source)
    calls = RedisCalls()
    original = AbstractConnection.send_packed_command

    def send_packed_command(self, command, check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, (bytes, str)) else list(command)
        packed = b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks)
        names = _command_names(packed)
        if not set(names) <= CONNECTION_SET_UP:
            calls.trips.append(names)
        original(self, command, check_health)  # type: ignore [no-untyped-call]

    monkeypatch.setattr(AbstractConnection, "send_packed_command", send_packed_command)
    return calls
