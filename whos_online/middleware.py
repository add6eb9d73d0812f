"""Records who is online, at most once per THROTTLE seconds per browser.

The decision to skip a request is made before the view runs, from the request's cookies and
headers alone: a throttled request runs no Redis command and no SQL query, and neither the
session nor the user is loaded. Recording happens after the view, so that a login or logout made
by the view is what gets recorded, and so that a view marked ``not_recorded`` (known only once
the URL is resolved) can be left out; page hits are counted then too, for the same reason.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings

from whos_online import identity, recording, rooms, snapshots, throttle
from whos_online.conf import Config, get_config
from whos_online.decorators import is_not_recorded

if TYPE_CHECKING:
    from django.http import HttpRequest
    from django.http.response import HttpResponseBase


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
        decision = needs_recording(request, config, now)
        response = self.get_response(request)
        assert not isinstance(response, Awaitable)
        if decision and after_view(request, config, now, decision):
            record(request, response, config, now)
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        config = get_config()
        now = time.time()
        decision = needs_recording(request, config, now)
        response = self.get_response(request)
        assert isinstance(response, Awaitable)
        result = await response
        if decision and after_view(request, config, now, decision):
            recorded = await recording.arecord_request(request, config, now)
            hand_out_cookie(request, result, config, now, recorded)
        return result


#: What ``needs_recording`` decides before the view: leave the request alone (an ignored path),
#: record it unless the view put it in another room than its cookie's (THROTTLED), or record it.
IGNORE: Final = 0
THROTTLED: Final = 1
RECORD: Final = 2
#: The attribute on which the throttle cookie's room tag waits for the end of the view.
COOKIE_ROOM: Final = "_whos_online_cookie_room"


def needs_recording(request: HttpRequest, config: Config, now: float) -> int:
    """Decide from cookies and headers alone what to do after the view: IGNORE, THROTTLED or
    RECORD. Only the room, which the view sets, is left for after it."""
    path = request.path_info
    if any(pattern.search(path) for pattern in config.ignore_paths):
        return IGNORE
    if not config.throttle:
        return RECORD
    cookie = request.COOKIES.get(throttle.COOKIE_NAME)
    session_cookie = request.COOKIES.get(settings.SESSION_COOKIE_NAME, "")
    binding = throttle.binding(session_cookie, _address(request, config))
    expiry = throttle.fresh_expiry(cookie, binding, now, config.throttle)
    if expiry is None or cookie is None:
        return RECORD
    if throttle.arrived(cookie):
        snapshots.note_recorded(request, expiry - config.throttle)
    setattr(request, COOKIE_ROOM, throttle.cookie_room(cookie))
    return THROTTLED


def after_view(request: HttpRequest, config: Config, now: float, decision: int) -> bool:
    """Count the page hit (in memory, no Redis call) unless the view was ``not_recorded``, and
    say whether to record: a throttled request is recorded only when the view put it in another
    room than the one its cookie was issued for. Called unless the path is ignored."""
    if decision == THROTTLED:
        moved = rooms.room_tag(rooms.room_of(request)) != getattr(request, COOKIE_ROOM, "")
        if not moved and not config.count_hits:
            return False
    else:
        moved = True
    if is_not_recorded(request):
        return False
    if config.count_hits:
        recording.count_hit(now)
    return moved


def record(request: HttpRequest, response: HttpResponseBase, config: Config, now: float) -> None:
    hand_out_cookie(request, response, config, now, recording.record_request(request, config, now))


def hand_out_cookie(
    request: HttpRequest, response: HttpResponseBase, config: Config, now: float, recorded: int
) -> None:
    """Set the throttle cookie for a visit that was stored (``recorded`` is not FAILED)."""
    if recorded == recording.FAILED or not config.throttle:
        return
    response.set_cookie(
        throttle.COOKIE_NAME,
        throttle.make_cookie(
            _binding_after_view(request, config),
            now,
            config.throttle,
            arrived=recorded == recording.ARRIVED,
            room=rooms.room_tag(rooms.room_of(request)),
        ),
        max_age=config.throttle,
        httponly=True,
        samesite="Lax",
        secure=request.is_secure(),
    )


def _binding_after_view(request: HttpRequest, config: Config) -> str:
    # The view may have logged someone in or out, which gave the session a new key: bind the
    # cookie to the key the browser will send next, not the one it sent.
    session = getattr(request, "session", None)
    if session is not None:
        session_key = session.session_key or ""
    else:
        session_key = request.COOKIES.get(settings.SESSION_COOKIE_NAME, "")
    return throttle.binding(session_key, _address(request, config))


def _address(request: HttpRequest, config: Config) -> str:
    # Normalized, so that a proxy writing a fresh source port each time still matches the cookie.
    candidate = identity.forwarded_candidate(request, config.trusted_proxy_count)
    return identity.normalize_ip(candidate) or candidate
