"""What ``whos_online.asgi.LiveStreams`` and the stream's view hand each other through the
request's scope: the connection's ``send`` one way, the stream the view opened the other; and
the stream followed there once Django has sent its first state."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from whos_online.live.line import Line
    from whos_online.live.resources import Ticket
    from whos_online.live.subscription import Hub, Listener

    Message = Mapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]

#: The scope's key under which the stream's view finds its ``Opening``.
OPENING: Final = "whos_online.opening"


@dataclass(frozen=True)
class Opened:
    """A stream its view opened: it goes on once Django has sent its first state, read when
    ``hub`` had announced ``seen`` changes."""

    stream: Listener
    line: Line
    hub: Hub
    seen: int
    ticket: Ticket

    async def follow(self, receive: Receive) -> None:
        """The stream, until it is over (its end sent, its client gone, or cut off: the response
        is then left unfinished, and the server closes the connection)."""
        self.hub.add(self.stream)
        watching = asyncio.ensure_future(_until_gone(receive, self.line.gone))
        try:
            if self.hub.generation != self.seen:
                self.hub.catch_up(self.stream)
            if not self.stream.rooms:
                self.line.end()  # nothing to follow
            await self.line.over
        finally:
            watching.cancel()
            self.hub.discard(self.stream)
            self.ticket.release()


class Opening:
    """A stream's connection, as its view sees it; and what the view opened on it."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.opened: Opened | None = None
        #: Whether Django finished its response (its first state sent): the stream goes on.
        self.handed_on = False

    def abandon(self) -> None:
        """Django did not finish the response (its client went, or it failed): no stream."""
        if self.opened is not None:
            self.opened.ticket.release()


async def _until_gone(receive: Receive, gone: Callable[[], None]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone()
