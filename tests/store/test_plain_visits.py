"""Which entries of a batch the record script writes as plain visits (set-at-a-time, after the
others: ``lua/includes/record_plain``), and that a call answers in the order it writes them.

That the two ways of writing leave Redis alike is ``test_batch_equivalence``'s to hold.
"""

from __future__ import annotations

import time
from unittest import mock

from tests.support.helpers import members
from whos_online.backend.keyspace import ROOMS_INDEX, member_shard, score
from whos_online.config.settings import get_config
from whos_online.store import items, record, scripts
from whos_online.store.items import KEEP, STAY, Link, Visit
from whos_online.store.results import parse_reply
from whos_online.store.users import UserDetails

NOW = time.time()


def visit(member: str, *, kind: str = "guests", at: float = NOW, **more) -> items.Entry:
    user = None
    if kind == "users":
        user = UserDetails(pk=member, hidden=False, name=f"User {member}", url=f"/u/{member}/")
    (entry,) = items.entries_of(get_config(), Visit(kind, member, at, user=user, **more))
    return entry


def calls_of(*entries: items.Entry) -> record.Calls:
    shard = member_shard(get_config(), "guests", "g1")
    return record.batch_calls(get_config(), shard, list(entries), now=NOW, epoch="e")


def header(call: scripts.ScriptCall, name: str) -> int:
    """A value of a call's header (after the two lists of names)."""
    return int(call.args[2 + record.HEADER_ARGUMENTS.index(name)])


def lanes(call: scripts.ScriptCall) -> tuple[int, int, int]:
    """How many entries a call records one by one, as plain page views, as plain others."""
    return header(call, "count"), header(call, "views"), header(call, "others")


def test_page_views_and_other_requests_of_different_people_are_plain():
    g1, g2 = visit("g1", room="a"), visit("g2")
    user = visit("7", kind="users", room_mode=KEEP)
    made = calls_of(user, g1, g2)

    (call,) = made.calls
    assert lanes(call) == (0, 2, 1)
    assert made.entries == [g1, g2, user]  # page views, then the others


def test_what_plain_visits_cannot_hold_is_recorded_entry_by_entry_in_its_order():
    """A person twice, a former person, a page's "still here", a reader leaving, a
    connection: each entry naming such a person goes first, in the order given."""
    config = get_config()
    twice = [visit("g1", at=NOW - 1), visit("g1")]
    login = visit("7", kind="users", former="g2")
    former = visit("g2")  # the guest the login leaves behind
    still_here = visit("g3", room="a", room_mode=STAY)
    (leaving,) = [items.leave_room_entry(config, "guests", "g4", "b", at=NOW)]
    link = items.link_entry(config, Link("guests", "g5", "a", "c1", NOW))
    plain = visit("g6")
    given = [plain, twice[0], login, leaving, former, still_here, twice[1], link]

    made = calls_of(*given)

    (call,) = made.calls
    assert lanes(call) == (7, 1, 0)
    assert made.entries == [e for e in given if e is not plain] + [plain]


def test_a_visitor_of_another_day_than_the_plain_ones_is_recorded_entry_by_entry():
    today = visit("g1", daily_id="day-1")
    tomorrow = visit("g2", daily_id="day-2", at=NOW + 86400)
    no_visitor = visit("g3", at=NOW + 86400)

    made = calls_of(today, tomorrow, no_visitor)

    assert lanes(made.calls[0]) == (1, 2, 0)
    assert made.entries == [tomorrow, today, no_visitor]


def test_titled_page_views_follow_a_titled_entry_recorded_entry_by_entry():
    """A room's title is the last written: page views with titles keep their order with one
    recorded entry by entry (a person twice), so they are recorded that way too."""
    twice = [visit("g1", room="a", title="Old"), visit("g1", room="a", title="Old")]
    titled = visit("g2", room="a", title="New")
    untitled = visit("g3", room="a")

    made = calls_of(twice[0], titled, twice[1], untitled)

    assert lanes(made.calls[0]) == (3, 1, 0)
    assert made.entries == [twice[0], titled, twice[1], untitled]
    # Without a titled entry among the others, titled page views are plain.
    assert lanes(calls_of(titled, untitled).calls[0]) == (0, 2, 0)


def test_a_call_answers_in_the_order_it_writes_its_entries(r):
    """Who arrived, and the room changes, are told by entry number in ``Calls.entries``."""
    config = get_config()
    shard = member_shard(config, "guests", "g1")
    scripts.run(r, calls_of(visit("old", at=NOW - 5, room="a")).calls)
    given = [
        visit("new", room="b"),
        visit("twice", at=NOW - 1),
        visit("old", room="b"),
        visit("twice"),
    ]

    made = record.batch_calls(config, shard, given, now=NOW, epoch="e")
    (reply,) = [parse_reply(raw) for raw in scripts.run(r, made.calls)]

    members_in_order = [entry.fields[2] for entry in made.entries]
    assert members_in_order == ["twice", "twice", "new", "old"]
    assert reply.arrived == "1010"
    moved = {
        members_in_order[change.entry]: (change.left, change.entered) for change in reply.changes
    }
    assert moved == {"new": ("", "b"), "old": ("a", "b")}


def test_a_batch_over_several_calls_keeps_each_lane_in_its_order(r):
    general = [visit("g1", at=NOW - 1), visit("g1")]
    views = [visit(f"v{n}", room="a") for n in range(5)]
    others = [visit(f"o{n}", room_mode=KEEP) for n in range(2)]

    with mock.patch.object(record, "MAX_ENTRIES_PER_CALL", 3):
        made = calls_of(*views, *general, *others)

    assert [lanes(call) for call in made.calls] == [(2, 1, 0), (0, 3, 0), (0, 1, 2)]
    assert made.entries == [*general, *views, *others]
    replies = [parse_reply(raw) for raw in scripts.run(r, made.calls)]
    assert "".join(reply.arrived for reply in replies) == "10" + "1" * 7
    assert sorted(members(r, "guests")) == sorted(["g1", *(f"v{n}" for n in range(5)), "o0", "o1"])


def test_a_plain_visit_sends_its_values_once_and_only_those_it_needs():
    """Kind, member, score and visitor; a page view's room and title; a user's name and URL:
    against the 14 values of an entry recorded one by one."""
    one_by_one = 14
    cases = {
        visit("g1", room_mode=KEEP): 4,
        visit("g1", room="a"): 6,
        visit("7", kind="users", room_mode=KEEP): 6,
        visit("7", kind="users", room="a"): 8,
    }
    for entry, values in cases.items():
        (alone,) = calls_of(entry).calls
        with mock.patch.object(
            record, "_lanes", lambda entries: record._Lanes(list(entries), [], [])
        ):
            (general,) = calls_of(entry).calls
        assert len(general.args) - len(alone.args) == one_by_one - values


def test_the_rooms_index_keeps_a_rooms_latest_visit_when_a_later_call_brings_older_ones(r):
    """The plain visits go after the others, so a flush split over calls (a backlog after an
    outage) may write an older visit of a room in a later call."""
    config = get_config()
    older = visit("p", room="a", at=NOW - 1)
    stays = [visit(f"s{n}", room="a", room_mode=STAY) for n in range(2)]

    with mock.patch.object(record, "MAX_ENTRIES_PER_CALL", 2):
        made = calls_of(older, *stays)
    scripts.run(r, made.calls)

    assert [lanes(call) for call in made.calls] == [(2, 0, 0), (0, 1, 0)]
    index = member_shard(config, "guests", "g1").key(ROOMS_INDEX)
    assert r.zscore(index, "a") == float(score(NOW))


def test_a_user_visit_dropped_by_their_logout_adds_no_days_visitors(r):
    """Nothing is added to the day's HyperLogLog, not even an empty one made (a PFADD of
    nobody makes the key on Redis)."""
    config = get_config()
    scripts.run(r, calls_of(items.leaving_entry(config, "7", NOW)).calls)
    (entry,) = items.entries_of(
        config,
        Visit(
            "users",
            "7",
            NOW - 10,
            user=UserDetails(pk="7", hidden=False, name="Seven", url="/u/7/"),
            daily_id="day-7",
        ),
    )

    (call,) = calls_of(entry).calls
    scripts.run(r, [call])

    assert lanes(call) == (0, 1, 0)
    assert not [key for key in r.scan_iter() if b"visitors" in key]
    assert members(r, "users") == []
