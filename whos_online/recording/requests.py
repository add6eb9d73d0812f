"""What the middleware does with a request: decide, record, hand out the throttle cookie.

Before the view, whether to record the request is decided from its cookies and headers alone
(``needs_recording``), so that a throttled request costs no Redis command and no SQL query.
After the view, the request is placed (``after_view``: only a page view moves its person between
rooms), its person's visit queued (``record_request``) and the cookie handed out says what was
recorded: whether the visitor arrived (their next page must read afresh), the room the visit
left them in, and their shard's epoch; or, when the visit may not be stored (``FAILED``: Redis
is known to be down), no cookie spares the next request its write.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation
from django.utils.http import http_date

from whos_online.flushing import flusher
from whos_online.recording import guests, rooms, throttle, visits
from whos_online.recording.throttle import recent
from whos_online.store import epochs, keys
from whos_online.store.items import GO, STAYS_PUT, Placement

if TYPE_CHECKING:
    from django.http.response import HttpResponseBase

    from whos_online.config.settings import Config
    from whos_online.recording.state import RequestState
    from whos_online.recording.throttle import ThrottleCookie
    from whos_online.store.items import Visit, Visitor


class Decision(enum.Enum):
    """What ``needs_recording`` decides before the view: leave the request alone (an ignored
    path), record it unless its browser's cookie spares it (THROTTLED), or record it."""

    IGNORE = enum.auto()
    THROTTLED = enum.auto()
    RECORD = enum.auto()


def needs_recording(state: RequestState, path: str, config: Config, now: float) -> Decision:
    """Decide from cookies and headers alone what to do after the view. Whether the request
    moves its person to another room is left for after it.

    The throttle cookie is noted on the request's state, for after the view and for the
    template tags, which count the viewer in when it says they are not online yet."""
    if any(pattern.search(path) for pattern in config.ignore_paths):
        return Decision.IGNORE
    state.seen = True
    request = state.request
    binding = throttle.binding(guests.session_key(request, sent=True), state.bound_address(config))
    cookie = throttle.read_cookie(
        request.COOKIES.get(throttle.COOKIE_NAME), binding, now, config.throttle, config.window
    )
    state.cookie = cookie
    if cookie is None:
        return Decision.RECORD
    visited = cookie.expiry - config.throttle
    if not cookie.fresh(now) or epochs.current().outdated(cookie.epoch, config, visited):
        # Redis lost the visit this cookie speaks of, or may: record it again now.
        return Decision.RECORD
    return Decision.THROTTLED


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


def hand_out_cookie(
    state: RequestState, response: HttpResponseBase, config: Config, recorded: Recorded
) -> None:
    """Set the throttle cookie for a visit that was stored (not FAILED). The browser keeps it
    as long as the visit counts (WINDOW); it spares writes for THROTTLE seconds from the
    visit it speaks of (with THROTTLE 0, none)."""
    if recorded.outcome is Outcome.FAILED:
        return
    request = state.request
    response.set_cookie(
        throttle.COOKIE_NAME,
        throttle.make_cookie(
            throttle.binding(guests.session_key(request), state.bound_address(config)),
            recorded.at,
            config.throttle,
            arrived=recorded.outcome is Outcome.ARRIVED,
            room=recorded.room_tag,
            epoch=recorded.epoch,
        ),
        max_age=config.window,
        expires=_expires(config.window),
        httponly=True,
        samesite="Lax",
        secure=request.is_secure(),
    )


class Outcome(enum.Enum):
    """What recording a visit came to: not stored (Redis is known to be down, or the queue is
    full), queued for someone online already, or queued for someone who was not online (whose
    next page must not show a snapshot from before)."""

    FAILED = enum.auto()
    WRITTEN = enum.auto()
    ARRIVED = enum.auto()


@dataclass(frozen=True)
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

    The outcome is FAILED when the visit may not be stored (see ``queue``), so that the caller
    hands out no throttle cookie; ARRIVED when the visitor's browser sent no genuine cookie (or
    one from before Redis lost its data), or the visit moved them to another room, or this
    process recorded them moments ago (a login records the user at once), so that their next
    page reads afresh, whichever process serves it; WRITTEN otherwise.
    """
    visitor = state.visitor(config, now)
    found = _spared(visitor, state.cookie, config, now, placement)
    if isinstance(found, Recorded):
        return found
    assert visitor is not None
    visit = visits.visit_of(visitor, config, now, placement, state.room_title)
    queued = visits.queue(config, visit, room_tag=found.room_tag)
    failed = flusher.after_recording(config)
    return _recorded(config, state.cookie, visit, found, queued=queued, failed=failed)


async def arecord_request(
    state: RequestState, config: Config, now: float, placement: Placement
) -> Recorded:
    """``record_request`` for an ASGI site: the person is who the view authenticated, as under
    WSGI, or the session's user, loaded with ``request.auser()`` (``RequestState.auser``); the
    visit is queued from the event loop, which never waits on Redis for it. With
    ``FLUSH_INTERVAL`` 0 the queue is written in a thread of its own, which a client that hangs
    up cannot cut off.
    """
    visitor = state.visitor(config, now, await state.auser())
    found = _spared(visitor, state.cookie, config, now, placement)
    if isinstance(found, Recorded):
        return found
    assert visitor is not None
    try:
        visit = visits.visit_of(visitor, config, now, placement, state.room_title)
    except SynchronousOnlyOperation:
        # The site's HIDE_USER or DISPLAY_NAME reads the database, which it may not do here.
        await sync_to_async(visitor.details)(config)
        visit = visits.visit_of(visitor, config, now, placement, state.room_title)
    queued = visits.queue(config, visit, room_tag=found.room_tag)
    if flusher.writes_at_once(config):
        failed = await sync_to_async(flusher.current().flush, thread_sensitive=False)()
    else:
        failed = flusher.after_recording(config)
    return _recorded(config, state.cookie, visit, found, queued=queued, failed=failed)


def _recorded(
    config: Config,
    cookie: ThrottleCookie | None,
    visit: Visit,
    found: _Writing,
    *,
    queued: bool,
    failed: frozenset[str],
) -> Recorded:
    shard = keys.member_shard(config, visit.kind, visit.member)
    if not queued or shard.tag in failed:
        return Recorded(Outcome.FAILED, found.at, found.room_tag)
    # Arriving: on the site (no genuine cookie, or one from before Redis lost its data), or in
    # another room. Either way the next page must not show a snapshot read before this visit.
    arriving = (
        cookie is None
        or epochs.current().gone(cookie.epoch, config)
        or cookie.room != found.room_tag
    )
    outcome = Outcome.ARRIVED if arriving else Outcome.WRITTEN
    recorded = Recorded(outcome, found.at, found.room_tag, epochs.current().of(shard))
    if flusher.writes_at_once(config):
        visits.remember(config, visit, found.room_tag)
    return recorded


@dataclass(frozen=True)
class _Writing:
    """A visit about to be queued: what its cookie will say of it."""

    at: float
    room_tag: str


def _spared(
    visitor: Visitor | None,
    cookie: ThrottleCookie | None,
    config: Config,
    now: float,
    placement: Placement,
) -> Recorded | _Writing:
    """What recording a request, whose browser sent ``cookie``, comes to without a write (a
    ``Recorded``), or what its cookie will say once queued.

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
            kind = visitor.kind if visitor.user is None else "users"
            epoch = epochs.current().of(keys.member_shard(config, kind, visitor.member))
            return Recorded(Outcome.ARRIVED, entry[0] - config.throttle, entry[1], epoch)
    return _Writing(now, tag)


def _memory_spares(remembered: str, placement: Placement, tag: str, config: Config) -> bool:
    """Whether a visitor this process wrote within THROTTLE, in the room of tag ``remembered``,
    needs no write for this visit: one that places them nowhere new, or a page view in the same
    room on a site that uses no rooms (see ``_spared``)."""
    if placement.mode != GO:
        return True
    return remembered == tag and not rooms.in_use(config)


#: The ``Expires`` of a cookie handed out this second, by max-age: (second, max-age, text).
_expiry_text: tuple[int, int, str] = (0, 0, "")


def _expires(max_age: int) -> str:
    """What Django's ``set_cookie(max_age=…)`` writes as the cookie's ``Expires``, worked out
    once a second rather than formatted anew for every cookie handed out."""
    global _expiry_text  # noqa: PLW0603 (one tuple, swapped whole: safe across threads)
    second = int(time.time())
    cached = _expiry_text
    if cached[0] != second or cached[1] != max_age:
        cached = _expiry_text = (second, max_age, http_date(second + max_age))
    return cached[2]
