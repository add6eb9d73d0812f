"""A live stream written straight to its connection (``whos_online.asgi.LiveStreams``): the
subscription's own turn of the event loop calls the server's ``send`` for each stream that has
news, so that no task wakes per stream per change. A send the server makes wait (its buffer is
full) goes on in a task of its own; until it is done the stream keeps only what it sends next,
with the same rules and bounds as an ``Outbox`` (``outbox.Pending``).

What ``LiveStreams`` and the stream's view hand each other through the request's scope
(``Opening``): the connection's ``send`` one way, the stream the view opened the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Final

from whos_online.config import process
from whos_online.live.outbox import END, Pending

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping

    from django.http import HttpRequest

    from whos_online.live.outbox import Listener
    from whos_online.live.resources import Freezer, Ticket
    from whos_online.live.subscription import Hub

    Message = Mapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]

logger = logging.getLogger("whos_online")


class Line(Pending):
    """What one stream sends next, sent as soon as it may be."""

    def __init__(
        self,
        send: Callable[[dict[str, Any]], Awaitable[None]],
        ends_at: float,
        loop: asyncio.AbstractEventLoop,
        *,
        now: float | None = None,
    ) -> None:
        super().__init__(ends_at, now=now)
        self._send = send
        #: A send the server made wait (since ``_sending_since``).
        self._waiting: asyncio.Future[None] | None = None
        #: The context its sends run in (see ``_write``).
        self._context = contextvars.copy_context()
        #: Done once the stream is over: its end sent, its client gone, or cut off (then True:
        #: the response was left unfinished, and the server closes the connection).
        self.over: asyncio.Future[bool] = loop.create_future()

    def cancel(self) -> None:
        """Cut the stream off: its response is left unfinished, and the server closes it."""
        self._over(cut=True)

    def gone(self) -> None:
        """Its client went (``http.disconnect``)."""
        self._over(cut=False)

    def _finished(self) -> bool:
        return self.over.done()

    def _wake(self) -> None:
        """Send what is due, until a send has to wait (its end sends the rest)."""
        while self._waiting is None and not self.over.done():
            event = self._take()
            if event is None:
                return
            self._write(event, last=event is END)

    def _write(self, event: str, *, last: bool) -> None:
        message = {"type": "http.response.body", "body": event.encode(), "more_body": not last}
        try:
            sending = self._send(message)
            if not asyncio.iscoroutine(sending):
                waiting: asyncio.Future[None] = asyncio.ensure_future(sending)
            else:
                # In the stream's own context, whichever task calls: a ``send`` wrapped by a
                # middleware that sets context variables (a tracer's) finds its own.
                rest = _Rest(sending, self._context.run(sending.send, None), self._context)
                waiting = self._context.run(asyncio.ensure_future, rest)
        except StopIteration:  # sent without waiting: the usual case
            self._sent(last=last)
            return
        except Exception:
            logger.debug(
                "A live stream's send failed; its client is taken for gone.", exc_info=True
            )
            self._over(cut=False)
            return
        self._waiting, self._sending_since = waiting, time.time()
        waiting.add_done_callback(lambda done: self._waited(done, last=last))

    def _waited(self, done: asyncio.Future[None], *, last: bool) -> None:
        self._waiting = self._sending_since = None
        if done.cancelled() or done.exception() is not None:
            self._over(cut=False)
            return
        self._sent(last=last)
        self._wake()

    def _sent(self, *, last: bool) -> None:
        self._quiet_since = time.time()
        if last:
            self._over(cut=False)

    def _over(self, *, cut: bool) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.cancel()
        if not self.over.done():
            self.over.set_result(cut)


class _Rest:
    """The rest of a send that had to wait: ``waiting``, what it first waits for, then on to its
    end, in ``context``, as a task of that context would have run it from its start."""

    def __init__(
        self, sending: Coroutine[Any, Any, None], waiting: object, context: contextvars.Context
    ) -> None:
        self._sending = sending
        self._waiting = waiting
        self._context = context

    def __await__(self) -> Generator[Any, Any, None]:
        waiting, run = self._waiting, self._context.run
        while True:
            try:
                try:
                    value = yield waiting
                except BaseException as error:  # the task's cancellation, passed on
                    waiting = run(self._sending.throw, error)
                else:
                    waiting = run(self._sending.send, value)
            except StopIteration:
                return


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
