"""whos_online on a real 3-master Redis Cluster, started for this module from the pip-installed
redis-server (tests/support/topologies.py): the middleware, the tags, the API, the JSON view, the
dashboard and the cleanup, with one shard and with shards spread over the masters."""

from __future__ import annotations

import logging
import time
from io import StringIO
from typing import TYPE_CHECKING

import pytest
from django.core.management import call_command
from django.test import Client as BrowserClient

import whos_online
from tests.support.helpers import configure, render, text, widget_text
from tests.support.topologies import ClusterServers, running
from whos_online.backend import keyspace
from whos_online.backend.clients import admin_client, request_client
from whos_online.config.settings import get_config

if TYPE_CHECKING:
    from collections.abc import Iterator

    from django.contrib.auth.models import AbstractUser
    from django.test import Client

# Real clusters and Sentinel groups: seconds per test, minutes in all.
pytestmark = pytest.mark.slow

TAG = "{% load whos_online %}{% whos_online %}"
SHARDS = 6


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterServers]:
    """One cluster for the module (forming one takes seconds). A master that stops leaves the
    others serving their slots, as a site would configure a cluster without replicas."""
    with running(ClusterServers()) as servers:
        for node in servers.nodes:
            node.command("CONFIG", "SET", "cluster-require-full-coverage", "no")
        yield servers


@pytest.fixture(params=[1, SHARDS], ids=["one-shard", "shards"])
def on_cluster(request, settings, cluster) -> int:
    cluster.flush()
    configure(settings, REDIS_URL=cluster.url, REDIS_CLUSTER=True, SHARDS=request.param)
    return int(request.param)


@pytest.fixture
def sharded(settings, cluster) -> None:
    cluster.flush()
    configure(settings, REDIS_URL=cluster.url, REDIS_CLUSTER=True, SHARDS=SHARDS)


def cleanup() -> str:
    out = StringIO()
    call_command("whos_online_cleanup", stdout=out, verbosity=2)
    return out.getvalue()


def test_the_app_uses_the_cluster_client(on_cluster):
    assert type(request_client()).__name__ == "RedisCluster"
    assert type(admin_client()).__name__ == "RedisCluster"


def test_visits_through_the_middleware_show_in_tags_api_and_json(
    on_cluster, client: Client, alice: AbstractUser, staff: AbstractUser, mid_utc_day: float
):
    client.get("/plain/")
    client.get(f"/login/{alice.username}/")
    client.get("/plain/")
    BrowserClient(REMOTE_ADDR="198.51.100.9").get("/plain/")

    assert whos_online.online_counts() == (1, 1, 0, 2)
    assert [user.name for user in whos_online.online_users()] == ["alice"]
    assert widget_text(render(TAG)) == "Who's online: alice and 1 guest"
    assert whos_online.is_online(alice)
    assert whos_online.last_seen(alice) is not None
    assert whos_online.unique_visitors() >= 2

    staff_browser = BrowserClient(REMOTE_ADDR="198.51.100.10")
    staff_browser.force_login(staff)  # type: ignore [arg-type]
    document = staff_browser.get("/online/counts.json").json()
    assert (document["users"], document["guests"], document["ok"]) == (2, 1, True)
    assert [entry["name"] for entry in document["names"]][-1] == "alice"
    assert staff_browser.get("/online/").status_code == 200


def test_the_cleanup_prunes_and_samples_on_the_cluster(on_cluster, alice, bob):
    whos_online.record_user(alice, now=1_000.0)
    whos_online.record_user(bob)
    whos_online.record_guest("198.51.100.7")

    output = cleanup()

    assert "Removed 1 user last seen before" in output
    assert whos_online.online_counts() == (1, 1, 0, 2)
    assert whos_online.peak().people == 2
    assert [count for _, count in whos_online.get_counter("online:guests", 60)] == [1]
    assert whos_online.forget_user(bob) is True
    assert whos_online.online_counts().users == 0


def test_shards_spread_over_every_master(sharded, cluster, db):
    for number in range(60):
        whos_online.record_guest(f"198.51.100.{number}")
    holders = set()
    for node in cluster.nodes:
        for key in node.client().scan_iter(match="*:guests"):
            holders.add(node.port)
            assert text(key).startswith("{whos_online:")
    assert holders == {node.port for node in cluster.nodes}
    tags = keyspace.layout(get_config())
    assert {cluster.node_of_slot(keyspace.slot(shard.tag)).port for shard in tags} == holders
    assert whos_online.online_counts().guests == 60


def test_a_room_s_people_live_with_their_shard_and_are_read_together(
    on_cluster, cluster, alice, db
):
    for number in range(30):
        whos_online.record_guest(f"198.51.100.{number}", room="topic:1")
    whos_online.record_user(alice, room="topic:1")
    whos_online.record_guest("198.51.100.0", room="topic:2")  # moves to another room

    assert whos_online.online_counts(room="topic:1") == (1, 29, 0, 30)
    assert whos_online.online_counts(room="topic:2") == (0, 1, 0, 1)
    assert [user.name for user in whos_online.online_users(room="topic:1")] == ["alice"]
    holders = {
        node.port
        for node in cluster.nodes
        for _key in node.client().scan_iter(match="*:room:topic:1:guests")
    }
    assert len(holders) == (1 if on_cluster == 1 else len(cluster.nodes))

    whos_online.prune(now=time.time() + get_config().window + 1)
    assert whos_online.online_counts(room="topic:1") == (0, 0, 0, 0)
    left = [key for node in cluster.nodes for key in node.client().scan_iter(match="*room*")]
    assert left == []


def test_a_stopped_master_takes_only_its_shards_out(sharded, cluster, caplog, db):
    config = get_config()
    for number in range(60):
        whos_online.record_guest(f"198.51.100.{number}")
    base_node = cluster.node_of_slot(keyspace.slot("whos_online"))
    victim = next(node for node in cluster.nodes if node is not base_node)
    lost = [
        shard
        for shard in keyspace.layout(config)
        if cluster.node_of_slot(keyspace.slot(shard.tag)) is victim
    ]
    assert lost
    on_victim = sum(int(victim.client().zcard(shard.key("guests"))) for shard in lost)
    victim.stop()
    try:
        with caplog.at_level(logging.WARNING, logger="whos_online"):
            markup = render(TAG)
            again = render(TAG)
        assert widget_text(markup) == f"Who's online: {60 - on_victim} guests"
        assert again == markup
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == len(lost)
        assert whos_online.record_guest("198.51.100.250") in {True, False}
    finally:
        victim.start()
        cluster.wait_until_ok()


def test_an_asgi_visit_is_queued_and_flushed_to_its_shard(sharded, settings, monkeypatch, db):
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    from whos_online.recording import requests

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("recorded through sync_to_async")

    configure(settings, FLUSH_INTERVAL=10)
    monkeypatch.setattr(requests, "sync_to_async", refuse)
    response = async_to_sync(AsyncClient().get)("/async/")

    assert response.status_code == 200
    assert whos_online.online_counts().guests == 1  # the read writes the queue first


def test_a_flush_on_the_cluster_is_one_call_per_shard_with_all_its_visits(
    sharded, cluster, settings, monkeypatch, db
):
    from whos_online.flushing import batches
    from whos_online.flushing import flusher as flushing

    configure(settings, FLUSH_INTERVAL=10)
    monkeypatch.setattr(flushing.Flusher, "schedule", lambda self, delay: None)  # no thread
    for number in range(60):
        assert BrowserClient(REMOTE_ADDR=f"198.51.100.{number}").get("/plain/").status_code == 200
    calls: list[tuple[str, int]] = []
    write_group = batches.write_group

    def counted(group: batches.Group) -> object:
        calls.append((group.shard.tag, len(group.calls)))
        return write_group(group)

    monkeypatch.setattr(batches, "write_group", counted)

    assert whos_online.flush() is True

    assert sorted(tag for tag, _ in calls) == sorted(s.tag for s in keyspace.layout(get_config()))
    assert all(count == 1 for _, count in calls)  # every shard's visits in one script call
    assert whos_online.online_counts().guests == 60


def test_a_test_process_s_keys_are_removed_from_every_master(sharded, cluster, settings, db):
    from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

    from whos_online import apps

    whos_online.record_guest("198.51.100.1")  # the live data, under {whos_online…}
    client = admin_client()
    live = sorted(text(key) for key in client.scan_iter())
    configure(settings, ISOLATE_TESTS=True)
    prefix = get_config().key_prefix
    for number in range(40):
        BrowserClient(REMOTE_ADDR=f"198.51.100.{number}").get("/plain/")
    assert whos_online.flush() is True
    written = [text(key) for key in client.scan_iter() if text(key) not in live]
    # Masters own equal, contiguous ranges of slots (redis-cli --cluster create).
    masters = {
        key_slot(key.encode()) * len(cluster.nodes) // REDIS_CLUSTER_HASH_SLOTS for key in written
    }
    assert len(masters) == len(cluster.nodes)  # the shards' keys are on every master

    apps.remove_test_keys(prefixes=[prefix])

    assert sorted(text(key) for key in client.scan_iter()) == live


def test_connections_hold_people_in_rooms_apart_from_their_pages(
    on_cluster, alice: AbstractUser, bob: AbstractUser
):
    whos_online.enter("chat:lobby", user=alice, connection="tab-1")
    whos_online.enter("chat:lobby", user=alice, connection="tab-2")
    whos_online.enter("chat:lobby", user=bob, connection="tab-3")
    whos_online.enter("chat:lobby", address="198.51.100.9", connection="tab-4")
    whos_online.record_user(alice, room="page:a")
    whos_online.leave("chat:lobby", user=alice, connection="tab-1")
    whos_online.leave("chat:lobby", user=bob, connection="tab-3")

    assert [user.name for user in whos_online.online_users(room="chat:lobby")] == ["alice"]
    assert whos_online.online_counts(room="chat:lobby").total == 2
    assert [user.name for user in whos_online.online_users(room="page:a")] == ["alice"]
    whos_online.leave("chat:lobby", user=alice, connection="tab-2")
    assert whos_online.online_users(room="chat:lobby") == []
    assert whos_online.forget_user(alice)
    assert whos_online.online_counts(room="page:a").users == 0
