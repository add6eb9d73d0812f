"""Batches that reach Redis late: after another process's newer batch, or sent again after an
outage. What is newest stands, and nobody who left comes back."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import pytest
from django.test import RequestFactory

import whos_online
from tests.support.helpers import GUEST_IP, configure, guest, members
from whos_online import apps
from whos_online.backend.clients import admin_client
from whos_online.config.settings import get_config
from whos_online.flushing import flusher as flushing
from whos_online.flushing.queue import RoomLeave
from whos_online.recording import visits as recording
from whos_online.store import cleanup, record, snapshot, users

if TYPE_CHECKING:
    from whos_online.store.items import Visit


@pytest.fixture
def queued(settings) -> None:
    """Visits wait in the queue until a test writes them (the thread would wait 10 s)."""
    configure(settings, FLUSH_INTERVAL=10)


def written_by_another_process(r, *visits: Visit) -> None:
    """What another process's flush does: its batch reaches Redis first."""
    record.record(r, get_config(), list(visits))


def room_score(r, room: str, member: str) -> float | None:
    found = r.zscore(f"{{whos_online}}:room:{room}:guests", member)
    return None if found is None else float(found)


# A former identity leaves even when the visit itself is stale


def test_a_logout_is_not_undone_by_the_next_page_another_process_wrote_first(r, queued, alice):
    assert whos_online.record_user(alice, now=time.time() - 5)
    apps.remove_logout(None, RequestFactory().post("/logout/", REMOTE_ADDR=GUEST_IP), alice)
    # The page the logout redirects to, served and written by another process first.
    written_by_another_process(
        r, recording.member_visit("guests", guest(GUEST_IP), time.time() + 0.05)
    )

    assert whos_online.flush() is True

    assert members(r, "users") == []
    assert members(r, "guests") == [guest(GUEST_IP)]


def test_a_login_that_arrives_late_still_takes_the_guest_off(r, queued, alice):
    now = time.time()
    member = guest(GUEST_IP)
    written_by_another_process(r, recording.member_visit("guests", member, now - 1))
    details = users.details(alice, get_config())
    flushing.current().put(recording.user_visit(details, now, former_guest=member))
    written_by_another_process(r, recording.user_visit(details, now + 0.05))  # their next page

    assert whos_online.flush() is True

    assert members(r, "guests") == []
    assert members(r, "users") == [str(alice.pk)]


def test_a_former_identity_seen_after_the_visit_stays(r, queued, alice):
    """Behind one address, a colleague's guest visit after the login is theirs to keep."""
    now = time.time()
    member = guest(GUEST_IP)
    details = users.details(alice, get_config())
    flushing.current().put(recording.user_visit(details, now, former_guest=member))
    written_by_another_process(r, recording.member_visit("guests", member, now + 1))

    assert whos_online.flush() is True

    assert members(r, "guests") == [member]
    assert members(r, "users") == [str(alice.pk)]


def test_with_shards_a_late_logout_takes_the_user_off_in_their_own_shard(r, settings, alice):
    configure(settings, SHARDS=4, FLUSH_INTERVAL=10)
    assert whos_online.record_user(alice, now=time.time() - 5)
    apps.remove_logout(None, RequestFactory().post("/logout/", REMOTE_ADDR=GUEST_IP), alice)
    written_by_another_process(
        r, recording.member_visit("guests", guest(GUEST_IP), time.time() + 0.05)
    )

    assert whos_online.flush() is True

    assert whos_online.online_counts().users == 0


# Nobody who left comes back


@pytest.mark.parametrize("leaving", ["forget_user", "logout"])
def test_a_visit_from_before_a_user_left_does_not_bring_them_back(r, queued, alice, leaving):
    """An erasure or a logout, then a visit of theirs from before it, on its way from another
    process (or sent again after an outage)."""
    before = time.time() - 1
    assert whos_online.record_user(alice, now=before - 5)
    if leaving == "forget_user":
        assert whos_online.forget_user(alice) is True
    else:
        apps.remove_logout(None, None, alice)

    written_by_another_process(r, recording.user_visit(users.details(alice, get_config()), before))

    assert members(r, "users") == []
    if leaving == "forget_user":
        assert r.exists(f"{{whos_online}}:user:{alice.pk}") == 0  # no name written again


def test_a_visit_after_a_logout_counts(r, queued, alice):
    apps.remove_logout(None, None, alice)

    written_by_another_process(
        r, recording.user_visit(users.details(alice, get_config()), time.time() + 1)
    )

    assert members(r, "users") == [str(alice.pk)]


def test_a_logout_outside_the_queue_leaves_a_visit_from_another_device_after_it(r, alice):
    written_by_another_process(
        r, recording.user_visit(users.details(alice, get_config()), time.time() + 1)
    )

    apps.remove_logout(None, None, alice)

    assert members(r, "users") == [str(alice.pk)]


def test_what_marks_a_user_gone_lives_a_window_after_a_logout_and_days_after_an_erasure(
    r, alice, bob
):
    apps.remove_logout(None, None, alice)
    assert whos_online.forget_user(bob) is True

    config = get_config()
    assert 0 < r.ttl(f"{{whos_online}}:gone:{alice.pk}") <= config.window
    assert config.window < r.ttl(f"{{whos_online}}:gone:{bob.pk}") <= 86400


# A hidden user stays hidden


def test_a_stale_visit_from_before_a_user_turned_hidden_does_not_name_them(r, queued, alice):
    now = time.time()
    visible = users.details(alice, get_config())
    flushing.current().put(recording.user_visit(visible, now))
    written_by_another_process(
        r, recording.user_visit(dataclasses.replace(visible, hidden=True), now + 1)
    )

    assert whos_online.flush() is True

    assert members(r, "hidden") == [str(alice.pk)]
    assert members(r, "users") == []


# A reader's leaving word


def test_a_leaving_word_that_arrives_after_the_next_page_of_the_room_leaves_it_standing(r, queued):
    now = time.time()
    written_by_another_process(r, recording.member_visit("guests", "m", now - 10, room="a"))
    flushing.current().put(RoomLeave("guests", "m", "a", at=now))
    written_by_another_process(r, recording.member_visit("guests", "m", now + 0.2, room="a"))

    assert whos_online.flush() is True

    assert room_score(r, "a", "m") == pytest.approx(now + 0.2, abs=0.001)


@pytest.mark.parametrize("grace", [None, 0, 30])
def test_a_leaving_word_keeps_its_reader_in_the_room_leave_grace_seconds(
    r, queued, settings, grace
):
    if grace is not None:
        configure(settings, LEAVE_GRACE=grace)
    now = time.time()
    written_by_another_process(r, recording.member_visit("guests", "m", now - 10, room="a"))
    flushing.current().put(RoomLeave("guests", "m", "a", at=now))

    assert whos_online.flush() is True

    expected = 5 if grace is None else grace
    assert get_config().leave_grace == expected
    window = get_config().window
    assert room_score(r, "a", "m") == pytest.approx(now - window + expected, abs=0.001)
    # Counted until the grace ends (with 0, not after they left), not after.
    for at, counted in ((now + max(expected - 0.5, 0.1), expected > 0), (now + expected + 0.5, 0)):
        found = snapshot.snapshot(admin_client(), get_config(), limit=0, now=at, room="a")
        assert found.counts.guests == counted


# Layouts the cleanup forgets


def test_a_forgotten_layout_leaves_no_epoch_behind(r, settings):
    configure(settings, SHARDS=2)
    for number in range(8):
        assert whos_online.record_guest(f"192.0.2.{number + 1}") is True
    configure(settings, SHARDS=1)
    assert whos_online.record_guest("192.0.2.9") is True

    cleanup.prune_old_layouts(r, get_config(), now=time.time() + 3600)

    assert r.smembers("{whos_online}:layouts") == set()
    assert [key for key in r.scan_iter("*/2*") if r.ttl(key) == -1] == []
    assert r.get("{whos_online}:epoch") is not None  # the configured layout's stays
