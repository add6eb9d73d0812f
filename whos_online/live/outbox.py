"""What one live stream has to send next: the newest state only, never a backlog, its heartbeat
when it is quiet, and its end (at its end time, or when the process stops); and the bounds past
which a stream that cannot send is cancelled; and what the subscription asks of a stream
(``Listener``).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from whos_online.backend.keyspace import Person
    from whos_online.config.settings import Config
    from whos_online.store.results import Snapshot

#: Seconds of silence after which a stream sends a comment, so that proxies keep the connection
#: and a closed one is noticed.
HEARTBEAT: Final = 15.0
#: Seconds a server may take to send one event before the stream ends. A server's ``send``
#: waits only once its own buffer is full (uvicorn's: 64 KiB above the kernel's socket buffer),
#: so a client that still reads, however slowly, takes what is waiting well within this; one
#: that took nothing for this long is gone or stuck.
SEND_BOUND: Final = 30.0
#: Seconds a stream that should end (its end time, or the process stopping) may take to send
#: its end before it is cancelled.
END_GRACE: Final = 2.0

STALE: Final = "event: stale\ndata: \n\n"
END: Final = "event: end\ndata: \n\n"
STILL_HERE: Final = ": still here\n\n"


class Pending:
    """What one stream has to send next (see the module's docstring), whichever way it is sent:
    pulled by its response (``Outbox``) or pushed to its connection (``line.Line``), each of
    which says how it is woken (``_wake``), when it is over (``_finished``) and how it is cut
    off (``cancel``)."""

    def __init__(self, ends_at: float, *, now: float | None = None) -> None:
        #: When (Unix time) the stream ends.
        self.ends_at = ends_at
        self._state: str | None = None
        self._stale = False
        self._heartbeat = False
        #: When it was told to end (its end time, a stop); and whether its end was taken.
        self._ending_since: float | None = None
        self._ended = False
        #: When the last event was handed to the server, while its send has not returned.
        self._sending_since: float | None = None
        self._quiet_since = time.time() if now is None else now

    # What the hub hands it

    def offer(self, state: str) -> None:
        """A newer state: it replaces one not sent yet, and says Redis can be read again."""
        if self._ending_since is None:
            self._state, self._stale = state, False
            self._wake()

    def stale(self) -> None:
        """Say, after the state waiting (if any), that what the page shows may be out of date."""
        if self._ending_since is None:
            self._stale = True
            self._wake()

    def end(self, now: float | None = None) -> None:
        """End the stream: its end, and nothing after; what was waiting is dropped (the page
        opens a new stream, whose first state is the current one)."""
        if self._ending_since is None:
            self._ending_since = time.time() if now is None else now
            self._state, self._stale, self._heartbeat = None, False, False
            self._wake()

    def tick(self, now: float | None = None) -> bool:
        """Heartbeats, the end at the end time, and the cancellation of a stream whose send or
        end takes too long; False once the stream is over."""
        if self._finished():
            return False
        now = time.time() if now is None else now
        if now >= self.ends_at:
            self.end(now)
        if self._overdue(now):
            self.cancel()
        elif self._sending_since is None and now - self._quiet_since >= HEARTBEAT:
            self._heartbeat = True
            self._wake()
        return not self._finished()

    def _overdue(self, now: float) -> bool:
        sending = self._sending_since
        if sending is not None and now - sending >= SEND_BOUND:
            return True
        ending = self._ending_since
        return ending is not None and now - ending >= END_GRACE

    def _take(self) -> str | None:
        """The next event to send, if one is due: ``END`` once, then nothing."""
        if self._ending_since is not None:
            if self._ended:
                return None
            self._ended = True
            return END
        if self._state is not None:
            state, self._state = self._state, None
            return state
        if self._stale:
            self._stale = False
            return STALE
        if self._heartbeat:
            self._heartbeat = False
            return STILL_HERE
        return None

    # What each way of sending says

    def _wake(self) -> None:
        raise NotImplementedError

    def _finished(self) -> bool:
        raise NotImplementedError

    def cancel(self) -> None:
        raise NotImplementedError


class Outbox(Pending):
    """The next events of one stream, taken by its response's generator (``next``)."""

    def __init__(self, ends_at: float, *, now: float | None = None) -> None:
        super().__init__(ends_at, now=now)
        self._ready = asyncio.Event()
        self._task: asyncio.Task[object] | None = None

    def begin(self, event: str) -> str:
        """Note the task that consumes the stream; ``event``, its first, handed out."""
        self._task = asyncio.current_task()
        return self._handing_out(event)

    async def next(self) -> str:
        """The next event to send, once there is one: ``END`` is the last."""
        self._sending_since, self._quiet_since = None, time.time()  # the previous one has gone
        while (event := self._take()) is None:
            self._ready.clear()
            await self._ready.wait()
        return self._handing_out(event)

    def _handing_out(self, event: str) -> str:
        self._sending_since = time.time()
        return event

    def _wake(self) -> None:
        self._ready.set()

    def _finished(self) -> bool:
        return self._task is not None and self._task.done()

    def cancel(self) -> None:
        """Cancel the task that consumes the stream: the ASGI handler takes it for a client gone
        and ends the response."""
        if self._task is not None:
            self._task.cancel()


class Listener(Protocol):
    """An open stream, as the subscription sees it."""

    #: The rooms it shows ("" for the site's list).
    rooms: frozenset[str]

    def render(self, found: Mapping[str, Snapshot | None], shared: dict[object, str]) -> str | None:
        """Its event for these snapshots, or None when it has nothing new; ``shared`` holds the
        answers rendered for the others of the same read. Run in a thread."""

    def send(self, event: str) -> None:
        """Hand it ``event`` to send (on the event loop)."""

    def stale(self) -> None:
        """Tell it the subscription is down: what it shows may be out of date."""

    def sought(self) -> Mapping[str, Sequence[Person]]:
        """The rooms in which a read must look for its page's reader (run in a thread)."""

    def lost(self, config: Config) -> None:
        """Redis lost its data, or may have: have its reader recorded again (in a thread)."""

    def end(self) -> None:
        """Have it send its end, and end."""

    def tick(self, now: float | None = None) -> bool:
        """Its heartbeat, its end or its cancellation, when due (``outbox.Pending.tick``);
        False once it has ended."""
