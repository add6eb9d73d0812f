"""People online and their visits, as the record script takes them, for the benches that
measure Redis's work (capacity, batching): a Redis filled with people online, the visits of
some of them (a fifth users with display data; of every four, two in no room, one staying in
their room of 1 000 and one moving to another on each visit), written as a flush writes them,
and what each redis-server spent on it."""

from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from bench import internals as whos
from bench.harness import servers
from bench.harness.clients import address
from bench.harness.rounds import Spread

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import redis

    from whos_online.backend.clients import Client

#: Every this many people online is a user; the others are guests.
USER_EVERY: Final = 5
ROOMS: Final = 1000
#: Names a snapshot read asks for: the template tag's default ``DISPLAY_LIMIT``.
NAMES: Final = 50
#: µs per visit or read: (Lua time from ``INFO commandstats``, the redis-server's CPU).
Pair = tuple[float, float]


@dataclass(frozen=True)
class Person:
    number: int
    user: bool
    #: The member of their set: a user's pk, a guest's pseudonym of the day.
    member: str
    #: In a room: "stay" (the same topic each time), "move" (another each time), or "" (none).
    rooms: str

    def key(self, config: whos.Config) -> str:
        """The key of the set they are in, in their shard."""
        kind = "users" if self.user else "guests"
        return whos.keyspace.member_shard(config, kind, self.member).key(kind)


def is_user(n: int) -> bool:
    return n % USER_EVERY == 0


def people_of(config: whos.Config, numbers: Sequence[int]) -> list[Person]:
    now, rooms = time.time(), ("", "stay", "", "move")
    members = [str(n) if is_user(n) else whos.guest_id(address(n), config, now) for n in numbers]
    return [
        Person(n, is_user(n), member, rooms[index % 4])
        for index, (n, member) in enumerate(zip(numbers, members, strict=True))
    ]


def fill(client_of: Callable[[str], redis.Redis], config: whos.Config, people: int) -> None:
    """Put ``people`` online, seen over the last five minutes, each in the set of their shard
    (filled through ``client_of(key)``, a client of the server that holds it)."""
    now, sets = time.time(), defaultdict[str, dict[str, float]](dict)
    for person in people_of(config, range(people)):
        sets[person.key(config)][person.member] = now - 300 * person.number / people
    for key, members in sets.items():
        servers.fill(client_of(key), key, members.items())


def chosen(config: whos.Config, people: int, users: int, guests: int, seed: int) -> list[Person]:
    """``users`` and ``guests`` distinct people online, in a random order."""
    rng = random.Random(seed)  # noqa: S311 (picks visitors, not secrets)
    picked: dict[bool, set[int]] = {True: set(), False: set()}
    while len(picked[True]) < users or len(picked[False]) < guests:
        n = rng.randrange(people)
        if len(picked[is_user(n)]) < (users if is_user(n) else guests):
            picked[is_user(n)].add(n)
    numbers = [*picked[True], *picked[False]]
    rng.shuffle(numbers)
    return people_of(config, numbers)


def visit_of(person: Person, now: float, turn: int) -> whos.Visit:
    """``person``'s visit as the request path makes it; ``turn`` counts their visits, so that a
    mover changes room on each."""
    room = ""
    if person.rooms:
        room = f"topic:{(person.number + (turn if person.rooms == 'move' else 0)) % ROOMS}"
    if not person.user:
        return whos.visits.member_visit("guests", person.member, now, room=room)
    name, url = f"Member {person.number}", f"/members/{person.number}/"
    details = whos.users.UserDetails(pk=person.member, hidden=False, name=name, url=url)
    return whos.visits.user_visit(details, now, room=room)


def times(count: int) -> list[float]:
    """When ``count`` visits a flush writes now were made: over the last ``FLUSH_INTERVAL``, in
    order (to the millisecond, as Redis keeps them, the newest names are not all a tie). Every
    phase that writes visits, the floor's included, writes them at these times, so that each
    phase's scores land among the previous calls' as a flush's do, not all past them."""
    now, interval = time.time(), whos.DEFAULTS["FLUSH_INTERVAL"]
    step = interval / max(count, 1)
    return [now - step * (count - 1 - i) for i in range(count)]


def record(client: Client, config: whos.Config, who: Sequence[Person], turn: int) -> int:
    """Record ``who`` at once, as a flush does (a call per shard, in one round trip where the
    client allows), made at ``times``; the calls made."""
    visits = [visit_of(person, at, turn) for person, at in zip(who, times(len(who)), strict=True)]
    return len(whos.record.record(client, config, visits))


def warm_up(client: Client, config: whos.Config, who: Sequence[Person]) -> None:
    """Each of ``who`` recorded once, into their room, users with their display HASH."""
    for start in range(0, len(who), 100):
        record(client, config, who[start : start + 100], 0)
    read(client, config)


def read(client: Client, config: whos.Config) -> None:
    found = whos.snapshot.snapshot(client, config, limit=NAMES, now=time.time())
    if len(found.listed) != NAMES:
        raise RuntimeError(f"the snapshot listed {len(found.listed)} names, not {NAMES}")


def measure(nodes: Sequence[servers.Node], action: Callable[[], int]) -> list[servers.Usage]:
    """What each node did while ``action`` ran; fails unless Redis counted the EVALSHAs it
    made (its return): a NOSCRIPT retry or a lost call would skew the figures."""
    before = [node.start() for node in nodes]
    made = action()
    usages = [node.usage(cpu) for node, cpu in zip(nodes, before, strict=True)]
    if sum(usage.calls for usage in usages) != made:
        raise RuntimeError(f"{made} EVALSHA calls made, Redis counted {[u.calls for u in usages]}")
    return usages


def calls_of(who: Sequence[Person], size: int) -> list[Sequence[Person]]:
    """The first multiple of ``size`` of ``who``, ``size`` to a script call."""
    return [who[start : start + size] for start in range(0, len(who) - size + 1, size)]


def in_batches(
    nodes: Sequence[servers.Node],
    client: Client,
    config: whos.Config,
    who: Sequence[Person],
    *,
    size: int,
    turn: int,
) -> tuple[list[servers.Usage], int]:
    """Record the first multiple of ``size`` of ``who``, ``size`` at a time: what each node
    did, and the visits."""
    batches = calls_of(who, size)
    usages = measure(nodes, lambda: sum(record(client, config, batch, turn) for batch in batches))
    return usages, len(batches) * size


def reads(
    nodes: Sequence[servers.Node], client: Client, config: whos.Config, count: int
) -> list[servers.Usage]:
    """``count`` snapshot reads, a call per shard each."""

    def action() -> int:
        for _ in range(count):
            read(client, config)
        return count * len(whos.keyspace.layout(config))

    return measure(nodes, action)


def per(usages: Sequence[servers.Usage], count: int) -> Pair:
    """(Lua µs, process CPU µs) of all ``usages`` per visit or read of ``count``."""
    return sum(u.command_us for u in usages) / count, sum(u.cpu_us for u in usages) / count


def medians(pairs: Sequence[Pair]) -> Pair:
    return column(pairs, 0).median, column(pairs, 1).median


def column(pairs: Sequence[Pair], which: int) -> Spread:
    return Spread.of([pair[which] for pair in pairs])
