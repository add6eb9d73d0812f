from __future__ import annotations

import time
from datetime import datetime, timezone
from importlib import import_module
from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model, login
from django.contrib.auth.signals import user_logged_in
from django.test import RequestFactory

import whos_online
from tests.support.helpers import configure, members, text
from whos_online import api
from whos_online.config.settings import get_config
from whos_online.recording.guests import guest_id
from whos_online.signals import users_went_offline
from whos_online.store import cleanup

if TYPE_CHECKING:
    from collections.abc import Iterator

    import redis
    from django.contrib.auth.models import AbstractUser

WINDOW = 600


def hide_hidden_users(user: AbstractUser) -> bool:
    return user.get_username().startswith("hidden")


def user_record(r: redis.Redis, pk: object) -> dict[str, str]:
    return {text(k): text(v) for k, v in r.hgetall(f"{{whos_online}}:user:{pk}").items()}


def make_users(*names: str) -> list[AbstractUser]:
    return [get_user_model().objects.create_user(name, password="pw") for name in names]


class Sends:
    def __init__(self) -> None:
        self.calls: list[tuple[object, list[Any]]] = []

    def __call__(self, sender: object, user_ids: list[Any], **kwargs: Any) -> None:
        self.calls.append((sender, user_ids))

    @property
    def user_ids(self) -> list[list[Any]]:
        return [ids for _, ids in self.calls]


@pytest.fixture
def went_offline() -> Iterator[Sends]:
    sends = Sends()
    users_went_offline.connect(sends, weak=False, dispatch_uid="tests.went_offline")
    yield sends
    users_went_offline.disconnect(dispatch_uid="tests.went_offline")


# user_logged_in


def test_force_login_records_the_user_at_once(r, client, alice):
    client.force_login(alice)
    assert members(r, "users") == [str(alice.pk)]
    record = user_record(r, alice.pk)
    assert record["name"] == "alice"
    assert record["url"] == ""
    assert float(record["seen"]) == r.zscore("{whos_online}:users", str(alice.pk))
    assert whos_online.is_online(alice) is True


def test_login_on_a_request_moves_the_guest_to_the_users(r, alice):
    whos_online.record_guest("198.51.100.4")
    assert members(r, "guests") == [guest_id("198.51.100.4", get_config(), time.time())]
    request = RequestFactory().get("/", REMOTE_ADDR="198.51.100.4")
    request.session = import_module(django_settings.SESSION_ENGINE).SessionStore()
    login(request, alice, backend="django.contrib.auth.backends.ModelBackend")
    assert members(r, "users") == [str(alice.pk)]
    assert members(r, "guests") == []


def test_login_of_another_address_leaves_the_guest(r, alice):
    whos_online.record_guest("198.51.100.4")
    request = RequestFactory().get("/", REMOTE_ADDR="198.51.100.5")
    request.session = import_module(django_settings.SESSION_ENGINE).SessionStore()
    login(request, alice, backend="django.contrib.auth.backends.ModelBackend")
    assert members(r, "users") == [str(alice.pk)]
    assert members(r, "guests") == [guest_id("198.51.100.4", get_config(), time.time())]


def test_a_login_is_queued_like_any_recorded_request(r, settings, alice, redis_calls):
    configure(settings, FLUSH_INTERVAL=10)  # the thread would wait 10 s
    whos_online.record_guest("198.51.100.4")
    request = RequestFactory().get("/", REMOTE_ADDR="198.51.100.4")
    request.session = import_module(django_settings.SESSION_ENGINE).SessionStore()
    redis_calls.clear()

    login(request, alice, backend="django.contrib.auth.backends.ModelBackend")

    assert redis_calls.trips == []  # the login waits on nothing
    assert whos_online.flush() is True
    assert members(r, "users") == [str(alice.pk)]
    assert members(r, "guests") == []


def test_login_signal_without_a_request_records_the_user(r, alice):
    user_logged_in.send(sender=type(alice), request=None, user=alice)
    assert members(r, "users") == [str(alice.pk)]
    assert user_record(r, alice.pk)["name"] == "alice"


def test_login_of_a_hidden_user_goes_to_hidden(r, client, settings, db):
    configure(settings, HIDE_USER="tests.test_signals.hide_hidden_users")
    (hidden,) = make_users("hidden-carol")
    client.force_login(hidden)
    assert members(r, "hidden") == [str(hidden.pk)]
    assert members(r, "users") == []
    assert user_record(r, hidden.pk)["name"] == "hidden-carol"


# user_logged_out


def test_logout_removes_the_user_and_keeps_last_seen(r, client, alice, bob):
    whos_online.record_user(bob)
    client.force_login(alice)
    seen = user_record(r, alice.pk)["seen"]
    client.logout()
    assert members(r, "users") == [str(bob.pk)]
    assert user_record(r, alice.pk) == {"name": "alice", "url": "", "seen": seen}
    assert whos_online.is_online(alice) is False
    assert whos_online.last_seen(alice) == datetime.fromtimestamp(float(seen), tz=timezone.utc)


def test_logout_of_a_hidden_user_removes_them(r, client, settings, db):
    configure(settings, HIDE_USER="tests.test_signals.hide_hidden_users")
    (hidden,) = make_users("hidden-carol")
    client.force_login(hidden)
    client.logout()
    assert members(r, "hidden") == []
    assert whos_online.online_counts().users == 0
    assert "seen" in user_record(r, hidden.pk)


# Deleted users


def test_deleting_a_user_erases_presence_and_record(r, client, alice, bob):
    client.force_login(alice)
    whos_online.record_user(bob)
    pk = alice.pk
    alice.delete()
    assert members(r, "users") == [str(bob.pk)]
    assert user_record(r, pk) == {}
    assert user_record(r, bob.pk)["name"] == "bob"
    assert [user.pk for user in whos_online.online_users()] == [bob.pk]


# users_went_offline


def test_prune_reports_stale_users_once_per_chunk(r, db, monkeypatch, went_offline):
    monkeypatch.setattr(cleanup, "PRUNE_CHUNK_SIZE", 2)
    t0 = time.time() - 100_000
    stale = make_users("u1", "u2", "u3", "u4", "u5")
    for offset, user in enumerate(stale):
        whos_online.record_user(user, now=t0 + offset)
    (fresh,) = make_users("fresh")
    whos_online.record_user(fresh, now=t0 + 100)
    whos_online.record_guest("198.51.100.8", now=t0)

    assert whos_online.prune(now=t0 + WINDOW + 10) == 6
    pks = [user.pk for user in stale]
    assert went_offline.user_ids == [pks[0:2], pks[2:4], pks[4:5]]
    assert all(type(pk) is int for ids in went_offline.user_ids for pk in ids)
    assert [sender for sender, _ in went_offline.calls] == [api.prune] * 3
    assert members(r, "users") == [str(fresh.pk)]


def test_prune_of_an_exact_multiple_of_the_chunk_sends_no_empty_list(
    backend, db, monkeypatch, went_offline
):
    monkeypatch.setattr(cleanup, "PRUNE_CHUNK_SIZE", 2)
    t0 = time.time() - 100_000
    stale = make_users("u1", "u2", "u3", "u4")
    for offset, user in enumerate(stale):
        whos_online.record_user(user, now=t0 + offset)
    assert whos_online.prune(now=t0 + WINDOW + 10) == 4
    pks = [user.pk for user in stale]
    assert went_offline.user_ids == [pks[0:2], pks[2:4]]


def test_prune_reports_hidden_users(backend, settings, db, went_offline):
    configure(settings, HIDE_USER="tests.test_signals.hide_hidden_users")
    t0 = time.time() - 100_000
    visible, hidden = make_users("dave", "hidden-carol")
    whos_online.record_user(visible, now=t0)
    whos_online.record_user(hidden, now=t0)
    assert whos_online.prune(now=t0 + WINDOW + 10) == 2
    assert sorted(went_offline.user_ids) == [[visible.pk], [hidden.pk]]


def test_prune_sends_nothing_when_no_user_left(r, alice, went_offline):
    t0 = time.time() - 100_000
    whos_online.record_user(alice, now=t0 + WINDOW)
    whos_online.record_guest("198.51.100.8", now=t0)
    whos_online.record_guest("198.51.100.9", bot=True, now=t0)
    assert whos_online.prune(now=t0 + WINDOW + 10) == 2
    assert went_offline.calls == []
    assert members(r, "users") == [str(alice.pk)]
    assert whos_online.prune(now=t0 + WINDOW + 10) == 0
    assert went_offline.calls == []
