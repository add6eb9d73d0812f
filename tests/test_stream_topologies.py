"""The live streams' subscription on a real Redis Cluster and a real Sentinel group (from the
pip-installed redis-server: tests/support/topologies.py), driven through Django's ASGI handler
in this process (``tests.support.asgi_stream``): a change reaches the streams through one
subscription, and after a Sentinel failover still does."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.asgi_stream import Stream
from tests.support.helpers import configure
from tests.support.topologies import (
    ClusterServers,
    SentinelGroup,
    fresh_group,
    running,
    sentinel_cache,
)
from tests.test_stream import ROOM, record_guest, room_widget, run, stream_url, texts

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.topologies import ServerProcess

# Real clusters and Sentinel groups: seconds per test, minutes in all.
pytestmark = pytest.mark.slow

STREAMS = 20
#: Generous: waits end as soon as what they wait for comes.
WAIT = 60.0
CHANNEL = "{whos_online}:changes"


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterServers]:
    with running(ClusterServers()) as servers:
        yield servers


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    with running(fresh_group("whos-online-stream-tests")) as servers:
        yield servers


def subscribers(servers: list[ServerProcess]) -> list[int]:
    """Subscribers of the changes channel, per server (a Sentinel subscribes to channels of
    its own on its servers)."""
    return [
        sum(int(count) for _channel, count in server.client().pubsub_numsub(CHANNEL))
        for server in servers
    ]


async def until_guests(stream: Stream, guests: int) -> list[str]:
    """States until one counts ``guests`` guests in the room; that one's texts."""
    wanted = "Here now: 1 guest" if guests == 1 else f"Here now: {guests} guests"
    deadline = time.monotonic() + WAIT
    while True:
        state = texts(await stream.state(timeout=deadline - time.monotonic()))
        if state == [wanted]:
            return state


@pytest.mark.parametrize("shards", [1, 6])
def test_a_change_reaches_the_streams_on_a_cluster(settings, db, cluster, shards):
    cluster.flush()
    configure(
        settings,
        REDIS_URL=cluster.url,
        REDIS_CLUSTER=True,
        SHARDS=shards,
        LIVE_UPDATES=True,
        REFRESH_INTERVAL=3600,  # only a message can bring the change
    )

    async def scenario() -> dict[str, Any]:
        await record_guest("198.51.100.1", room=ROOM)
        streams = [await Stream(stream_url(room_widget())).open() for _ in range(STREAMS)]
        firsts = [await until_guests(stream, 1) for stream in streams]
        await record_guest("198.51.100.2", room=ROOM)
        after = [await until_guests(stream, 2) for stream in streams]
        subscribed = subscribers(cluster.nodes)
        for stream in streams:
            await stream.close()
        return {"firsts": firsts, "after": after, "subscribed": subscribed}

    seen = run(scenario)
    assert seen["firsts"] == [["Here now: 1 guest"]] * STREAMS
    assert seen["after"] == [["Here now: 2 guests"]] * STREAMS
    assert sorted(seen["subscribed"]) == [0, 0, 1]  # one subscription, on one node


def test_a_change_reaches_the_streams_after_a_sentinel_failover(settings, db, group):
    group.wait_until_replicating()
    group.current_master().command("FLUSHALL")
    settings.CACHES = {**settings.CACHES, "sentinel": sentinel_cache(group)}
    configure(settings, REDIS_ALIAS="sentinel", LIVE_UPDATES=True, REFRESH_INTERVAL=3600)

    async def scenario() -> dict[str, Any]:
        await record_guest("198.51.100.1", room=ROOM)
        streams = [await Stream(stream_url(room_widget())).open() for _ in range(STREAMS)]
        firsts = [await until_guests(stream, 1) for stream in streams]
        before = subscribers([group.master, group.replica])
        group.failover()
        await record_guest("198.51.100.2", room=ROOM)
        after = [await until_guests(stream, 2) for stream in streams]
        # group.failover() swapped the roles: the master is the server promoted.
        subscribed = subscribers([group.master, group.replica])
        for stream in streams:
            await stream.close()
        return {"firsts": firsts, "before": before, "after": after, "subscribed": subscribed}

    seen = run(scenario)
    assert seen["firsts"] == [["Here now: 1 guest"]] * STREAMS
    assert seen["before"] == [1, 0]  # on the master
    assert seen["after"] == [["Here now: 2 guests"]] * STREAMS
    assert seen["subscribed"] == [1, 0]  # on the new master
