"""What an open stream holds of its process, and no more: one of the streams the process opens
(``MAX_STREAMS``, and caps per session and per address) and, once it has sent its first state,
neither its request's thread nor that thread's database connections (``let_go``); and under
``LiveStreams``, no share of the garbage collector's full passes (``Freezer``).

An open stream holds a file descriptor: at the process's limit of open files the server would
accept no page either. A refused stream is answered 503, and its page polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gc
import inspect
import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from asgiref.sync import AsyncToSync, SyncToAsync, ThreadSensitiveContext
from django.conf import settings
from django.db import connections

from whos_online.config.process import PerProcess
from whos_online.recording import guests
from whos_online.recording.state import state_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import ModuleType

    from django.http import HttpRequest

    from whos_online.config.settings import Config

    Later = Callable[[float, Callable[[], None]], object]


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


#: Whether asgiref lets the caller of a context give it an executor of its own (3.13 on), which
#: must then be left alone.
_CALLERS_MAY_OWN_EXECUTORS: Final = (
    "executor" in inspect.signature(ThreadSensitiveContext.__init__).parameters
)


def let_go() -> bool:
    """Close the database connections of the calling request's own thread and end that thread;
    whether it did (False: the request has no thread of its own, as when a sync caller above
    runs its sync code, or it could not be found). The connections are closed on that thread,
    as its last work, without waiting for it: a client gone meanwhile cancels nothing, and a
    connection that fails to close is logged, never the stream's end."""
    if getattr(AsyncToSync.executors, "current", None) is not None:
        return False  # a sync caller above runs this request's sync code, on its own thread
    context = _current_context()
    executors: Any = getattr(SyncToAsync, "context_to_thread_executor", None)
    if context is None or executors is None:
        return False
    if getattr(context, "_executor", None) is not None or (
        _CALLERS_MAY_OWN_EXECUTORS and not hasattr(context, "_executor")
    ):
        # An executor the caller made and shuts down itself, or an asgiref that does not say.
        return False
    executor = executors.pop(context, None)
    if executor is None:
        return False
    executor.submit(_close_connections)
    executor.shutdown(wait=False)
    # What Django runs of the request later (its response's close, as the stream ends) goes to
    # one thread for all streams, rather than to a new thread per stream.
    executors[context] = afterwards()
    return True


class Afterwards(ThreadPoolExecutor):
    """The one thread of the process on which the streams' requests run their synchronous code
    once they have let go of their own (``let_go``): Django closes each stream's response on
    its request's thread as the stream ends. Left to asgiref, each end would make a thread for
    that close and another to join it, on the event loop's watch: 10 000 pages going at once
    froze a worker for 21 s. A request's context ends without shutting it down (asgiref shuts
    down, on a thread of its own, the executor it finds for the context, if it holds true)."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="whos_online-streams")

    def __bool__(self) -> bool:
        return False  # nothing of this context's to shut down

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Left running: it serves every stream of the process (``close`` ends it)."""

    def close(self) -> None:
        super().shutdown(wait=False)


_afterwards: Final = PerProcess(Afterwards, dropped=Afterwards.close)


def afterwards() -> Afterwards:
    """This process's ``Afterwards``."""
    return _afterwards.get()


def _close_connections() -> None:
    try:
        connections.close_all()
    except Exception:
        logger.exception("Closing the database connections of a live stream's thread failed.")


def _current_context() -> object | None:
    variable: Any = getattr(SyncToAsync, "thread_sensitive_context", None)
    if variable is None or not hasattr(variable, "get"):
        return None
    found: object | None = variable.get(None)
    return found


#: Streams begun between two freezes: a pass over what they bring costs some 50 ms.
FREEZE_EVERY: Final = 500
#: Frozen streams ended, per stream open, at which the frozen objects are thawed, and the
#: seconds after which it is done (if it still holds).
THAW_AT: Final = 4
THAW_AFTER: Final = 1.0


def _call_later(delay: float, then: Callable[[], None]) -> object:
    return asyncio.get_running_loop().call_later(delay, then)


class Freezer:
    """Freezes and thaws the objects of one process as its streams begin and end.

    A full pass visits every tracked object, about 130 per open stream, and comes each time they
    have grown by a quarter: with 10 000 streams, most of a second each time more open. So each
    time ``every`` streams have begun, what is new is collected and the process's objects are
    frozen (``gc.freeze``): passes skip them. A frozen cycle is collected only once thawed, so a
    stream breaks its own as it ends (``Opened.follow``); a second after four times as many frozen
    streams have ended as are open, all is thawed and collected. What waits for that thaw: an
    asyncio transport's cycle per connection (uvloop's make none), and the requests of other
    views under way at a freeze. A process that froze objects itself, or turned its collector
    off, is left alone."""

    def __init__(
        self,
        every: int = FREEZE_EVERY,
        collector: ModuleType = gc,
        later: Later = _call_later,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._every = every
        self._gc = collector
        self._later = later
        self._clock = clock
        #: When (``clock``) the thaw asked for should run; None when none is.
        self._thaw_at: float | None = None
        #: Streams open, and begun since the last freeze.
        self.open = 0
        self._begun = 0
        #: Freezes so far, and their count at the last thaw.
        self.freezes = 0
        self._thawed_at = 0
        #: Streams ended since the last thaw that had been frozen.
        self._ended_frozen = 0
        #: Whether the process froze objects of its own: then it is left alone.
        self._declined = False

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Around a stream, from its start to its end."""
        began = self._begin()
        try:
            yield
        finally:
            self._end(began)

    def _begin(self) -> int:
        """The freezes before it began; its objects are there, and frozen by the next."""
        began = self.freezes
        self.open += 1
        self._begun += 1
        if self._begun >= self._every:
            self._begun = 0
            self._freeze()
        return began

    def _end(self, began: int) -> None:
        self.open -= 1
        # Frozen if a freeze since the last thaw came after it began (it was open then).
        if self._frozen() and began < self.freezes:
            self._ended_frozen += 1
        if self._thaw_due() and not self._thaw_pending():
            self._later(THAW_AFTER, self._thaw)
            self._thaw_at = self._clock() + THAW_AFTER

    def _thaw_pending(self) -> bool:
        """Whether a thaw was asked for and may still run: one long overdue is taken as lost
        (its event loop closed), and asked for again."""
        return self._thaw_at is not None and self._clock() < self._thaw_at + THAW_AFTER

    def _frozen(self) -> bool:
        """Whether it froze the process's objects since its last thaw."""
        return self._thawed_at < self.freezes

    def _thaw_due(self) -> bool:
        return self._frozen() and self.open * THAW_AT <= self._ended_frozen

    def _freeze(self) -> None:
        if self._declined or not self._gc.isenabled():
            return
        if not self._frozen() and self._gc.get_freeze_count():
            self._declined = True  # frozen by someone else: theirs to thaw, not ours
            return
        self._gc.collect()
        self._gc.freeze()
        self.freezes += 1

    def _thaw(self) -> None:
        self._thaw_at = None
        if not self._thaw_due():  # more streams opened, or it froze again, meanwhile
            return
        self._gc.unfreeze()
        self._thawed_at, self._ended_frozen = self.freezes, 0
        self._gc.collect()
