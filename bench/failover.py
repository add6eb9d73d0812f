"""How many visits a planned Sentinel failover loses: following the Sentinels' announcements
(whos_online), asking them once a second only, and neither (redis-py's Sentinel pool alone).

A master, a replica and a Sentinel (``tests/support/topologies.py``) behind a django-redis
Sentinel alias; a new guest recorded every 5 ms while ``SENTINEL FAILOVER`` runs. Sentinel leaves
the old master writable for about ten seconds, then makes it a replica, which drops what it was
sent: a visit is lost when ``record_guest`` said it was written and the new master lacks it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Final
from unittest import mock

from django.test import override_settings

import whos_online
from bench import internals as whos
from bench.harness.clients import address
from bench.harness.report import Section, table
from tests.support.topologies import SentinelGroup, sentinel_cache

#: Seconds between two recorded visits.
INTERVAL: Final = 0.005
VARIANTS: Final = {
    "following announcements (whos_online)": (True, True),
    "asking the Sentinels once a second only": (False, True),
    "redis-py's Sentinel pool alone": (False, False),
}


@dataclass(frozen=True)
class Options:
    #: Seconds of visits, the failover starting one second in.
    seconds: float = 30.0


QUICK = Options(seconds=12.0)


def lost(group: SentinelGroup, seconds: float, *, listen: bool, ask_again: bool) -> list[int]:
    """Visits attempted, reported written, and written but missing on the new master."""
    with contextlib.ExitStack() as stack:
        if not listen:
            stack.enter_context(
                mock.patch.object(whos.sentinels.FollowingSentinel, "listen", return_value=None)
            )
        if not ask_again:
            stack.enter_context(
                mock.patch.object(whos.connection, "MASTER_CHECK_INTERVAL", float("inf"))
            )
            stack.enter_context(
                mock.patch.object(whos.connection.masters(), "moved_after", return_value=False)
            )
        whos.reset_config()
        group.current_master().command("FLUSHALL")
        failing = threading.Thread(target=group.failover, kwargs={"timeout": 40})
        attempted, written, start = 0, [], time.monotonic()
        while time.monotonic() - start < seconds:
            if attempted == int(1 / INTERVAL):
                failing.start()
            attempted += 1
            if whos_online.record_guest(address(attempted)):
                written.append(address(attempted))
            time.sleep(INTERVAL)
        failing.join()
        group.wait_until_replicating(timeout=40)
        config = whos.get_config()
        stored = group.current_master().client().zrange(whos.keyspace.key(config, "guests"), 0, -1)
        members = {str(member) for member in stored}
        missing = sum(whos.guest_id(a, config, time.time()) not in members for a in written)
    return [attempted, len(written), missing]


def run(options: Options) -> Section:
    group = SentinelGroup()
    group.start()
    try:
        with override_settings(
            CACHES={"default": sentinel_cache(group)}, WHOS_ONLINE={"FAILURE_BACKOFF": 1}
        ):
            found = {
                label: lost(group, options.seconds, listen=listen, ask_again=ask)
                for label, (listen, ask) in VARIANTS.items()
            }
    finally:
        group.close()
    rows = [
        [label, *counts, f"{100 * counts[2] / max(counts[1], 1):.2f} %"]
        for label, counts in found.items()
    ]
    return Section(
        "Visits lost in a Sentinel failover",
        f"{options.seconds:g} s of visits, a new guest every {INTERVAL * 1000:g} ms, a failover 1 "
        "s in.",
        [table("variant | attempted | written | lost | lost %", rows)],
    )
