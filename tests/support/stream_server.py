"""Django's ASGI application with a live stream's bounds shortened, for tests under a real server
that cannot wait for a deployment's: each ``WHOS_ONLINE_TEST_<NAME>`` of the environment sets
``whos_online.live.outbox.<NAME>`` (seconds), such as ``WHOS_ONLINE_TEST_SEND_BOUND=2``.
Served as ``--factory tests.support.stream_server:application``, or in ``LiveStreams`` as
``--factory tests.support.stream_server:live_streams``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from django.core.asgi import get_asgi_application

from whos_online.asgi import LiveStreams

if TYPE_CHECKING:
    from django.core.handlers.asgi import ASGIHandler

BOUNDS = ("SEND_BOUND", "END_GRACE", "HEARTBEAT")


def application() -> ASGIHandler:
    handler = get_asgi_application()
    from whos_online.live import outbox

    for name in BOUNDS:
        value = os.environ.get(f"WHOS_ONLINE_TEST_{name}")
        if value:
            setattr(outbox, name, float(value))
    return handler


def live_streams() -> LiveStreams:
    return LiveStreams(application())
