"""A test process's keys are removed as it ends, and no other key (``keyspace.remove_prefix``)."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

import whos_online
from tests.support.helpers import GUEST_IP, configure, text
from whos_online import apps
from whos_online.backend import keyspace
from whos_online.config import process
from whos_online.config.settings import get_config

PREFIX = "test_site_0123abcd"


def keys_of(r) -> list[str]:
    return sorted(text(key) for key in r.scan_iter(count=1000))


def test_the_pattern_matches_the_base_tag_and_the_shards_tags_only():
    assert keyspace.prefix_pattern(PREFIX) == "{test_site_0123abcd[}:]*"
    assert keyspace.prefix_pattern(r"a*b?[c]\d") == r"{a\*b\?\[c\]\\d[}:]*"


def test_removing_a_prefix_removes_its_keys_and_no_other(r):
    ours = [f"{{{tag}}}:users" for tag in (PREFIX, *keyspace.shard_tags(PREFIX, 4))]
    others = [
        "{test_site_0123abcd-b}:users",  # a prefix that starts with ours
        "{test_site_0123abcdef}:users",
        "{whos_online}:users",  # the live data
        "test_site_0123abcd:users",  # no hash tag
        "{test_site}:{test_site_0123abcd}",
    ]
    for key in [*ours, *others]:
        r.set(key, "1")

    assert keyspace.remove_prefix(r, PREFIX) == len(ours)

    assert keys_of(r) == sorted(others)


def test_wildcards_in_the_prefix_match_themselves(r):
    prefix = "test_a*[b]?_0123abcd"
    r.set(f"{{{prefix}}}:users", "1")
    r.set("{test_aXb?_0123abcd}:users", "1")  # what the pattern would match unescaped

    assert keyspace.remove_prefix(r, prefix) == 1

    assert keys_of(r) == ["{test_aXb?_0123abcd}:users"]


def test_many_keys_go_in_chunks(r, monkeypatch):
    monkeypatch.setattr(keyspace, "UNLINK_CHUNK", 7)
    r.mset({f"{{{PREFIX}}}:k{number}": "1" for number in range(50)})
    r.set("{whos_online}:users", "1")

    assert keyspace.remove_prefix(r, PREFIX) == 50

    assert keys_of(r) == ["{whos_online}:users"]


def test_a_test_process_writes_under_its_prefix_and_its_end_removes_it(r, settings, db):
    whos_online.record_guest("198.51.100.7", room="page:about")  # the live data
    live = keys_of(r)
    assert live
    configure(settings, ISOLATE_TESTS=True, SHARDS=4)
    prefix = get_config().key_prefix
    whos_online.update_counter("signups")

    response = Client(REMOTE_ADDR=GUEST_IP).get("/plain/")
    whos_online.record_guest("198.51.100.8", room="page:about")
    assert whos_online.flush() is True

    assert response.status_code == 200
    written = sorted(set(keys_of(r)) - set(live))
    assert written
    assert all(key.startswith((f"{{{prefix}}}:", f"{{{prefix}:")) for key in written)
    assert whos_online.online_counts().guests == 2  # not the live guest

    process.run_keys().end()  # as the process ends

    assert keys_of(r) == live


def test_a_redis_that_cannot_be_reached_leaves_the_keys_and_says_how_to_remove_them(
    redis_down, caplog
):
    with caplog.at_level(logging.WARNING, logger="whos_online"):
        apps.remove_test_keys(prefixes=[PREFIX])

    assert len(caplog.records) == 1
    assert PREFIX in caplog.records[0].getMessage()
    assert "--pattern '{test_site_0123abcd[}:]*'" in caplog.records[0].getMessage()


@pytest.mark.parametrize("backend", ["fake"], indirect=True)
def test_the_end_of_a_test_run_reaches_the_removal(r, caplog, backend):
    r.set(f"{{{PREFIX}}}:users", "1")

    with caplog.at_level(logging.DEBUG, logger="whos_online"):
        process.test_run_ended.send(sender=process.RunKeys, prefixes=[PREFIX])

    assert keys_of(r) == []
    assert "removed 1 keys of this test process (test_site_0123abcd)" in caplog.text
