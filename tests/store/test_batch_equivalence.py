"""A batch written in one call of the record script leaves Redis as its entries written one call
each, in order, by the script's entry-by-entry part, would, and tells the same arrivals and room
changes: what the script reads ahead and writes once at its end (includes/held), and the plain
visits it writes set-at-a-time after the others (includes/record_plain), must not show.

Hypothesis makes the batches: visits of users (shown or hidden, which may change between two of
their visits), guests and bots, in no room or in one of two, in every mode, with a former person
(a login or a logout), with the day's visitor; logouts; a page's reader leaving its room; a
connection entering, renewing or leaving its room. Times do not go back within a batch (the flusher
writes visits in the order they were queued); several entries may share one. A batch is written
over what an earlier one left (people in rooms, rooms left, connections, logouts), which both
ways write alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.helpers import key_text, text
from whos_online.backend.keyspace import member_shard
from whos_online.config.settings import get_config
from whos_online.store import items, record, scripts
from whos_online.store.items import GO, KEEP, STAY, Link, Visit
from whos_online.store.results import RoomChange, parse_reply
from whos_online.store.users import UserDetails

if TYPE_CHECKING:
    import redis

#: The batches' first moment: this session's, so that what expires (a user's display HASH, the
#: day's HyperLogLog) is written to live, and compared.
START = float(int(time.time()))
USERS = ("1", "2", "3")
ANONYMOUS = (("guests", "g1"), ("guests", "g2"), ("guests", "g3"), ("bots", "b1"))
#: Who a page's leaving word or a connection speaks for: by the set they are in.
SPEAKERS = (*ANONYMOUS, ("users", "1"), ("hidden", "1"), ("users", "2"))
ROOMS = ("", "a", "b")


#: Makes a step's entries at a given time.
Step = Callable[[float], list[items.Entry]]


def _visit(base: Visit, room: str, mode: str, title: str, daily: bool) -> Step:
    def at(now: float) -> list[items.Entry]:
        visit = Visit(
            base.unhidden_kind,
            base.member,
            now,
            user=base.user,
            former=base.former,
            daily_id=f"day:{base.member}" if daily else "",
            room=room,
            room_mode=mode,
            title=title if room else "",
        )
        return items.entries_of(get_config(), visit)

    return at


def _user(pk: str, hidden: bool, former: str) -> Visit:
    details = UserDetails(pk=pk, hidden=hidden, name=f"User {pk}", url=f"/u/{pk}/")
    return Visit("users", pk, 0.0, user=details, former=former)


def _anonymous(kind_member: tuple[str, str], former: str) -> Visit:
    return Visit(kind_member[0], kind_member[1], 0.0, former=former)


def _logout(pk: str) -> Step:
    return lambda now: [items.leaving_entry(get_config(), pk, now)]


def _leave_room(kind_member: tuple[str, str], room: str) -> Step:
    kind, member = kind_member
    return lambda now: [items.leave_room_entry(get_config(), kind, member, room, at=now)]


def _link(kind_member: tuple[str, str], room: str, connection: str, leaving: bool) -> Step:
    kind, member = kind_member
    return lambda now: [
        items.link_entry(get_config(), Link(kind, member, room, connection, now, leaving=leaving))
    ]


visitors = st.one_of(
    st.builds(_user, st.sampled_from(USERS), st.booleans(), st.sampled_from(("", "g1", "g2"))),
    st.builds(_anonymous, st.sampled_from(ANONYMOUS), st.sampled_from(("", "", "1"))),
)
steps = st.one_of(
    st.builds(
        _visit,
        visitors,
        st.sampled_from(ROOMS),
        st.sampled_from((GO, GO, KEEP, STAY)),
        st.sampled_from(("", "Room")),
        st.booleans(),
    ),
    st.builds(_logout, st.sampled_from(USERS)),
    st.builds(_leave_room, st.sampled_from(SPEAKERS), st.sampled_from(ROOMS[1:])),
    st.builds(
        _link,
        st.sampled_from(SPEAKERS),
        st.sampled_from(ROOMS[1:]),
        st.sampled_from(("c1", "c2")),
        st.booleans(),
    ),
)
#: Steps, each after a gap of whole seconds.
batches = st.lists(st.tuples(steps, st.integers(0, 3)), min_size=1, max_size=12)


def entries_of(batch: list[tuple[Step, int]], start: float) -> list[tuple[items.Entry, float]]:
    """Each step's entries, and their time, from ``start`` on."""
    now, made = start, []
    for step, gap in batch:
        now += gap
        made += [(entry, now) for entry in step(now)]
    return made


def write(r: redis.Redis, entries: list[items.Entry], now: float) -> tuple[str, list[RoomChange]]:
    """``entries`` written in one call; what it answers, in the order of ``entries``."""
    config = get_config()
    shard = member_shard(config, "guests", "g1")
    assert all(entry.shard == shard for entry in entries)  # one shard: one call
    made = record.batch_calls(config, shard, entries, now=now, epoch="e")
    reply = parse_reply(scripts.run(r, made.calls)[0])
    given = {id(entry): number for number, entry in enumerate(entries)}
    order = [given[id(entry)] for entry in made.entries]
    arrived = [""] * len(entries)
    for number, flag in zip(order, reply.arrived, strict=True):
        arrived[number] = flag
    changes = [change._replace(entry=order[change.entry]) for change in reply.changes]
    return "".join(arrived), sorted(changes, key=lambda change: change.entry)


def one_by_one(
    r: redis.Redis, made: list[tuple[items.Entry, float]]
) -> tuple[str, list[RoomChange]]:
    """``made`` written one call each, by the script's entry-by-entry part alone."""
    arrived, changes = "", []
    everything_general = lambda entries: record._Lanes(list(entries), [], [])  # noqa: E731
    with mock.patch.object(record, "_lanes", everything_general):
        for number, (entry, at) in enumerate(made):
            arrived_here, changed = write(r, [entry], at)
            arrived += arrived_here
            changes += [change._replace(entry=number) for change in changed]
    return arrived, changes


def stored(r: redis.Redis) -> dict[str, str]:
    """Each key's contents (``key_text``), but the sampled counts and the peak's: a batch samples
    them once, at its end, where one call per entry samples them at each."""
    return {
        key: key_text(r, key)
        for key in map(text, r.scan_iter())
        if ":counter" not in key and ":peak" not in key
    }


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    earlier=st.lists(st.tuples(steps, st.integers(0, 3)), max_size=12),
    batch=batches,
    overlap=st.integers(0, 12),
)
def test_a_batch_in_one_call_leaves_what_its_entries_one_call_each_leave(
    r, earlier, batch, overlap
):
    """The batch may begin before the earlier one ended, as another process's flush does."""
    before = entries_of(earlier, START)
    made = entries_of(batch, max((at for _, at in before), default=START) - overlap)
    entries = [entry for entry, _ in made]

    r.flushdb()
    one_by_one(r, before)
    arrived, changes = write(r, entries, max(at for _, at in made))
    in_one_call = stored(r)

    r.flushdb()
    one_by_one(r, before)
    one_each, each_changes = one_by_one(r, made)
    one_at_a_time = stored(r)

    assert arrived == one_each
    assert changes == each_changes
    assert in_one_call == one_at_a_time
