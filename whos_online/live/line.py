"""A live stream written straight to its connection (``whos_online.asgi.LiveStreams``): the
subscription's own turn of the event loop calls the server's ``send`` for each stream that has
news, so that no task wakes per stream per change. A send the server makes wait (its buffer is
full) goes on in a task of its own; until it is done the stream keeps only what it sends next,
with the same rules and bounds as an ``Outbox`` (``outbox.Pending``).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import TYPE_CHECKING, Any

from whos_online.live.outbox import END, Pending

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Generator

    Send = Callable[[dict[str, Any]], Awaitable[None]]

logger = logging.getLogger("whos_online")


class Line(Pending):
    """What one stream sends next, sent as soon as it may be."""

    def __init__(
        self,
        send: Send,
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
