"""What the middleware does with a request, in one direction: decide before the view
(``before_view``), place it after (``after_view``), record its person (``record_request``) and
hand out the throttle cookie that says what was recorded.

A throttled request costs no Redis command and no SQL query. The request's state is taken once,
and its visitor, shard included, worked out once and handed along.
"""

from __future__ import annotations

import enum
import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation
from django.http import HttpResponse
from django.utils.http import http_date

from whos_online.flushing import flusher
from whos_online.recording import guests, rooms, throttle, visits
from whos_online.recording.state import NOT_LOADED, state_of
from whos_online.recording.throttle import recent
from whos_online.store import epochs
from whos_online.store.items import GO, STAYS_PUT, Placement

if TYPE_CHECKING:
    from http.cookies import Morsel, SimpleCookie

    from django.http import HttpRequest
    from django.http.response import HttpResponseBase

    from whos_online.backend.keyspace import Shard
    from whos_online.config.settings import Config
    from whos_online.recording.state import RequestState
    from whos_online.recording.throttle import ThrottleCookie
    from whos_online.store.items import Visit, Visitor


class Decision(enum.Enum):
    """What ``before_view`` decides before the view: leave the request alone (an ignored
    path), record it unless its browser's cookie spares it (THROTTLED), or record it."""

    IGNORE = enum.auto()
    THROTTLED = enum.auto()
    RECORD = enum.auto()


def before_view(request: HttpRequest, config: Config, now: float) -> tuple[RequestState, Decision]:
    """The request's state, and what to do after the view, decided from cookies and headers
    alone. Whether the request moves its person to another room is left for after it.

    The throttle cookie is noted on the request's state, for after the view and for the
    template tags, which count the viewer in when it says they are not online yet."""
    state = state_of(request)
    path = request.path_info
    for pattern in config.ignore_paths:
        if pattern.search(path):
            return state, Decision.IGNORE
    state.seen = True
    state.cookie = cookie = state.sent_cookie(config, now)
    if cookie is None:
        return state, Decision.RECORD
    visited = cookie.expiry - config.throttle
    if not cookie.fresh(now) or epochs.current().outdated(cookie.epoch, config, visited):
        # Redis lost the visit this cookie speaks of, or may: record it again now.
        return state, Decision.RECORD
    return state, Decision.THROTTLED


def after_view(
    state: RequestState,
    response: HttpResponseBase,
    config: Config,
    now: float,
    decision: Decision,
) -> Placement | None:
    """Where to record the request's person, or None to write nothing; counts the page hit of a
    page view (in memory, no Redis call). Called unless the path is ignored.

    Only a page view (``pageviews``, or one a page's script announced, ``views.page_view``) puts
    its person in its room, or takes them out of theirs when it has none; a page's own "still
    here" (``views.presence``) may put them back in its room; any other request leaves them
    where they are. A throttled request is recorded only
    when a page view moves its person to another room. A view marked ``not_recorded`` is left
    alone.
    """
    if decision is Decision.THROTTLED and _stays_put(state, config):
        return None  # the fast path: no page hit to count, no room to move to
    announced = state.announced
    page_view = announced is not None or rooms.is_page_view(state.request, response)
    if page_view:
        placement = Placement(rooms.room_of(state) if announced is None else announced)
    else:
        placement = state.stay or STAYS_PUT
    if decision is Decision.THROTTLED:
        cookie = state.cookie
        assert cookie is not None
        moved = page_view and rooms.room_tag(placement.room) != cookie.room
        if not moved and not (page_view and config.count_hits):
            return None  # the fast path: nothing to count or write
    else:
        moved = True
    if state.is_not_recorded():
        return None
    if page_view and config.count_hits:
        visits.count_hit(now)
    if moved and (
        state.logged_in_as is not None
        or guests.session_key(state.request) != guests.session_key(state.request, sent=True)
    ):
        # A login or logout: the cookie spoke for another session, or another visitor.
        state.cookie = None
        state.forget_visitor()
    return placement if moved else None


def _stays_put(state: RequestState, config: Config) -> bool:
    """Whether a throttled request leaves nothing to do after its view, page view or not: no
    page hit is counted, and no page view could take its person to another room, since neither
    ``ROOMS``, nor the view, nor the page's script names one, and their cookie says they are in
    none. Asked first, so that a site without rooms does not pay to tell a page view."""
    cookie = state.cookie
    return (
        not config.count_hits
        and not config.rooms
        and state.room is None
        and not state.announced
        and cookie is not None
        and not cookie.room
    )


def hand_out_cookie(
    state: RequestState, response: HttpResponseBase, config: Config, recorded: Recorded
) -> None:
    """Set the throttle cookie for a visit that was stored (not FAILED). The browser keeps it
    as long as the visit counts (WINDOW); it spares writes for THROTTLE seconds from the
    visit it speaks of (with THROTTLE 0, none)."""
    if recorded.outcome is Outcome.FAILED:
        return
    request = state.request
    value = throttle.make_cookie(
        throttle.binding(guests.session_key(request), state.bound_address(config)),
        recorded.at,
        config.throttle,
        arrived=recorded.outcome is Outcome.ARRIVED,
        room=recorded.room_tag,
        epoch=recorded.epoch,
    )
    cookies = response.cookies
    cookies[throttle.COOKIE_NAME] = cookie_of(
        cookies, value, config.window, secure=request.is_secure(), now=time.time()
    )


class Outcome(enum.Enum):
    """What recording a visit came to: not stored (Redis is known to be down, or the queue is
    full), queued for someone online already, or queued for someone who was not online (whose
    next page must not show a snapshot from before)."""

    FAILED = enum.auto()
    WRITTEN = enum.auto()
    ARRIVED = enum.auto()


# Not frozen, as the other records a recorded request makes: a frozen dataclass sets each field
# through ``object.__setattr__``, 2.6 × the time to make one, and nothing changes them once made.
@dataclass(slots=True)
class Recorded:
    """What recording a request came to, for the throttle cookie the middleware hands out."""

    #: FAILED means no cookie: the visit may not be stored.
    outcome: Outcome
    #: When the visit the cookie speaks of was recorded: now, or when this process last wrote it.
    at: float
    #: The tag of that visit's room ("" for none, ``throttle.UNKNOWN_ROOM`` if not known).
    room_tag: str
    #: The epoch of the visitor's shard, as far as the process knows ("" if it does not).
    epoch: str = ""


def record_request(
    state: RequestState, config: Config, now: float, placement: Placement
) -> Recorded:
    """Record whoever made the request of ``state``, placed as ``placement`` says, unless this
    process's memory spares the write: queue the visit, and with ``FLUSH_INTERVAL`` 0 write it
    now.

    The outcome is FAILED when the visit may not be stored (see ``visits.queue``), so that the
    caller hands out no throttle cookie; ARRIVED when the visitor's browser sent no genuine cookie
    (or one from before Redis lost its data), or the visit moved them to another room, or this
    process recorded them moments ago (a login records the user at once), so that their next
    page reads afresh, whichever process serves it; WRITTEN otherwise.
    """
    visitor, found = _look_up(state, config, now, placement, NOT_LOADED)
    done: Recorded | _Remembered | _Stored
    if isinstance(found, _Writing):
        assert visitor is not None
        visit = visits.visit_of(visitor, config, now, placement, state.room_title)
        queued = visits.queue(config, visit, visitor.shard, room_tag=found.room_tag)
        failed = flusher.after_recording(config)
        done = _written(config, visit, visitor.shard, found, queued=queued, failed=failed)
    else:
        done = found
    return _recorded(config, state.cookie, visitor, done)


async def arecord_request(
    state: RequestState, config: Config, now: float, placement: Placement
) -> Recorded:
    """``record_request`` for an ASGI site: the person is who the view authenticated, as under
    WSGI, or the session's user, loaded with ``request.auser()`` (``RequestState.auser``); the
    visit is queued from the event loop, which never waits on Redis for it. With
    ``FLUSH_INTERVAL`` 0 the queue is written in a thread of its own, which a client that hangs
    up cannot cut off.
    """
    visitor, found = _look_up(state, config, now, placement, await state.auser())
    done: Recorded | _Remembered | _Stored
    if isinstance(found, _Writing):
        assert visitor is not None
        try:
            visit = visits.visit_of(visitor, config, now, placement, state.room_title)
        except SynchronousOnlyOperation:
            # The site's HIDE_USER or DISPLAY_NAME reads the database, which it may not do here.
            await sync_to_async(visitor.details)(config)
            visit = visits.visit_of(visitor, config, now, placement, state.room_title)
        queued = visits.queue(config, visit, visitor.shard, room_tag=found.room_tag)
        if flusher.writes_at_once(config):
            failed = await sync_to_async(flusher.current().flush, thread_sensitive=False)()
        else:
            failed = flusher.after_recording(config)
        done = _written(config, visit, visitor.shard, found, queued=queued, failed=failed)
    else:
        done = found
    return _recorded(config, state.cookie, visitor, done)


def _look_up(
    state: RequestState, config: Config, now: float, placement: Placement, user: object
) -> tuple[Visitor | None, Recorded | _Writing | _Remembered]:
    """Who made the request (``user``, or the session's if ``NOT_LOADED``), and whether
    recording them needs a write."""
    visitor = state.visitor(config, now, user)
    return visitor, _spared(visitor, state.cookie, config, now, placement)


def _written(
    config: Config,
    visit: Visit,
    shard: Shard,
    found: _Writing,
    *,
    queued: bool,
    failed: frozenset[str],
) -> _Stored | Recorded:
    """What queueing ``visit`` came to: FAILED, or stored, and then remembered once written
    when the process writes at once (``visits.queue`` remembers a visit it only queues)."""
    if not queued or shard.tag in failed:
        return Recorded(Outcome.FAILED, found.at, found.room_tag)
    if flusher.writes_at_once(config):
        visits.remember(config, visit, found.room_tag)
    return _Stored(found.at, found.room_tag, shard)


def _recorded(
    config: Config,
    cookie: ThrottleCookie | None,
    visitor: Visitor | None,
    found: Recorded | _Remembered | _Stored,
) -> Recorded:
    """What recording came to, for the cookie: as found, or in the epoch of the visitor's shard,
    as far as the process knows."""
    if isinstance(found, Recorded):
        return found
    if isinstance(found, _Remembered):
        assert visitor is not None
        return Recorded(
            Outcome.ARRIVED, found.at, found.room_tag, epochs.current().of(visitor.shard)
        )
    # Arriving: on the site (no genuine cookie, or one from before Redis lost its data), or in
    # another room. Either way the next page must not show a snapshot read before this visit.
    arriving = (
        cookie is None
        or epochs.current().gone(cookie.epoch, config)
        or cookie.room != found.room_tag
    )
    outcome = Outcome.ARRIVED if arriving else Outcome.WRITTEN
    return Recorded(outcome, found.at, found.room_tag, epochs.current().of(found.shard))


@dataclass(slots=True)
class _Writing:
    """A visit about to be queued: what its cookie will say of it."""

    at: float
    room_tag: str


@dataclass(slots=True)
class _Remembered:
    """A visitor this process wrote within THROTTLE: when their cookie runs from, and where."""

    at: float
    room_tag: str


@dataclass(slots=True)
class _Stored:
    """A visit queued, and written if the process writes at once: what its cookie will say."""

    at: float
    room_tag: str
    shard: Shard


def _spared(
    visitor: Visitor | None,
    cookie: ThrottleCookie | None,
    config: Config,
    now: float,
    placement: Placement,
) -> Recorded | _Writing | _Remembered:
    """What recording a request, whose browser sent ``cookie``, comes to without a write (a
    ``Recorded``, or what this process's memory says), or what its cookie will say once queued.

    The process's memory is asked only for a browser that sent no genuine cookie: a cookie says
    where its browser was last put, whichever process did so, while the memory knows only what
    this process wrote. For a page view it spares the write only on a site that uses no rooms:
    another process may have moved a client without cookies to another room since, and only a
    write puts them where their latest page is.
    """
    if placement.mode == GO:
        tag = rooms.room_tag(placement.room)
    elif cookie is not None:
        # Not a page view: the visitor stays where their browser's latest page view put them.
        tag = cookie.room
    else:
        # Not known here: a page's "still here" may find that its reader left the room for good
        # (see lua/record.lua), so their next page view of it is written whatever it is.
        tag = throttle.UNKNOWN_ROOM
    if visitor is None:
        return Recorded(Outcome.WRITTEN, now, tag)
    if cookie is None and config.throttle:
        entry = recent().entry(visitor.key, now, epochs.generation())
        if entry is not None and _memory_spares(entry[1], placement, tag, config):
            # The cookie handed out runs from the visit that was stored, not from now.
            return _Remembered(entry[0] - config.throttle, entry[1])
    return _Writing(now, tag)


def _memory_spares(remembered: str, placement: Placement, tag: str, config: Config) -> bool:
    """Whether a visitor this process wrote within THROTTLE, in the room of tag ``remembered``,
    needs no write for this visit: one that places them nowhere new, or a page view in the same
    room on a site that uses no rooms (see ``_spared``)."""
    if placement.mode != GO:
        return True
    return remembered == tag and not rooms.in_use(config)


def cookie_of(
    cookies: SimpleCookie, value: str, max_age: int, *, secure: bool, now: float
) -> Morsel[str]:
    """The throttle cookie of ``value``, for ``cookies`` (a response's), as Django's
    ``set_cookie(max_age=…, httponly=True, samesite="Lax", secure=…)`` writes it at ``now``:
    a copy of one Django made this second, given its value. ``set_cookie`` checks and sets
    each attribute anew, about a tenth of a recorded request's time. It replaces any throttle
    cookie on the response, where ``set_cookie`` would keep the attributes of one set before."""
    morsel = _made_by_django(int(now), max_age, secure=secure).copy()
    morsel.set(throttle.COOKIE_NAME, *cookies.value_encode(value))
    return morsel


@functools.lru_cache(maxsize=8)
def _made_by_django(second: int, max_age: int, *, secure: bool) -> Morsel[str]:
    """The throttle cookie as ``set_cookie`` writes it at ``second``, with no value: it is
    never handed out itself, only copied (``cookie_of``)."""
    response = HttpResponse()
    response.set_cookie(
        throttle.COOKIE_NAME,
        max_age=max_age,
        expires=http_date(second + max_age),
        httponly=True,
        samesite="Lax",
        secure=secure,
    )
    return response.cookies[throttle.COOKIE_NAME]
