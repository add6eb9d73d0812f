"""whos_online on a real Sentinel group (a master, a replica and a Sentinel, from the
pip-installed redis-server: tests/topologies.py), reached through a django-redis cache alias."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import pytest
import redis
from django_redis.pool import ConnectionFactory
from redis.sentinel import SentinelConnectionPool

import whos_online
from tests.helpers import configure, render, widget_text
from tests.topologies import SentinelGroup, sentinel_cache
from whos_online import connection
from whos_online.connection import REQUEST_TIMEOUT, request_client

if TYPE_CHECKING:
    from collections.abc import Iterator

TAG = "{% load whos_online %}{% whos_online %}"


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    # django-redis keeps a Sentinel pool per LOCATION for the life of the process, with the
    # Sentinels it was first made with: a service name of this module's own, and no pool left
    # from another run in this process, keep it from asking a group that is gone.
    servers = SentinelGroup(service_name="whos-online-sentinel-tests")
    for location in list(ConnectionFactory._pools):
        if servers.service_name in location:
            del ConnectionFactory._pools[location]
    try:
        servers.start()
        yield servers
    finally:
        servers.close()


@pytest.fixture
def on_sentinel(settings, group) -> SentinelGroup:
    """The app on a django-redis alias configured for Sentinel (``sentinel_cache``)."""
    settle(group)
    group.current_master().command("FLUSHALL")
    settings.CACHES = {**settings.CACHES, "sentinel": sentinel_cache(group)}
    configure(settings, REDIS_ALIAS="sentinel", FAILURE_BACKOFF=0)
    return group  # type: ignore [no-any-return]


def settle(group: SentinelGroup, timeout: float = 40.0) -> None:
    """Wait until the Sentinel names a master it does not think down, that master's role agrees,
    and the other server replicates it: a test before may have frozen or failed it over."""
    deadline = time.monotonic() + timeout
    while True:
        flags = group.master_state()["flags"].split(",")
        if flags == ["master"]:
            if group.current_master() is not group.master:
                # The Sentinel failed over on its own (a frozen master): follow the roles.
                group.master, group.replica = group.replica, group.master
            try:
                group.wait_until_replicating(timeout=max(deadline - time.monotonic(), 0.1))
            except RuntimeError:
                pass
            else:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Sentinel group did not settle: {flags}")
        time.sleep(0.1)


def sentinel_pool() -> SentinelConnectionPool:
    client = request_client()
    assert isinstance(client, redis.Redis)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    return pool


def stored_guests(server) -> int:
    return int(server.client().zcard("{whos_online}:guests"))


def test_the_request_client_asks_the_sentinels_with_its_own_timeouts(on_sentinel):
    pool = sentinel_pool()
    assert pool.service_name == on_sentinel.service_name
    assert pool.connection_kwargs["socket_timeout"] == REQUEST_TIMEOUT
    assert pool.connection_kwargs["socket_connect_timeout"] == REQUEST_TIMEOUT
    for sentinel in pool.sentinel_manager.sentinels:
        assert sentinel.connection_pool.connection_kwargs["socket_timeout"] == REQUEST_TIMEOUT
    assert pool.get_master_address()[1] == on_sentinel.current_master_port()  # type: ignore [no-untyped-call]


def test_visits_are_recorded_on_the_master_and_shown(on_sentinel, alice):
    assert whos_online.record_user(alice) is True
    assert whos_online.record_guest("198.51.100.7") is True
    assert stored_guests(on_sentinel.current_master()) == 1
    assert widget_text(render(TAG)) == "Who's online: alice and 1 guest"


def test_a_frozen_master_costs_one_short_timeout_and_the_page_renders(on_sentinel, caplog):
    whos_online.record_guest("198.51.100.7")
    master = on_sentinel.current_master()
    master.freeze()
    try:
        with caplog.at_level(logging.WARNING, logger="whos_online"):
            assert widget_text(render(TAG)) == "Who's online: nobody"
        (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert "TimeoutError" in warning.getMessage()
    finally:
        master.resume()


def test_a_sentinel_that_does_not_answer_does_not_stop_recording(on_sentinel, breaker_clock):
    assert whos_online.record_guest("198.51.100.1") is True  # the master is known now
    breaker_clock.advance(connection.MASTER_CHECK_INTERVAL)  # time to ask again
    on_sentinel.sentinel.freeze()
    try:
        assert whos_online.record_guest("198.51.100.2") is True
        assert whos_online.record_guest("198.51.100.3") is True
    finally:
        on_sentinel.sentinel.resume()
    assert stored_guests(on_sentinel.current_master()) == 3


def test_after_a_failover_visits_go_to_the_new_master(on_sentinel, breaker_clock, monkeypatch):
    assert whos_online.record_guest("198.51.100.1") is True
    former = on_sentinel.current_master()
    on_sentinel.failover()
    promoted = on_sentinel.current_master()
    assert promoted is not former

    # Within a second of the last question the pooled connection may still be the old one;
    # once a second has passed, the next visit asks the Sentinel again.
    breaker_clock.advance(connection.MASTER_CHECK_INTERVAL)
    assert whos_online.record_guest("198.51.100.2") is True
    assert whos_online.record_guest("198.51.100.3") is True

    assert stored_guests(promoted) >= 2
    assert sentinel_pool().master_address[1] == promoted.port


def test_a_refused_write_asks_the_sentinel_and_goes_to_the_new_master(on_sentinel, breaker_clock):
    """A pooled connection to a master that Sentinel has since turned into a replica gets
    READONLY: the write is tried once more on the master the Sentinel names, at once, without
    waiting for the next scheduled question (the clock does not move here)."""
    assert whos_online.record_guest("198.51.100.1") is True  # a pooled connection to the master
    former = on_sentinel.current_master()
    on_sentinel.failover(timeout=40)
    on_sentinel.wait_until_replicating(timeout=40)  # the former master is a replica now
    promoted = on_sentinel.current_master()

    assert whos_online.record_guest("198.51.100.4") is True

    assert stored_guests(promoted) >= 1
    assert sentinel_pool().master_address[1] == promoted.port
    assert former is not promoted
