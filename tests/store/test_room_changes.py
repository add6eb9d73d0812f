"""The record script's room changes: which rooms each entry of a batch left and entered, as the
flusher reads them back to send signals and publish what a flush changed."""

from __future__ import annotations

import time

from whos_online.backend.keyspace import member_shard
from whos_online.config.settings import get_config
from whos_online.store import items, record, scripts
from whos_online.store.items import GO, KEEP, STAY, Visit
from whos_online.store.results import Reply, RoomChange, parse_reply
from whos_online.store.users import UserDetails


def write(r, *entries: items.Entry, now: float | None = None) -> Reply:
    config = get_config()
    shard = member_shard(config, "guests", "g1")
    calls = record.batch_calls(
        config, shard, list(entries), now=now or time.time(), epoch="e"
    ).calls
    (raw,) = scripts.run(r, calls)
    return parse_reply(raw)


def visit(member: str = "g1", room: str = "", mode: str = GO, **more) -> items.Entry:
    made = Visit(
        more.pop("kind", "guests"),
        member,
        more.pop("seen_at", time.time()),
        room=room,
        room_mode=mode,
        **more,
    )
    (entry,) = items.entries_of(get_config(), made)
    return entry


def leave(room: str, member: str = "g1", at: float | None = None) -> items.Entry:
    return items.leave_room_entry(
        get_config(), "guests", member, room, at=time.time() if at is None else at
    )


def test_a_page_view_enters_a_room_and_the_next_one_moves_to_another(r):
    first = write(r, visit(room="a"))
    second = write(r, visit(room="b"))
    third = write(r, visit(room=""))

    assert first.arrived == "1"
    assert first.changes == (RoomChange(0, "", "", "a"),)
    assert second.arrived == "0"
    assert second.changes == (RoomChange(0, "", "a", "b"),)
    assert third.changes == (RoomChange(0, "", "b", ""),)


def test_a_visit_that_moves_nobody_changes_no_room(r):
    write(r, visit(room="a"))

    assert write(r, visit(room="a")).changes == ()
    assert write(r, visit(room="", mode=KEEP)).changes == ()
    assert write(r, visit(room="b", mode=STAY)).changes == ()  # still in a


def test_a_readers_leave_counts_once_and_their_word_after_a_reload_brings_them_back(r):
    write(r, visit(room="a"))

    left = write(r, leave("a"))
    again = write(r, leave("a"))
    back = write(r, visit(room="a", mode=STAY))

    assert left.changes == (RoomChange(0, "", "a", ""),)
    assert again.changes == ()
    assert back.changes == (RoomChange(0, "", "", "a"),)


def test_each_entry_of_a_batch_is_told_by_its_number(r):
    reply = write(r, visit("g1", room="a"), visit("g2"), visit("g3", room="b"))

    assert reply.arrived == "111"
    assert reply.changes == (RoomChange(0, "", "", "a"), RoomChange(2, "", "", "b"))


def test_a_login_takes_the_guest_out_of_its_room_by_name(r):
    write(r, visit("g1", room="a"))
    user = UserDetails(pk="7", hidden=False, name="alice", url="")

    reply = write(r, visit("7", kind="users", user=user, former="g1", room="b"))

    assert reply.changes == (RoomChange(0, "guests:g1", "a", ""), RoomChange(0, "", "", "b"))


def test_a_hidden_users_logout_is_told_as_hidden(r):
    user = UserDetails(pk="7", hidden=True, name="bob", url="")
    write(r, visit("7", kind="users", user=user, room="a", seen_at=time.time() - 1))

    reply = write(r, visit("g1", former="7", room=""))

    assert reply.changes == (RoomChange(0, "hidden:7", "a", ""),)
