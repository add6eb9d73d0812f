"""The Sentinel listener (``whos_online.backend.sentinels``) against a stand-in Sentinel that can be
made to misbehave (tests/support/fake_sentinel.py): which announcements it follows, and that nothing
a Sentinel sends stops it. tests/backend/test_sentinel_group.py runs it on a real Sentinel group."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import pytest

from tests.support.fake_sentinel import FakeSentinel
from tests.support.helpers import JOIN_TIMEOUT
from whos_online.backend import sentinels
from whos_online.backend.clients import REQUEST_TIMEOUT
from whos_online.backend.sentinels import FollowingSentinel, SentinelListener

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.support.fake_sentinel import Address

SERVICE = "mymaster"
MASTER: Address = ("127.0.0.1", 16379)
REPLICA: Address = ("127.0.0.1", 16380)
#: An address that no Sentinel knows as anything of the service.
STRANGER: Address = ("203.0.113.66", 6379)


def switch(to: Address, service: str = SERVICE) -> str:
    return f"{service} {MASTER[0]} {MASTER[1]} {to[0]} {to[1]}"


def promotion(of: Address, service: str = SERVICE) -> str:
    host, port = of
    return f"slave {host}:{port} {host} {port} @ {service} {MASTER[0]} {MASTER[1]}"


def replica_found(replica: Address) -> str:
    host, port = replica
    return f"slave {host}:{port} {host} {port} @ {SERVICE} {MASTER[0]} {MASTER[1]}"


@pytest.fixture
def fake() -> Iterator[FakeSentinel]:
    with FakeSentinel(SERVICE, MASTER, [REPLICA]) as server:
        yield server


class Followed:
    """A listener of ``fake`` (not started) with the promotions its manager was told of."""

    def __init__(self, fake: FakeSentinel) -> None:
        self.manager = FollowingSentinel(
            [("127.0.0.1", fake.port)],
            sentinel_kwargs={
                "socket_timeout": REQUEST_TIMEOUT,
                "socket_connect_timeout": REQUEST_TIMEOUT,
            },
        )
        self.pool = self.manager.master_for(SERVICE).connection_pool  # type: ignore [no-untyped-call]
        self.listener = SentinelListener(self.manager, self.manager.sentinels[0], self.pool)
        self.promoted: list[Address] = []
        promote = self.manager.promote

        def noting(service_name: str, promoted: Address, replaced: Address) -> None:
            self.promoted.append(promoted)
            promote(service_name, promoted, replaced)

        self.manager.promote = noting  # type: ignore [method-assign]

    def start(self, fake: FakeSentinel) -> None:
        self.listener.start()
        assert self.listener.subscribed.wait(JOIN_TIMEOUT)
        fake.wait_for_subscriber(JOIN_TIMEOUT)

    def stop(self) -> None:
        self.listener.stop()
        self.listener.join(JOIN_TIMEOUT)
        assert not self.listener.is_alive()


@pytest.fixture
def followed(fake) -> Iterator[Followed]:
    found = Followed(fake)
    yield found
    if found.listener.is_alive():
        found.stop()


def wait_for(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + JOIN_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


# Which announcements are followed


@pytest.mark.parametrize("channel", [sentinels.SWITCHED, sentinels.PROMOTED])
def test_an_announcement_naming_a_known_replica_is_followed(followed, channel):
    message = switch(REPLICA) if channel == sentinels.SWITCHED else promotion(REPLICA)

    followed.listener.handle(channel, message)

    assert followed.promoted == [REPLICA]
    assert followed.pool.master_address == REPLICA


@pytest.mark.parametrize("channel", [sentinels.SWITCHED, sentinels.PROMOTED])
def test_an_announcement_naming_an_address_no_sentinel_knows_is_ignored(followed, caplog, channel):
    """One Sentinel, with no quorum, must not send the writes (and the password) elsewhere."""
    message = switch(STRANGER) if channel == sentinels.SWITCHED else promotion(STRANGER)

    with caplog.at_level(logging.WARNING, logger="whos_online"):
        followed.listener.handle(channel, message)

    assert followed.promoted == []
    assert followed.manager.promotions == {}
    assert followed.pool.get_master_address() == MASTER
    assert "203.0.113.66:6379" in caplog.text


def test_a_replica_known_before_the_sentinels_stopped_answering_is_still_followed(fake, followed):
    assert followed.manager.learn_replicas(SERVICE) == {REPLICA}
    fake.answering = False

    followed.listener.handle(sentinels.SWITCHED, switch(REPLICA))

    assert followed.promoted == [REPLICA]


def test_without_any_answer_from_the_sentinels_nothing_is_followed(fake, followed):
    fake.answering = False

    followed.listener.handle(sentinels.SWITCHED, switch(REPLICA))

    assert followed.promoted == []


def test_a_replica_added_since_is_verified_by_asking_the_sentinels(fake, followed):
    assert followed.manager.learn_replicas(SERVICE) == {REPLICA}
    newcomer = ("127.0.0.1", 16381)
    fake.replicas.append(newcomer)

    followed.listener.handle(sentinels.SWITCHED, switch(newcomer))

    assert followed.promoted == [newcomer]


def test_a_replica_announced_as_found_is_known_before_the_sentinels_stop_answering(fake, followed):
    newcomer = ("127.0.0.1", 16381)
    fake.replicas.append(newcomer)
    followed.listener.handle(sentinels.REPLICA_FOUND, replica_found(newcomer))
    fake.answering = False

    followed.listener.handle(sentinels.SWITCHED, switch(newcomer))

    assert followed.promoted == [newcomer]


def test_over_pub_sub_a_stranger_is_never_followed_and_a_replica_is(fake, followed):
    followed.start(fake)

    fake.publish(sentinels.SWITCHED, switch(STRANGER))
    fake.publish(sentinels.SWITCHED, switch(REPLICA))
    wait_for(lambda: followed.promoted, "the switch to the replica")

    assert followed.promoted == [REPLICA]


# Messages that cannot be read


@pytest.mark.parametrize(
    ("channel", "data"),
    [
        pytest.param(sentinels.SWITCHED, b"\xff\xfe" + switch(REPLICA).encode(), id="not-utf-8"),
        pytest.param(sentinels.SWITCHED, 42, id="integer"),
        pytest.param(sentinels.SWITCHED, None, id="none"),
        pytest.param(sentinels.SWITCHED, switch(REPLICA) + " extra", id="too-many-fields"),
        pytest.param(sentinels.SWITCHED, f"{SERVICE} 127.0.0.1 16379", id="too-few-fields"),
        pytest.param(sentinels.PROMOTED, promotion(REPLICA) + " extra", id="promotion-long"),
        pytest.param(sentinels.PROMOTED, "slave", id="promotion-short"),
        pytest.param(sentinels.ABORTED, f"master {SERVICE}", id="abort-short"),
        pytest.param(sentinels.SWITCHED, switch(("127.0.0.1", 0)), id="port-zero"),
        pytest.param(sentinels.SWITCHED, switch(("127.0.0.1", 65536)), id="port-too-big"),
        pytest.param(
            sentinels.SWITCHED, switch(REPLICA).replace("16380", "1_6380"), id="port-underscore"
        ),
        pytest.param(
            sentinels.SWITCHED, switch(REPLICA).replace("16380", "\u0661\u0666"), id="port-arabic"
        ),
        pytest.param(b"\xff\xfe", switch(REPLICA), id="channel-not-utf-8"),
        pytest.param(7, switch(REPLICA), id="channel-integer"),
    ],
)
def test_a_message_that_cannot_be_read_changes_nothing(followed, channel, data):
    followed.listener.handle(channel, data)

    assert followed.promoted == []
    assert followed.manager.promotions == {}


def test_bytes_are_read_as_text(followed):
    followed.listener.handle(sentinels.SWITCHED.encode(), switch(REPLICA).encode())

    assert followed.promoted == [REPLICA]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xff\xfe" + switch(REPLICA).encode(), id="not-utf-8"),
        pytest.param(42, id="integer"),
        pytest.param(f"{SERVICE} 127.0.0.1", id="wrong-field-count"),
    ],
)
def test_a_message_that_cannot_be_read_does_not_stop_the_listener(fake, followed, data):
    followed.start(fake)

    fake.publish(sentinels.SWITCHED, data)
    fake.publish(b"\xff\xfe", switch(REPLICA))
    fake.publish(sentinels.SWITCHED, switch(REPLICA))
    wait_for(lambda: followed.promoted, "the readable switch after the unreadable one")

    assert followed.listener.is_alive()
    assert followed.promoted == [REPLICA]
