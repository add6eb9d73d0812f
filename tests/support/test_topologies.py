"""The real Redis topologies of tests/support/topologies.py: a cluster that serves every slot, and a
Sentinel group that fails over, as the tests that build on them expect."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import redis
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from tests.support.topologies import ClusterServers, SentinelGroup, running, slot_ranges

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.topologies import ServerProcess

#: Generous for a loaded machine, short enough that a hung server fails the test.
# Real clusters and Sentinel groups: seconds per test, minutes in all.
pytestmark = pytest.mark.slow

CLIENT_TIMEOUT = 5.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterServers]:
    """One cluster for the module: forming one takes seconds."""
    with running(ClusterServers()) as servers:
        yield servers


@pytest.fixture(scope="module")
def sentinel_group() -> Iterator[SentinelGroup]:
    with running(SentinelGroup()) as group:
        yield group


def keys_on_every_node(cluster: ClusterServers) -> dict[str, ServerProcess]:
    """A key for each node, with the node that holds it."""
    keys: dict[str, ServerProcess] = {}
    index = 0
    while len(set(keys.values())) < len(cluster.nodes):
        key = f"topology:{index}"
        node = cluster.node_of_key(key)
        if node not in keys.values():
            keys[key] = node
        index += 1
    return keys


def sentinel_of(group: SentinelGroup) -> Sentinel:
    """redis-py's Sentinel client, as the app builds one for a Sentinel-managed Redis."""
    return Sentinel(  # type: ignore [no-untyped-call]
        [("127.0.0.1", group.sentinel_port)], socket_timeout=CLIENT_TIMEOUT
    )


def discovered_master(group: SentinelGroup) -> tuple[str, int]:
    """The master that redis-py's Sentinel client finds: from SENTINEL MASTERS, not from
    GET-MASTER-ADDR-BY-NAME as ``current_master_port()``."""
    address = sentinel_of(group).discover_master(group.service_name)  # type: ignore [no-untyped-call]
    return str(address[0]), int(address[1])


def test_slot_ranges_split_as_redis_cli_does() -> None:
    assert slot_ranges(3) == [range(5461), range(5461, 10923), range(10923, 16384)]
    assert slot_ranges(1) == [range(16384)]


def test_cluster_has_three_masters_that_cover_every_slot(cluster: ClusterServers) -> None:
    assert len(cluster.nodes) == 3
    assert cluster.url == f"redis://127.0.0.1:{cluster.nodes[0].port}/0"
    for asked in cluster.nodes:
        served = sorted(
            (int(first), int(last), int(serving[1]), replicas)
            for first, last, serving, *replicas in asked.command("CLUSTER", "SLOTS")
        )
        assert served == [
            (0, 5460, cluster.nodes[0].port, []),
            (5461, 10922, cluster.nodes[1].port, []),
            (10923, 16383, cluster.nodes[2].port, []),
        ]
    assert cluster.node_of_slot(0) is cluster.nodes[0]
    assert cluster.node_of_slot(10922) is cluster.nodes[1]
    assert cluster.node_of_slot(16383) is cluster.nodes[2]


def test_cluster_client_reads_and_writes_keys_on_every_node(cluster: ClusterServers) -> None:
    cluster.flush()
    keys = keys_on_every_node(cluster)
    client = RedisCluster.from_url(cluster.url, socket_timeout=CLIENT_TIMEOUT)
    try:
        for key in keys:
            assert client.set(key, key.upper())
        assert {key: client.get(key) for key in keys} == {key: key.upper().encode() for key in keys}
    finally:
        client.close()
    for key, node in keys.items():
        assert node.command("GET", key) == key.upper()
        for other in cluster.nodes:
            if other is not node:
                # "MOVED <slot> <address>" on redis-py 5; MovedError without the word from 6 on.
                moved = r"^(MOVED )?\d+ 127\.0\.0\.1:\d+$"
                with pytest.raises(redis.exceptions.ResponseError, match=moved):
                    other.command("GET", key)
    cluster.flush()
    assert all(node.command("DBSIZE") == 0 for node in cluster.nodes)


def test_sentinel_names_the_master(sentinel_group: SentinelGroup) -> None:
    """Whichever test ran first: ``master`` follows a failover."""
    assert sentinel_group.current_master_port() == sentinel_group.master.port
    assert sentinel_group.current_master() is sentinel_group.master
    assert discovered_master(sentinel_group) == ("127.0.0.1", sentinel_group.master.port)


def test_failover_promotes_the_replica(sentinel_group: SentinelGroup) -> None:
    former, promoted = sentinel_group.master, sentinel_group.replica
    sentinel_group.failover()
    assert sentinel_group.current_master_port() == promoted.port
    assert (sentinel_group.master, sentinel_group.replica) == (promoted, former)
    assert promoted.command("INFO", "replication")["role"] == "master"
    # SENTINEL MASTERS names the new master last, once the failover is over: failover() waits.
    assert discovered_master(sentinel_group) == ("127.0.0.1", promoted.port)
    master = sentinel_of(sentinel_group).master_for(  # type: ignore [no-untyped-call]
        sentinel_group.service_name, socket_timeout=CLIENT_TIMEOUT
    )
    try:
        assert master.set("after-failover", "written")
    finally:
        master.close()
    assert promoted.command("GET", "after-failover") == "written"
