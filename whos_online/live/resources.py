"""How many live streams a process opens: in all, per session, and per address without one.

An open stream holds a connection, so a file descriptor of its process; at the process's limit of
open files the server accepts no connection at all, pages included. So a process opens at most
``MAX_STREAMS`` streams (by default half its soft limit of open files, ``RLIMIT_NOFILE``, which
leaves the other half to pages, Redis, the database and files), at most
``MAX_STREAMS_PER_CLIENT`` to one session, and, to requests without a session, at most
``MAX_STREAMS_PER_ADDRESS`` to one client address (an IPv6 one by its ``GUEST_IPV6_PREFIX``
network, as guests are counted). A request with a session counts against its session only: many
people behind one address (an office's NAT) who have sessions never share a cap, and those who
have none share the larger allowance of the address. A session cookie counts as a session once
the session is loaded and found (Django takes any well-formed key from a cookie).

A refused stream is answered 503 (the view), and its page polls. The log says so once per
episode and kind of cap: a warning at the first refusal, then nothing until ``EPISODE_QUIET``
seconds have passed without one, which ends the episode.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from django.conf import settings
from django.dispatch import receiver

from whos_online.config.process import PerProcess
from whos_online.config.settings import config_changed
from whos_online.recording import guests
from whos_online.recording.state import state_of

if TYPE_CHECKING:
    from django.http import HttpRequest

    from whos_online.config.settings import Config

logger = logging.getLogger("whos_online")

#: Seconds without a refusal that end an episode of refusals (the next one is logged again).
EPISODE_QUIET: Final = 60.0


class Cap(enum.Enum):
    """What a stream may be refused for."""

    PROCESS = "MAX_STREAMS"
    SESSION = "MAX_STREAMS_PER_CLIENT"
    ADDRESS = "MAX_STREAMS_PER_ADDRESS"


_REFUSING: Final = {
    Cap.PROCESS: "this process has %d open, its cap",
    Cap.SESSION: "one session has %d open, the cap per session",
    Cap.ADDRESS: "one client address without a session has %d open, the cap per address",
}


@dataclass(frozen=True)
class Client:
    """Whom a stream is counted against: a session (``Cap.SESSION``) or an address."""

    cap: Cap
    key: str


async def client_of(request: HttpRequest, config: Config) -> Client:
    """The session of ``request`` if it has one that exists, else its client's address. Loads
    the session (once per request: the rules of the widgets read the same one)."""
    session = getattr(request, "session", None)
    if session is not None and request.COOKIES.get(settings.SESSION_COOKIE_NAME):
        await session.akeys()  # a key that names no session is dropped as it loads
        if session.session_key:
            return Client(Cap.SESSION, session.session_key)
    state = state_of(request)
    address = state.address(config)
    if address is None:
        return Client(Cap.ADDRESS, state.candidate(config))
    return Client(Cap.ADDRESS, guests.guest_network(address, config.guest_ipv6_prefix))


def default_max_streams() -> int | None:
    """Half the process's soft limit of open files; None where there is no limit to read."""
    try:
        import resource  # Unix only
    except ImportError:  # pragma: no cover - Windows: no limit to read
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(1, soft // 2)


class Ticket:
    """One admitted stream: its place is given back once (``release``), whichever of the
    stream's end or its collection comes first."""

    def __init__(self, caps: Caps, client: Client) -> None:
        self._caps = caps
        self._client: Client | None = client

    def release(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            self._caps.release(client)


class Caps:
    """The streams open in this process, by client, and the episodes of refusals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._by_client: Counter[Client] = Counter()
        self._last_refusal: dict[Cap, float] = {}
        self._default_max = default_max_streams()

    def open_streams(self) -> int:
        return self._open

    def admit(self, config: Config, client: Client, now: float | None = None) -> Ticket | None:
        """A ticket for one more stream to ``client``, or None (logged once per episode)."""
        process_cap = self._default_max if config.max_streams is None else config.max_streams
        client_cap = (
            config.max_streams_per_client
            if client.cap is Cap.SESSION
            else config.max_streams_per_address
        )
        with self._lock:
            if process_cap is not None and self._open >= process_cap:
                refused, count = Cap.PROCESS, self._open
            elif client_cap is not None and self._by_client[client] >= client_cap:
                refused, count = client.cap, self._by_client[client]
            else:
                self._open += 1
                self._by_client[client] += 1
                return Ticket(self, client)
            now = time.time() if now is None else now
            last = self._last_refusal.get(refused)
            self._last_refusal[refused] = now
        if last is None or now - last >= EPISODE_QUIET:
            logger.warning(
                "whos_online refuses live streams: %s (%s); their pages poll instead. Said once "
                "until %g s pass without a refusal.",
                _REFUSING[refused] % count,
                refused.value,
                EPISODE_QUIET,
            )
        return None

    def release(self, client: Client) -> None:
        with self._lock:
            self._open -= 1
            self._by_client[client] -= 1
            if self._by_client[client] <= 0:
                del self._by_client[client]


_caps: Final = PerProcess(Caps)


def caps() -> Caps:
    """This process's caps."""
    return _caps.get()


@receiver(config_changed, dispatch_uid="whos_online.live.resources.reset")
def reset(**kwargs: object) -> None:
    """Count anew (settings changed: tests); the streams still open give back their places to
    the counts they were taken from."""
    _caps.replace()
