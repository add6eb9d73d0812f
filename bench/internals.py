"""The whos_online internals the benches reach into, in one place: a module of the package moved
or renamed is one edit here. Imported once Django is set up (its modules read the settings)."""

from __future__ import annotations

import time

from whos_online.backend import clients, connection, keyspace, sentinels
from whos_online.config import settings
from whos_online.config.settings import Config
from whos_online.flushing import flusher
from whos_online.live import widget
from whos_online.recording import guests, requests, rooms, throttle, visits
from whos_online.recording.state import RequestState, state_of
from whos_online.store import (
    cleanup,
    counters,
    epochs,
    items,
    lua,
    record,
    scripts,
    snapshot,
    users,
)
from whos_online.store.items import STAYS_PUT, Placement, Visit

COOKIE_NAME = throttle.COOKIE_NAME
DEFAULTS = settings.DEFAULTS
get_config = settings.get_config
reset_config = settings.reset
guest_id = guests.guest_id


def forget_recent_clients() -> None:
    """The process forgets the cookie-less clients it recorded lately (they are written anew)."""
    throttle.recent().clear()


def close_breakers() -> None:
    """A new outage from here on: the breakers of the request path forget the last one."""
    connection.breaker().reset()
    connection.refusals().reset()


def backoff_left() -> float:
    """Seconds the breakers of the request path keep Redis away still (0 if none is open)."""
    until = [
        *connection.breaker()._open_until.values(),
        *connection.refusals()._open_until.values(),
    ]
    return max([0.0, *(moment - time.monotonic() for moment in until)])
