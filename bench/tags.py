"""What ``{% whos_online %}`` and ``{% online_count %}`` cost as the site grows.

Each size lives under its own ``KEY_PREFIX`` in one throw-away redis-server, filled directly with
pipelined ZADDs: half the people are users, half guests, all seen within the window, and the
newest users have their display HASH (only those are read: the tag lists ``DISPLAY_LIMIT``).
Each render gets a new request, so nothing is served from the snapshot cached on a request; the
time is that of ``Template.render`` in this process, Redis round trip included. The sizes are
measured in turn, several times, and each is compared with 10 people online in the same round.

The tag names at most ``DISPLAY_LIMIT`` (50) users, and 10 people online (5 of them users) give
5 names: so the tag is also measured with ``DISPLAY_LIMIT = 5``, the same names at every size,
which shows what the number of people online costs apart from the number of names.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Final

import redis
from django.http import HttpRequest
from django.template import Context, Template
from django.test import override_settings

from bench import servers, sorted_sets, stats
from bench.report import Section, Target
from whos_online.backend import keyspace
from whos_online.config import settings as conf
from whos_online.store import keys

if TYPE_CHECKING:
    from whos_online.config.settings import Config

SIZES: Final = (10, 10_000, 1_000_000)
#: Display HASHes written for the newest users (the tag reads DISPLAY_LIMIT of them).
NAMED: Final = 100
ROUNDS: Final = 11
RENDERS: Final = 200
#: What is rendered: a label, the template, and WHOS_ONLINE settings of its own.
CASES: Final[tuple[tuple[str, str, dict[str, object]], ...]] = (
    ("`{% whos_online %}`", "{% load whos_online %}{% whos_online %}", {}),
    ("`{% online_count %}`", "{% load whos_online %}{% online_count %}", {}),
    (
        "`{% whos_online %}`, `DISPLAY_LIMIT=5`",
        "{% load whos_online %}{% whos_online %}",
        {"DISPLAY_LIMIT": 5},
    ),
)


def _settings(url: str, size: int, **more: object) -> dict[str, object]:
    return {"REDIS_URL": url, "KEY_PREFIX": f"bench-tags-{size}", **more}


def fill(client: redis.Redis, config: Config, size: int, now: float) -> None:
    users = size // 2
    # Users are seen from 100 s ago up to now, newest last; guests all a little earlier.
    for kind, count, member in (("users", users, str), ("guests", size - users, _guest)):
        sorted_sets.fill(
            client,
            keys.key(config, kind),
            ((member(n), now - 100 + 100 * n / max(count, 1)) for n in range(count)),
        )
    pipe = client.pipeline(transaction=False)
    for n in range(max(users - NAMED, 0), users):
        pipe.hset(
            keys.user_key(keyspace.layout(config)[0], str(n)),
            mapping={"name": f"user {n}", "url": f"/people/{n}/", "seen": now},
        )
    pipe.execute()


def _guest(number: int) -> str:
    return f"guest{number:011d}"


def _render_times(template: Template, count: int) -> list[float]:
    times = []
    for _ in range(count):
        context = Context({"request": HttpRequest()})
        started = time.perf_counter()
        template.render(context)
        times.append(time.perf_counter() - started)
    return times


def run() -> Section:
    templates = [(label, Template(source), more) for label, source, more in CASES]
    medians: dict[tuple[str, int], list[float]] = {
        (label, size): [] for label, _, _ in templates for size in SIZES
    }
    with servers.redis_server() as server:
        client = redis.Redis.from_url(server.url)
        now = time.time()
        for size in SIZES:
            with override_settings(WHOS_ONLINE=_settings(server.url, size)):
                fill(client, conf.get_config(), size, now)
        memory = int(client.info("memory")["used_memory"])
        for round_number in range(ROUNDS):
            for size in stats.rotated(SIZES, round_number):
                for label, template, more in templates:
                    with override_settings(WHOS_ONLINE=_settings(server.url, size, **more)):
                        _render_times(template, 10)  # connects, loads the script
                        medians[label, size].append(
                            statistics.median(_render_times(template, RENDERS))
                        )
    rows = []
    targets = []
    for label, _, more in templates:
        base = medians[label, SIZES[0]]
        for size in SIZES:
            found = medians[label, size]
            rows.append(
                [
                    label,
                    stats.number(size),
                    stats.Spread.of(found).show(stats.us),
                    stats.ratios(found, base).show(stats.ratio),
                ]
            )
        if not more:
            spread = stats.ratios(medians[label, SIZES[-1]], base)
            targets.append(
                Target(
                    f"{label} with {stats.number(SIZES[-1])} online ≤ 1.5 × with 10",
                    f"{spread.show(stats.ratio)} × 10 online",
                    spread.median <= 1.5,
                )
            )
    return Section(
        title="Template tags at scale",
        intro=(
            f"Median time of one render (µs), {RENDERS} renders per round, {ROUNDS} rounds "
            "with the sizes interleaved: median (min–max) of the rounds; ratio to 10 people "
            "online in the same round. Half the people are users, half guests: 10 online "
            "list 5 names, 10 000 and more list `DISPLAY_LIMIT` (50) names, except in the "
            f"last rows. Redis held {memory / 2**20:.0f} MiB for all sizes together."
        ),
        tables=[stats.table(["tag", "people online", "render µs", "× 10 online"], rows)],
        targets=targets,
    )
