"""Settings of the live streams benchmark (``bench.streams``): the benchmark site with whos_online,
``LIVE_UPDATES`` on, its URLs mounted, and one page in a room that shows the room's live widget
(``bench.streams_urls``)."""

from __future__ import annotations

import os

os.environ.setdefault("WHOS_ONLINE_BENCH_VARIANT", "throttled")

from bench.site import *  # noqa: F403
from bench.site import WHOS_ONLINE as _BASE

ROOT_URLCONF = "bench.streams_urls"
# Every stream comes from this machine's one address, thousands of them to one worker.
WHOS_ONLINE = {
    **_BASE,
    "KEY_PREFIX": "bench-streams",
    "LIVE_UPDATES": True,
    "MAX_STREAMS": 1_000_000,
    "MAX_STREAMS_PER_ADDRESS": None,
    # How long a stream lasts (``bench.streams_stalled`` shortens it).
    "ROOM_TOKEN_MAX_AGE": int(os.environ.get("WHOS_ONLINE_BENCH_STREAM_SECONDS", "3600")),
}
