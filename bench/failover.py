"""How many visits a planned Sentinel failover loses: following the Sentinels' announcements, asking
them once a second only, and neither.

Starts a master, a replica and a Sentinel (tests/support/topologies.py), points a Django site's
whos_online at them through a django-redis Sentinel alias, and records a new guest every few
milliseconds while ``SENTINEL FAILOVER`` runs. After the failover Sentinel leaves the old master
writable for about ten seconds before turning it into a replica, which drops what it was sent:
a visit is *lost* when ``record_guest`` reported it written and the new master does not have it.

Each variant runs the same way. "Asking once a second" turns off the listeners of
``whos_online.backend.sentinels``, which act on the leading Sentinel's announcement of the
promotion; "redis-py alone" also stops whos_online from asking the Sentinels again (the behaviour of
redis-py's Sentinel pool alone, which asks only when it opens a connection). Run from the repository
root:

    python3 scripts/dev.py bench failover
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import django
from django.conf import settings

from tests.support.topologies import SentinelGroup, sentinel_cache

#: Seconds of recording, the failover starting one second in.
DURATION = 30.0
#: Seconds between two recorded visits.
INTERVAL = 0.005


def configure(group: SentinelGroup) -> None:
    settings.configure(
        SECRET_KEY="bench-failover",  # noqa: S106 (a throw-away site)
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "whos_online"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES={"default": sentinel_cache(group)},
        WHOS_ONLINE={"FAILURE_BACKOFF": 1},
    )
    django.setup()


def run(group: SentinelGroup, *, listen: bool, ask_again: bool) -> tuple[int, int, int]:
    """Returns (visits attempted, reported written, written but missing on the new master)."""
    import whos_online
    from whos_online.backend import connection, sentinels
    from whos_online.config import settings as conf
    from whos_online.config.settings import get_config
    from whos_online.store import keys

    conf.reset()
    if not listen:
        sentinels.FollowingSentinel.listen = lambda self, pool: None  # type: ignore [method-assign]
    interval = connection.MASTER_CHECK_INTERVAL if ask_again else float("inf")
    connection.MASTER_CHECK_INTERVAL = interval  # type: ignore [misc]
    if not ask_again:
        connection.masters.moved_after = lambda client, error: False  # type: ignore [method-assign]
    group.current_master().command("FLUSHALL")
    written: list[str] = []
    attempted = 0
    failing = threading.Thread(target=group.failover, kwargs={"timeout": 40})
    start = time.monotonic()
    number = 0
    while time.monotonic() - start < DURATION:
        if number == int(1 / INTERVAL):
            failing.start()
        number += 1
        address = f"10.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"
        attempted += 1
        if whos_online.record_guest(address):
            written.append(address)
        time.sleep(INTERVAL)
    failing.join()
    group.wait_until_replicating(timeout=40)
    config = get_config()
    stored = group.current_master().client()
    members = {str(member) for member in stored.zrange(keys.key(config, "guests"), 0, -1)}
    from whos_online.recording.guests import guest_id

    missing = sum(guest_id(address, config, time.time()) not in members for address in written)
    return attempted, len(written), missing


def main() -> None:
    group = SentinelGroup()
    group.start()
    try:
        configure(group)
        print(f"{DURATION:g} s of visits every {INTERVAL * 1000:g} ms, a failover 1 s in")
        print(f"{'variant':<44} {'attempted':>9} {'written':>8} {'lost':>6} {'lost %':>7}")
        for label, listen, ask_again in (
            ("following announcements (whos_online)", True, True),
            ("asking the Sentinels once a second only", False, True),
            ("redis-py's Sentinel pool alone", False, False),
        ):
            attempted, written, missing = run(group, listen=listen, ask_again=ask_again)
            share = 100 * missing / written if written else 0.0
            print(f"{label:<44} {attempted:>9} {written:>8} {missing:>6} {share:>6.2f}%")
    finally:
        group.close()


if __name__ == "__main__":
    main()
