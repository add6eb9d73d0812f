"""A process under tests writes under a prefix of its own (``whos_online.config.process``).

whos_online's own tests turn it off (tests/settings.py); these turn it back on. The site's test
run as a whole, under Django's runner and pytest-django, is tests/test_site_test_runs.py.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from django.core import mail
from django.test import override_settings

from tests.support.helpers import configure
from tests.support.processes import in_a_fork
from whos_online.backend import keyspace
from whos_online.config import process, rules
from whos_online.config import settings as conf
from whos_online.config.settings import config_changed, get_config

#: A prefix made of the default KEY_PREFIX: ``test_``, the prefix, and 8 random hex digits.
TEST_PREFIX = re.compile(r"test_whos_online_([0-9a-f]{8})")


@pytest.fixture
def isolated(settings) -> None:
    configure(settings, ISOLATE_TESTS=True)


@pytest.fixture
def outside_tests(monkeypatch) -> None:
    """This process as it was before ``setup_test_environment()``: no outbox, never seen under
    tests. Both come back after the test."""
    monkeypatch.delattr(mail, "outbox")
    monkeypatch.setattr(conf, "_under_tests", False)
    conf.reset()


def test_a_test_environment_is_told_by_djangos_email_outbox(monkeypatch):
    assert hasattr(mail, "outbox")  # pytest-django called setup_test_environment()
    assert process.in_test_environment() is True

    monkeypatch.delattr(mail, "outbox")

    assert process.in_test_environment() is False


def test_under_tests_the_keys_have_a_prefix_of_their_own(isolated):
    config = get_config()

    assert TEST_PREFIX.fullmatch(config.key_prefix)
    assert keyspace.key(config, "users") == f"{{{config.key_prefix}}}:users"
    # The Redis Cluster hash tag stays valid, for the base tag and each shard's.
    assert rules.key_prefix(config.key_prefix) == []
    assert all(rules.key_prefix(tag) == [] for tag in keyspace.shard_tags(config.key_prefix, 4))


def test_the_prefix_is_the_processs_whatever_the_settings_become(settings, isolated):
    first = get_config().key_prefix
    token = TEST_PREFIX.fullmatch(first)
    assert token

    with override_settings(WHOS_ONLINE={"WINDOW": 300}):
        assert get_config().key_prefix == first
    configure(settings, KEY_PREFIX="site-a")

    assert get_config().key_prefix == f"test_site-a_{token.group(1)}"
    # Both are removed as the process ends.
    assert {first, get_config().key_prefix} <= process.run_keys().prefixes


def test_isolate_tests_false_writes_under_the_prefix_the_settings_give(settings):
    configure(settings, ISOLATE_TESTS=False, KEY_PREFIX="site-a")

    assert get_config().key_prefix == "site-a"


def test_isolate_tests_is_checked(settings):
    settings.WHOS_ONLINE = {"ISOLATE_TESTS": "yes"}

    messages = conf.validate(settings.WHOS_ONLINE)

    assert [message.id for message in messages] == ["whos_online.E035"]
    assert "must be True or False" in messages[0].msg


def test_outside_tests_the_prefix_is_the_settings_whatever_isolate_tests_says(
    outside_tests, isolated
):
    assert get_config().key_prefix == "whos_online"
    assert process.run_keys() is process.run_keys()


def test_a_process_is_under_tests_from_the_test_environment_on_and_stays_so(
    outside_tests, isolated, monkeypatch
):
    assert get_config().key_prefix == "whos_online"
    changes: list[Any] = []

    def receiver(**kwargs: Any) -> None:
        changes.append(kwargs)

    config_changed.connect(receiver, dispatch_uid="tests.isolation.changes")
    try:
        monkeypatch.setattr(mail, "outbox", [], raising=False)  # setup_test_environment()
        under_tests = get_config()
        # What was made of the live Config (a queue, clients) went with it.
        assert len(changes) == 1

        monkeypatch.delattr(mail, "outbox")  # teardown_test_environment()
        after = get_config()
    finally:
        config_changed.disconnect(dispatch_uid="tests.isolation.changes")

    assert TEST_PREFIX.fullmatch(under_tests.key_prefix)
    # What the process writes as it exits, after the teardown, goes where its tests wrote.
    assert after is under_tests
    assert len(changes) == 1


def test_a_process_under_tests_that_never_read_the_settings_drops_nothing(
    outside_tests, isolated, monkeypatch
):
    changes: list[Any] = []
    config_changed.connect(
        lambda **kwargs: changes.append(kwargs), weak=False, dispatch_uid="tests.isolation.changes"
    )
    try:
        monkeypatch.setattr(mail, "outbox", [], raising=False)
        assert TEST_PREFIX.fullmatch(get_config().key_prefix)
    finally:
        config_changed.disconnect(dispatch_uid="tests.isolation.changes")

    assert changes == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_process_has_a_prefix_of_its_own(isolated):
    """As a worker of Django's ``--parallel`` (fork) has, so that parallel test processes do not
    see each other's people."""
    parent = get_config().key_prefix

    report, code = in_a_fork(lambda: f"{get_config().key_prefix} {get_config().key_prefix}")

    first, second = report.split()
    assert code == 0
    assert TEST_PREFIX.fullmatch(first)
    assert first == second != parent
    assert get_config().key_prefix == parent


def test_a_test_run_that_ends_names_every_prefix_it_wrote_under():
    ended: list[Any] = []

    def receiver(**kwargs: Any) -> None:
        ended.append(kwargs["prefixes"])

    keys = process.RunKeys()
    process.test_run_ended.connect(receiver, dispatch_uid="tests.isolation.ended")
    try:
        keys.end()  # nothing written: nothing to remove
        keys.prefix("b")
        keys.prefix("a")
        keys.prefix("b")
        keys.end()
    finally:
        process.test_run_ended.disconnect(dispatch_uid="tests.isolation.ended")

    assert ended == [[f"test_a_{keys.token}", f"test_b_{keys.token}"]]
