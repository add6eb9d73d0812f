"""What ``{% whos_online %}`` and ``{% online_count %}`` cost as the site grows: 10, 10 000 and
1 000 000 people online (half users, half guests, filled directly in one redis-server, each size
under its own ``KEY_PREFIX``), each render from a new request with ``SNAPSHOT_MAX_AGE = 0`` (each
reads Redis), the sizes interleaved, each against 10 online in the same round. The tag names at
most ``DISPLAY_LIMIT`` (50) people, and 10 online give 5 names: so it is measured with
``DISPLAY_LIMIT = 5`` too, the same names at every size.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Final

import redis
from django.http import HttpRequest
from django.template import Context, Template
from django.test import override_settings

from bench import internals as whos
from bench.harness import servers
from bench.harness.report import Section, Target, number, ratio, table, us
from bench.harness.rounds import Spread, interleaved, ratios

#: Display HASHes written for the newest users (the tag reads DISPLAY_LIMIT of them).
NAMED: Final = 100
CASES: Final = {
    "`{% whos_online %}`": ("{% whos_online %}", {}),
    "`{% online_count %}`": ("{% online_count %}", {}),
    "`{% whos_online %}`, `DISPLAY_LIMIT=5`": ("{% whos_online %}", {"DISPLAY_LIMIT": 5}),
}


@dataclass(frozen=True)
class Options:
    largest: int = 1_000_000
    rounds: int = 11
    renders: int = 200


QUICK = Options(largest=20_000, rounds=1, renders=20)


def fill(client: redis.Redis, config: whos.Config, size: int, now: float) -> None:
    """Users seen from 100 s ago up to now, newest last; guests all a little earlier."""
    users = size // 2
    for kind, count, name in (("users", users, "{}"), ("guests", size - users, "guest{:011d}")):
        scored = ((name.format(n), now - 100 + 100 * n / max(count, 1)) for n in range(count))
        servers.fill(client, whos.keyspace.key(config, kind), scored)
    shard = whos.keyspace.layout(config)[0]
    pipe = client.pipeline(transaction=False)
    for n in range(max(users - NAMED, 0), users):
        details = {"name": f"user {n}", "url": f"/people/{n}/", "seen": now}
        pipe.hset(whos.keyspace.user_key(shard, str(n)), mapping=details)  # type: ignore [arg-type]
    pipe.execute()


def render_time(template: Template, renders: int) -> float:
    """The median of ``renders`` renders, each from a new request."""
    times = []
    for _ in range(renders):
        context = Context({"request": HttpRequest()})
        started = time.perf_counter()
        template.render(context)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run(options: Options) -> Section:
    sizes = (10, 10_000, options.largest)
    with servers.redis_server() as server:
        client = redis.Redis.from_url(server.url)

        def settings(size: int, **more: object) -> dict[str, object]:
            prefix = f"bench-tags-{size}"
            return {"REDIS_URL": server.url, "KEY_PREFIX": prefix, "SNAPSHOT_MAX_AGE": 0, **more}

        for size in sizes:
            with override_settings(WHOS_ONLINE=settings(size)):
                fill(client, whos.get_config(), size, time.time())
        memory = int(client.info("memory")["used_memory"])

        def measure(cell: tuple[str, int]) -> float:
            source, more = CASES[cell[0]]
            template = Template("{% load whos_online %}" + source)
            with override_settings(WHOS_ONLINE=settings(cell[1], **more)):
                render_time(template, 10)  # connects, loads the script
                return render_time(template, options.renders)

        cells = [(case, size) for size in sizes for case in CASES]
        medians = interleaved(cells, options.rounds, measure, label="tags", step=len(CASES))
    rows, targets = [], []
    for case, (_source, more) in CASES.items():
        base = medians[case, sizes[0]]
        for size in sizes:
            found = medians[case, size]
            rows.append(
                [
                    case,
                    number(size),
                    Spread.of(found).show(us),
                    ratios(found, base).show(ratio),
                ]
            )
        largest = ratios(medians[case, sizes[-1]], base)
        if not more:
            goal = f"{case} with {number(sizes[-1])} online ≤ 1.5 × with 10"
            targets.append(
                Target(goal, f"{largest.show(ratio)} × 10 online", largest.median <= 1.5)
            )
    return Section(
        "Template tags at scale",
        f"Median time of one render (µs), {options.renders} renders per round, {options.rounds} "
        "rounds with the sizes interleaved: median (min–max) of the rounds; ratio to 10 people "
        "online in the same round. Half the people are users, half guests: 10 online list 5 "
        "names, 10 000 and more list `DISPLAY_LIMIT` (50) names, except in the last rows. Redis "
        f"held {memory / 2**20:.0f} MiB for all sizes together.",
        [table("tag | people online | render µs | × 10 online", rows)],
        targets=targets,
    )
