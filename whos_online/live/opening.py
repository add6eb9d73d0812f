"""What ``whos_online.asgi.LiveStreams`` and the stream's view hand each other through the
request's scope: the connection's ``send`` one way, the stream the view opened the other; and
the stream followed there once Django has sent its first state."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Final

from whos_online.config import process

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from django.http import HttpRequest

    from whos_online.live.freezer import Freezer
    from whos_online.live.line import Line
    from whos_online.live.resources import Ticket
    from whos_online.live.subscription import Hub, Listener

    Message = Mapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]

#: The scope's key under which the stream's view finds its ``Opening``.
OPENING: Final = "whos_online.opening"
#: What a request keeps once its stream is over (``_forget``): plain strings.
KEPT: Final = frozenset({"method", "path", "path_info", "META"})


@dataclass(frozen=True)
class Opened:
    """A stream its view opened for ``request``: it goes on once Django has sent its first
    state, read when ``hub`` had announced ``seen`` changes."""

    request: HttpRequest
    stream: Listener
    line: Line
    hub: Hub
    seen: int
    ticket: Ticket

    async def follow(self, receive: Receive, *, gone: bool = False) -> None:
        """The stream, until it is over (its end sent, its client gone, or cut off: the response
        is then left unfinished, and the server closes the connection); ``gone`` if Django
        already took its client's going."""
        self.hub.add(self.stream)
        watching = asyncio.ensure_future(_until_gone(receive, self.line.gone))
        try:
            if gone:
                self.line.gone()
            elif not self.stream.rooms or process.is_stopping():
                self.line.end()  # nothing to follow, or asked to stop since it was opened
            elif self.hub.generation != self.seen:
                self.hub.catch_up(self.stream)
            await self.line.over
        finally:
            watching.cancel()
            self.line.cancel()  # a send still under way, should this task be cancelled
            self.hub.discard(self.stream)
            self.ticket.release()
            # A read under way may still render it.
            self.hub.after_read(functools.partial(_forget, self.request))


class Opening:
    """A stream's connection as ``LiveStreams`` hands it to Django: what the view opened on it,
    and whether the response Django sends can carry the stream on once Django is done."""

    def __init__(self, send: Send, receive: Receive) -> None:
        self.send = send
        self._receive = receive
        self.opened: Opened | None = None
        #: Whether the response Django started cannot go on here: not the view's stream as the
        #: view made it (a middleware compressed it, or answered instead). Django carries it.
        self.declined = False
        #: Whether Django finished its response (its first state sent): the stream goes on.
        self._handed_on = False
        #: Whether Django took the client's going (``http.disconnect``).
        self._gone = False

    async def receive(self) -> Message:
        """The connection's ``receive``, as Django is handed it."""
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self._gone = True
        return message

    async def send_response(self, message: Message) -> None:
        """The connection's ``send``, as Django is handed it: the end of the view's stream is
        held back, for the stream to go on."""
        if self.opened is not None and not self.declined:
            if message["type"] == "http.response.start":
                self.declined = not _carries_a_stream(message)
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                self._handed_on = True
                if message.get("body"):
                    await self.send({**message, "more_body": True})
                return
        await self.send(message)

    async def go_on(self, freezer: Freezer | None = None) -> None:
        """Once Django has returned: the stream, if its response is to go on here (held by
        ``freezer``, if any)."""
        if self.opened is None or self.declined:
            return
        if self._handed_on:
            with contextlib.nullcontext() if freezer is None else freezer.holding():
                await self.opened.follow(self._receive, gone=self._gone)
        else:
            self.abandon()

    def abandon(self) -> None:
        """Django did not finish the response (its client went, or it failed): no stream."""
        if self.opened is not None and not self.declined:
            self.opened.ticket.release()


def _forget(request: HttpRequest) -> None:
    """Drop the attributes of a request whose stream is over, but those its ``repr`` reads (a
    log record, an error reporter): they hold cycles (AuthenticationMiddleware's lazy user
    refers back to its request, as other middleware's may), and dropped, what the stream held
    is given back as it ends, rather than at the collector's next full pass (or once
    ``Freezer`` has thawed it)."""
    attributes = vars(request)
    for name in [name for name in attributes if name not in KEPT]:
        del attributes[name]


def _carries_a_stream(start: Message) -> bool:
    """Whether a response that starts so is the view's stream as it made it, to which events
    may be added as they are: 200, an event stream, neither compressed nor of a set length."""
    headers = {bytes(name).lower(): bytes(value) for name, value in start.get("headers", ())}
    return (
        start.get("status") == HTTPStatus.OK
        and headers.get(b"content-type", b"").startswith(b"text/event-stream")
        and b"content-encoding" not in headers
        and b"content-length" not in headers
    )


async def _until_gone(receive: Receive, gone: Callable[[], None]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone()
