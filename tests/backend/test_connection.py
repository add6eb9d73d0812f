"""Scripts sent straight over a pooled connection (``clients.execute``), what a failure in
the middle of one leaves behind, and calls made past the breakers (``past_breakers``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import redis

import whos_online
from whos_online.backend import clients, connection
from whos_online.backend.sentinels import FollowingSentinel
from whos_online.config.settings import get_config

if TYPE_CHECKING:
    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config


def _no_client_path(*args: object, **kwargs: object) -> None:
    msg = "went through redis-py's execute_command"
    raise AssertionError(msg)


def test_a_recorded_visit_goes_straight_over_a_pooled_connection(backend, r, monkeypatch):
    monkeypatch.setattr(clients.request_client(), "execute_command", _no_client_path)

    whos_online.record_guest("192.0.2.1")

    assert r.zcard("{whos_online}:guests") == 1
    client = clients.request_client()
    assert isinstance(client, redis.Redis)
    assert client.connection_pool._in_use_connections == set()


@pytest.mark.parametrize("packer", ["hiredis", "redis-py"])
def test_a_visit_with_unicode_and_numbers_reaches_redis_intact(backend, r, monkeypatch, packer):
    if packer == "redis-py":
        monkeypatch.setattr(clients, "_pack_command", None)
    elif clients._pack_command is None:
        pytest.skip("hiredis is not installed")
    client = clients.request_client()

    assert clients.execute(client, "ZADD", "{whos_online}:x", 1.5, "Zoë") == 1
    assert clients.execute(client, "HSET", "{whos_online}:h", "n", 7) == 1

    assert r.zscore("{whos_online}:x", "Zoë") == 1.5
    assert r.hget("{whos_online}:h", "n") == b"7"


def test_a_script_the_server_lost_is_sent_whole(backend, r, monkeypatch):
    whos_online.record_guest("192.0.2.1")
    r.script_flush()
    monkeypatch.setattr(clients.request_client(), "execute_command", _no_client_path)

    whos_online.record_guest("192.0.2.2")

    assert r.zcard("{whos_online}:guests") == 2


def test_a_connection_broken_mid_call_is_dropped_and_the_call_fails_open(backend, r, monkeypatch):
    whos_online.record_guest("192.0.2.1")
    client = clients.request_client()
    assert isinstance(client, redis.Redis)
    pool = client.connection_pool
    (idle,) = pool._available_connections
    connection_class = type(idle)

    def broken(self: redis.Connection, *args: object, **kwargs: object) -> object:
        # What the connection does on a socket error: disconnect, then raise.
        self.disconnect()  # type: ignore [no-untyped-call]
        msg = "Connection reset by peer"
        raise redis.ConnectionError(msg)

    monkeypatch.setattr(connection_class, "read_response", broken)

    assert whos_online.record_guest("192.0.2.2") is False

    assert pool._in_use_connections == set()
    monkeypatch.undo()
    assert r.zcard("{whos_online}:guests") in {1, 2}  # sent, but its reply lost


def test_a_client_it_did_not_make_runs_commands_as_usual(backend, monkeypatch):
    made = redis.Redis(connection_pool=redis.BlockingConnectionPool())  # type: ignore [no-untyped-call]
    seen: list[tuple[object, ...]] = []

    def execute_command(*args: object) -> int:
        seen.append(args)
        return 1

    monkeypatch.setattr(made, "execute_command", execute_command)

    assert clients.execute(made, "PING") == 1
    assert seen == [("PING",)]


@pytest.mark.parametrize("pool_class", [redis.ConnectionPool, redis.BlockingConnectionPool])
def test_only_redis_pys_own_pools_are_sent_over_directly(pool_class):
    client = redis.Redis(connection_pool=pool_class())
    assert clients._made_here(client) is (pool_class is redis.ConnectionPool)


def test_a_sentinel_managed_master_is_sent_over_directly():
    sentinel = FollowingSentinel([("127.0.0.1", 1)], socket_timeout=0.1)
    master = sentinel.master_for("mymaster")  # type: ignore [no-untyped-call]
    assert clients._made_here(master)


def test_past_the_breakers_a_call_goes_while_one_is_open_and_tells_it(backend, breaker_clock):
    """What a stopping process's last writes do (``flushing.schedule``)."""
    calls: list[str] = []

    def ping(client: Client, config: Config) -> bool:
        calls.append("ping")
        return bool(client.ping())

    config = get_config()
    for _ in range(3):  # an outage, whatever the breaker's rule
        connection.breaker().failed(config.redis_target, ConnectionError("refused"), 10)
    assert connection.call(False, ping) is False  # the breaker keeps Redis off
    with connection.past_breakers():
        assert connection.breakers_passed()
        assert connection.call(False, ping) is True
    assert not connection.breakers_passed()
    assert calls == ["ping"]
    assert not connection.known_to_fail(config, None, writes=True)  # the reply closed it
