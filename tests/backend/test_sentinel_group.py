"""whos_online on a real Sentinel group (a master, a replica and a Sentinel, from the pip-installed
redis-server: tests/support/topologies.py), reached through a django-redis cache alias."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest
import redis
from redis.sentinel import SentinelConnectionPool

import whos_online
from tests.support.helpers import JOIN_TIMEOUT, configure, render, widget_text
from tests.support.topologies import SentinelGroup, fresh_group, running, sentinel_cache
from whos_online.backend import connection, sentinels
from whos_online.backend.clients import REQUEST_TIMEOUT, no_retry, request_client
from whos_online.backend.sentinels import FollowingSentinel, SentinelListener
from whos_online.config import process

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

# Real clusters and Sentinel groups: seconds per test, minutes in all.
pytestmark = pytest.mark.slow

TAG = "{% load whos_online %}{% whos_online %}"


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    with running(fresh_group("whos-online-sentinel-tests")) as servers:
        yield servers


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


def test_a_frozen_master_costs_short_timeouts_and_the_page_renders(on_sentinel, caplog):
    whos_online.record_guest("198.51.100.7")
    master = on_sentinel.current_master()
    master.freeze()
    try:
        with caplog.at_level(logging.WARNING, logger="whos_online"):
            assert widget_text(render(TAG)) == "Who's online: nobody"
            # The first timeout is a strike; the second, with no answer between, an outage.
            assert [r for r in caplog.records if r.levelno == logging.WARNING] == []
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


def test_a_refused_write_asks_the_sentinel_and_goes_to_the_new_master(
    on_sentinel, breaker_clock, monkeypatch
):
    """A pooled connection to a master that Sentinel has since turned into a replica gets
    READONLY: the write is tried once more on the master the Sentinel names, at once, without
    waiting for the next scheduled question (the clock does not move here). The listeners,
    which would have moved the connection already, are off."""
    monkeypatch.setattr(FollowingSentinel, "listen", lambda self, pool: None)
    assert whos_online.record_guest("198.51.100.1") is True  # a pooled connection to the master
    former = on_sentinel.current_master()
    on_sentinel.failover(timeout=40)
    on_sentinel.wait_until_replicating(timeout=40)  # the former master is a replica now
    promoted = on_sentinel.current_master()

    assert whos_online.record_guest("198.51.100.4") is True

    assert stored_guests(promoted) >= 1
    assert sentinel_pool().master_address[1] == promoted.port
    assert former is not promoted


def test_visits_queued_across_a_failover_are_written_to_the_new_master(
    on_sentinel, settings, breaker_clock, monkeypatch, db
):
    """Visits wait in the queue while Sentinel promotes the replica; the next flush finds the
    new master and writes them all there, in one batch."""
    from django.test import Client

    from whos_online.flushing import flusher as flushing

    configure(settings, FLUSH_INTERVAL=10)
    monkeypatch.setattr(flushing.Flusher, "schedule", lambda self, delay: None)  # no thread
    addresses = [f"198.51.100.{number}" for number in range(1, 6)]
    for address in addresses[:2]:
        assert Client(REMOTE_ADDR=address).get("/plain/").status_code == 200
    assert whos_online.flush() is True  # a pooled connection to the master
    for address in addresses[2:]:
        assert Client(REMOTE_ADDR=address).get("/plain/").status_code == 200
    assert stored_guests(on_sentinel.current_master()) == 2  # three still queued
    former = on_sentinel.current_master()
    on_sentinel.failover()
    promoted = on_sentinel.current_master()
    breaker_clock.advance(connection.MASTER_CHECK_INTERVAL)

    assert whos_online.flush() is True

    assert promoted is not former
    assert stored_guests(promoted) == len(addresses)


def manager() -> FollowingSentinel:
    pool = sentinel_pool()
    assert isinstance(pool.sentinel_manager, FollowingSentinel)
    return pool.sentinel_manager


def wait_for(condition: Callable[[], object], what: str, timeout: float = JOIN_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def test_a_promotion_is_followed_as_announced_before_the_sentinel_names_it(
    on_sentinel, breaker_clock
):
    """The clock does not move, so the Sentinels are not asked again on the request path: only
    the announcement can move the visit after it to the promoted replica."""
    assert whos_online.record_guest("198.51.100.1") is True  # listening from the first call on
    for listener in threading.enumerate():
        if isinstance(listener, SentinelListener) and listener.manager is manager():
            assert listener.subscribed.wait(JOIN_TIMEOUT)
    former, promoted = on_sentinel.master, on_sentinel.replica
    failing = threading.Thread(target=on_sentinel.failover, kwargs={"timeout": 80})
    failing.start()
    try:
        # Only a listener moves the pool while no request asks (the clock does not move). A
        # failover right after another waits about 21 s for a promotable replica.
        wait_for(
            lambda: sentinel_pool().master_address[1] == promoted.port,
            "the announcement of the promotion",
            timeout=90,
        )
        assert whos_online.record_guest("198.51.100.2") is True
    finally:
        failing.join(JOIN_TIMEOUT + 90)
    guests = "{whos_online}:guests"
    assert promoted.client().zcard(guests) == 2
    assert former.client().zcard(guests) in {1, 2}  # 2 once it replicates the new master
    assert sentinel_pool().master_address[1] == promoted.port


def listener_on(group: SentinelGroup) -> tuple[SentinelListener, FollowingSentinel]:
    """A listener of the group's Sentinel that is not started: the tests hand it messages.

    Its questions to the Sentinel time out after a second and are not retried, as the app's
    own are: redis-py 6's retries would keep a frozen Sentinel frozen for 15 s, into TILT mode
    (see topologies.SENTINEL_TILT_SECONDS), and the next failover would wait 30 s for it."""
    following = FollowingSentinel(
        [("127.0.0.1", group.sentinel_port)], sentinel_kwargs=no_retry(timeout=1)
    )
    pool = following.master_for(group.service_name).connection_pool  # type: ignore [no-untyped-call]
    pool.get_master_address()
    return SentinelListener(following, following.sentinels[0], pool), following


def promotion_message(group: SentinelGroup, service_name: str | None = None) -> str:
    replica, master = group.replica.port, group.master.port
    return (
        f"slave 127.0.0.1:{replica} 127.0.0.1 {replica} "
        f"@ {service_name or group.service_name} 127.0.0.1 {master}"
    )


def test_an_announced_promotion_repoints_the_pool_until_the_failover_is_aborted(on_sentinel):
    listener, following = listener_on(on_sentinel)
    pool = listener.pool
    assert pool.master_address == ("127.0.0.1", on_sentinel.master.port)

    listener.handle(sentinels.PROMOTED, promotion_message(on_sentinel))
    assert pool.master_address == ("127.0.0.1", on_sentinel.replica.port)
    assert pool.get_master_address() == ("127.0.0.1", on_sentinel.replica.port)  # type: ignore [no-untyped-call]

    listener.handle(sentinels.ABORTED, f"master {on_sentinel.service_name} 127.0.0.1 1")
    assert pool.master_address == ("127.0.0.1", on_sentinel.master.port)
    assert following.promotions == {}


def test_a_switch_of_master_is_followed_like_a_promotion(on_sentinel):
    listener, _following = listener_on(on_sentinel)
    master, replica = on_sentinel.master.port, on_sentinel.replica.port
    listener.handle(
        sentinels.SWITCHED, f"{on_sentinel.service_name} 127.0.0.1 {master} 127.0.0.1 {replica}"
    )
    assert listener.pool.master_address == ("127.0.0.1", replica)


@pytest.mark.parametrize(
    ("channel", "data"),
    [
        (sentinels.PROMOTED, "another service"),
        (sentinels.PROMOTED, "slave 127.0.0.1:1 127.0.0.1 port @ {service} 127.0.0.1 1"),
        (sentinels.PROMOTED, "slave 127.0.0.1:1 127.0.0.1"),
        (sentinels.SWITCHED, "another-service 127.0.0.1 1 127.0.0.1 2"),
        ("+sdown", "master {service} 127.0.0.1 1"),
    ],
)
def test_messages_of_other_services_or_unreadable_ones_change_nothing(on_sentinel, channel, data):
    listener, following = listener_on(on_sentinel)
    message = data.format(service=on_sentinel.service_name)
    if message == "another service":
        message = promotion_message(on_sentinel, "another-service")
    listener.handle(channel, message)
    assert following.promotions == {}
    assert listener.pool.master_address == ("127.0.0.1", on_sentinel.master.port)


def test_a_switch_to_an_address_the_sentinel_does_not_know_is_ignored(on_sentinel):
    listener, following = listener_on(on_sentinel)
    master = on_sentinel.master.port

    listener.handle(
        sentinels.SWITCHED, f"{on_sentinel.service_name} 127.0.0.1 {master} 203.0.113.66 6379"
    )

    assert following.promotions == {}
    assert listener.pool.master_address == ("127.0.0.1", master)
    assert ("127.0.0.1", on_sentinel.replica.port) in following.replicas[on_sentinel.service_name]


def test_the_sentinels_answer_wins_once_it_names_another_master_or_the_trust_runs_out(
    on_sentinel, monkeypatch
):
    _listener, following = listener_on(on_sentinel)
    service, master = on_sentinel.service_name, ("127.0.0.1", on_sentinel.master.port)
    following.promote(service, ("127.0.0.1", 1), ("127.0.0.1", 2))  # replaces another master
    assert following.discover_master(service) == master
    assert following.promotions == {}

    following.promote(service, ("127.0.0.1", on_sentinel.replica.port), master)
    later = time.monotonic() + sentinels.PROMOTION_TRUST
    monkeypatch.setattr(sentinels, "time", SimpleNamespace(monotonic=lambda: later))
    assert following.discover_master(service) == master


def test_a_promotion_stands_while_no_sentinel_answers(on_sentinel):
    _listener, following = listener_on(on_sentinel)
    replica = ("127.0.0.1", on_sentinel.replica.port)
    following.promote(on_sentinel.service_name, replica, ("127.0.0.1", on_sentinel.master.port))
    on_sentinel.sentinel.freeze()
    try:
        assert following.discover_master(on_sentinel.service_name) == replica
    finally:
        on_sentinel.sentinel.resume()


def test_each_process_listens_once_and_reset_stops_the_listeners(on_sentinel, monkeypatch):
    assert whos_online.record_guest("198.51.100.1") is True
    assert whos_online.record_guest("198.51.100.2") is True
    ours = manager()

    def listeners(of: FollowingSentinel) -> list[SentinelListener]:
        # Listeners of one client only: an earlier test's may still be ending.
        found = [t for t in threading.enumerate() if isinstance(t, SentinelListener)]
        return [listener for listener in found if listener.manager is of]

    listening = listeners(ours)
    assert len(listening) == 1

    # A forked worker inherits none of the parent's threads, nor uses its clients: it makes a
    # client of its own, which starts listeners of its own.
    monkeypatch.setattr("os.getpid", lambda: -1)
    assert whos_online.record_guest("198.51.100.3") is True
    theirs = manager()
    started = listeners(theirs)

    assert theirs is not ours
    assert len(started) == 1
    assert listeners(ours) == listening
    for inherited in listening:
        inherited.stop()  # it would not exist in a real child; the parent keeps its own

    process.reset_home()
    for thread in started:
        thread.join(JOIN_TIMEOUT)
        assert not thread.is_alive()


def test_a_refusal_by_a_replica_just_announced_as_promoted_is_tried_again(on_sentinel, monkeypatch):
    """The announcement can overtake the promotion it announces by a moment: READONLY from the
    promoted replica then means "try again", but only within ``PROMOTION_GRACE``."""
    listener, _following = listener_on(on_sentinel)
    client = redis.Redis(connection_pool=listener.pool)
    listener.handle(sentinels.PROMOTED, promotion_message(on_sentinel))
    refused = redis.exceptions.ReadOnlyError("You can't write against a read only replica.")
    assert connection.masters().moved_after(client, refused) is True

    later = time.monotonic() + sentinels.PROMOTION_GRACE
    monkeypatch.setattr(sentinels, "time", SimpleNamespace(monotonic=lambda: later))
    assert connection.masters().moved_after(client, refused) is False


def test_connections_hold_people_in_rooms_on_the_master(on_sentinel, alice):
    whos_online.enter("chat:lobby", user=alice, connection="tab-1")
    whos_online.enter("chat:lobby", user=alice, connection="tab-2")
    whos_online.leave("chat:lobby", user=alice, connection="tab-1")

    assert [user.name for user in whos_online.online_users(room="chat:lobby")] == ["alice"]
    master = on_sentinel.current_master().client()
    assert master.zcard(f"{{whos_online}}:links:u:{alice.pk}") == 1
    whos_online.leave("chat:lobby", user=alice, connection="tab-2")
    assert whos_online.online_users(room="chat:lobby") == []
