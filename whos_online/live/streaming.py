"""The live stream: a page's live widgets pushed to it as they change (Server-Sent Events, under
ASGI).

Its first event is the widgets' state now; the next ones come as the subscription learns that
their rooms changed, and it ends at its end time (a room token running out) or when the process
stops. Under WSGI, or with ``LIVE_UPDATES`` off, it answers 204 and the page polls.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import TYPE_CHECKING, Any, Final

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.views.decorators.http import require_GET

from whos_online.config import process
from whos_online.config.settings import get_config
from whos_online.decorators import not_recorded
from whos_online.live import resources, subscription
from whos_online.live.line import OPENING, Line, Opened, Opening
from whos_online.live.outbox import END, Outbox
from whos_online.live.widget import (
    MAX_WIDGETS,
    answer_widgets,
    answers_body,
    render_answers,
    rooms_of,
)
from whos_online.reading import snapshots
from whos_online.recording import guests
from whos_online.store.results import EMPTY_SNAPSHOT

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from django.http import HttpRequest

    from whos_online.backend.keyspace import Person
    from whos_online.config.settings import Config
    from whos_online.live.widget import Accepted
    from whos_online.reading.viewer import Reader
    from whos_online.store.results import Snapshot


#: Milliseconds after which ``EventSource`` reconnects a stream cut off (not one that ended).
RETRY_MS: Final = 2000
#: Seconds after which a page refused a stream (a cap, a stop) may try again.
RETRY_AFTER: Final = 30


class Stream:
    """One open stream: its request (whose viewer and tokens its renders keep), its widgets,
    and what it has to send next (its ``outbox``)."""

    def __init__(
        self,
        request: HttpRequest,
        answers: list[dict[str, Any]],
        accepted: list[Accepted],
        *,
        names: bool,
        ends_at: float,
        reader: Reader | None = None,
    ) -> None:
        self.request = request
        self.answers = answers
        self.accepted = accepted
        self.rooms = frozenset(rooms_of(accepted))
        #: The page's own reader, shown in its lists in every state (``reading.viewer``).
        self.reader = reader
        #: When (Unix time) the stream ends.
        self.ends_at = ends_at
        #: What it sends next: pulled by its response (``Outbox``), or pushed (``Line``).
        self.outbox: Outbox | Line = Outbox(ends_at)
        #: What makes two streams' answers the same, given the same snapshots: every widget's
        #: query (tokens and language included) and status, the viewer, and the names rule.
        self._key = (
            names,
            guests.session_key(request, live=True),
            tuple(widget.query.urlencode() for widget in accepted),
            tuple(answer["status"] for answer in answers),
        )
        self._last: str | None = None
        self._stale = False

    def first(self) -> str:
        """The first event: the state its first read rendered."""
        body = answers_body(self.answers)
        self._last = body
        return f"retry: {RETRY_MS}\ndata: {body}\n\n"

    def sought(self) -> dict[str, list[Person]]:
        """The rooms in which the next read must look for the page's reader."""
        return {} if self.reader is None else self.reader.sought(self.rooms, get_config())

    def lost(self, config: Config) -> None:
        """Redis lost its data, or may have: have the page's reader recorded again now."""
        if self.reader is not None:
            self.reader.lost(config)

    def render(self, found: Mapping[str, Snapshot | None], shared: dict[object, str]) -> str | None:
        shown = dict(found)
        if self.reader is not None:
            config = get_config()
            self.reader.added = False
            for room in self.rooms & self.reader.rooms:
                one = found.get(room)
                if one is not None:
                    shown[room] = self.reader.shown_in(one, room, config)
        # A state with the reader added is theirs alone; the others of a read share theirs.
        key = None if self.reader is not None and self.reader.added else self._key
        body = shared.get(key) if key is not None else None
        if body is None:
            for room in self.rooms:
                one = shown.get(room)
                snapshots.keep_on_request(
                    self.request, EMPTY_SNAPSHOT if one is None else one, room
                )
            unread = {room for room in self.rooms if shown.get(room) is None}
            render_answers(self.request, self.accepted, unread)
            body = answers_body(self.answers)
            if key is not None:
                shared[key] = body
        if body == self._last and not self._stale:
            return None
        self._last, self._stale = body, False
        return f"data: {body}\n\n"

    def send(self, event: str) -> None:
        self.outbox.offer(event)

    def stale(self) -> None:
        self._stale = True
        self.outbox.stale()

    def end(self) -> None:
        self.outbox.end()

    def tick(self, now: float | None = None) -> bool:
        return self.outbox.tick(now)


def _open(request: HttpRequest, config: Config, queries: list[str]) -> Stream:
    """Check every widget, read their rooms and render the first state (in a thread: the rules
    may load the user, and the read is the request path's)."""
    read = answer_widgets(request, config, queries)
    now = time.time()
    ends_at = now + config.room_token_max_age
    if config.room_access is None:
        for widget in read.accepted:
            if widget.options.room is not None and widget.issued is not None:
                ends_at = min(ends_at, widget.issued + config.room_token_max_age)
    return Stream(
        request,
        read.answers,
        read.accepted,
        names=read.names,
        ends_at=ends_at,
        reader=read.reader,
    )


@not_recorded
@require_GET
async def stream(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """The page's live widgets as a stream of events (see the module's docstring)."""
    config = get_config()
    if not isinstance(request, ASGIRequest) or not config.live_updates:
        return HttpResponse(status=204)
    queries = request.GET.getlist("widget")
    if not 1 <= len(queries) <= MAX_WIDGETS:
        msg = f"Give 1 to {MAX_WIDGETS} widget= queries, not {len(queries)}."
        return HttpResponseBadRequest(msg, content_type="text/plain; charset=utf-8")
    if process.is_stopping():
        return _unavailable("This process is stopping.")
    client = await resources.client_of(request, config)
    ticket = resources.caps().admit(config, client)
    if ticket is None:
        return _unavailable("Too many live streams are open; the page polls meanwhile.")
    try:
        hub = subscription.hub()
        async with hub.opening:
            seen = hub.generation
            opened = await sync_to_async(_open)(request, config, queries)
    except BaseException:
        ticket.release()
        raise
    # Its place is given back as it ends, or should it never start, once it is collected.
    weakref.finalize(opened, ticket.release)
    opening = _opening_of(request)
    if opening is None:
        outbox = opened.outbox = Outbox(opened.ends_at)
        events = _events(hub, opened, outbox, seen, ticket)
    else:
        line = opened.outbox = Line(opening.send, opened.ends_at, asyncio.get_running_loop())
        opening.opened = Opened(request, opened, line, hub, seen, ticket)
        events = _first(opening, opened, hub, seen, ticket)
    response = StreamingHttpResponse(events, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _unavailable(reason: str) -> HttpResponse:
    """503: the page polls, and tries a stream again later. The connection is closed (ASGI
    servers honour ``Connection: close``), so that refused streams hold no file open."""
    response = HttpResponse(reason, status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER)
    response["Cache-Control"] = "no-store"
    response["Connection"] = "close"
    # Django's ``django.request`` logger would log each 5xx answer as an error: one line per
    # refused connection. ``stream_caps`` logs one per episode instead.
    response._has_been_logged = True  # type: ignore [attr-defined]
    return response


class _EveryDatabase(set[str]):
    """Every database alias, as a view's ``_non_atomic_requests``: Django refuses to wrap an
    async view in ``ATOMIC_REQUESTS``'s transaction, and answers 500 rather than run it, unless
    the view is exempt for each alias that has it on (``transaction.non_atomic_requests`` exempts
    one alias). The stream writes nothing to the database, and a transaction held open for as
    long as a page is would be wrong anyway."""

    def __contains__(self, alias: object) -> bool:
        return True


stream._non_atomic_requests = _EveryDatabase()  # type: ignore [attr-defined]


def _opening_of(request: HttpRequest) -> Opening | None:
    """The connection of a stream served through ``whos_online.asgi.LiveStreams``, which goes on
    there once Django has sent the first state; None for one Django's response carries."""
    found = getattr(request, "scope", {}).get(OPENING)
    return found if isinstance(found, Opening) else None


async def _first(
    opening: Opening, opened: Stream, hub: subscription.Hub, seen: int, ticket: resources.Ticket
) -> AsyncIterator[str]:
    """The response of a stream that goes on in ``LiveStreams``: its first state alone; or, if
    a middleware made the response one that cannot go on there (``Opening.declined``), the
    whole stream, as Django carries it without ``LiveStreams``."""
    if opening.declined:
        outbox = opened.outbox = Outbox(opened.ends_at)
        async for event in _events(hub, opened, outbox, seen, ticket):
            yield event
        return
    yield opened.first()


async def _events(
    hub: subscription.Hub, opened: Stream, outbox: Outbox, seen: int, ticket: resources.Ticket
) -> AsyncIterator[str]:
    def finish(*_task: object) -> None:
        hub.discard(opened)
        ticket.release()

    # Cancelled in a send, the generator is left as it is (Django's handler closes the one
    # that wraps it), and would only finish once collected: its task's end finishes it.
    task = asyncio.current_task()
    if task is not None:
        task.add_done_callback(finish)
    hub.add(opened)
    try:
        if hub.generation != seen:
            hub.catch_up(opened)
        yield outbox.begin(opened.first())
        if not opened.rooms:
            yield END  # nothing to follow
            return
        resources.let_go()
        while True:
            event = await outbox.next()
            yield event
            if event == END:
                return
    finally:
        finish()
