"""Records who is online, at most once per THROTTLE seconds per browser.

The decision to skip a request is made before the view runs, from the request's cookies and
headers alone: a throttled request runs no Redis command and no SQL query, and neither the
session nor the user is loaded. Recording happens after the view, so that a login or logout made
by the view is what gets recorded, so that a view marked ``not_recorded`` (known only once the
URL is resolved) can be left out, and so that the response tells whether the request was a page
view, which alone moves its person between rooms (``pageviews``); page hits are counted then
too, for the same reasons.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.utils.http import http_date

from whos_online.config.settings import Config, get_config
from whos_online.recording import guests, rooms, throttle, visits
from whos_online.recording.state import RequestState, state_of
from whos_online.store import epochs
from whos_online.store.items import STAYS_PUT, Placement

if TYPE_CHECKING:
    from django.http import HttpRequest
    from django.http.response import HttpResponseBase

    from whos_online.recording.visits import Recorded


class WhosOnlineMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(
        self,
        get_response: (
            Callable[[HttpRequest], HttpResponseBase]
            | Callable[[HttpRequest], Awaitable[HttpResponseBase]]
        ),
    ) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(self.get_response)
        if self.async_mode:
            markcoroutinefunction(self)
        # Invalid settings stop the server at start-up, not on the first request.
        get_config()

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.async_mode:
            return self.__acall__(request)
        config = get_config()
        now = time.time()
        state = state_of(request)
        decision = needs_recording(state, request.path_info, config, now)
        response = self.get_response(request)
        assert not isinstance(response, Awaitable)
        if decision is not Decision.IGNORE:
            placement = after_view(state, response, config, now, decision)
            if placement is not None:
                recorded = visits.record_request(state, config, now, placement)
                hand_out_cookie(state, response, config, recorded)
            else:
                visits.flush_if_stopping()
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        config = get_config()
        now = time.time()
        state = state_of(request)
        decision = needs_recording(state, request.path_info, config, now)
        response = self.get_response(request)
        assert isinstance(response, Awaitable)
        result = await response
        if decision is not Decision.IGNORE:
            placement = after_view(state, result, config, now, decision)
            if placement is not None:
                recorded = await visits.arecord_request(state, config, now, placement)
                hand_out_cookie(state, result, config, recorded)
            else:
                await visits.aflush_if_stopping()
        return result


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
    if not cookie.fresh(now) or epochs.epochs.outdated(cookie.epoch, config, visited):
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
    if recorded.outcome is visits.Outcome.FAILED:
        return
    request = state.request
    response.set_cookie(
        throttle.COOKIE_NAME,
        throttle.make_cookie(
            throttle.binding(guests.session_key(request), state.bound_address(config)),
            recorded.at,
            config.throttle,
            arrived=recorded.outcome is visits.Outcome.ARRIVED,
            room=recorded.room_tag,
            epoch=recorded.epoch,
        ),
        max_age=config.window,
        expires=_expires(config.window),
        httponly=True,
        samesite="Lax",
        secure=request.is_secure(),
    )


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
