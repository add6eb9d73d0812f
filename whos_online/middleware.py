"""Records who is online, at most once per THROTTLE seconds per browser.

The decision to skip a request is made before the view runs, from the request's cookies and
headers alone: a throttled request runs no Redis command and no SQL query, and neither the
session nor the user is loaded. Recording happens after the view, so that a login or logout made
by the view is what gets recorded.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings

from whos_online import api, identity, throttle
from whos_online.conf import Config, get_config

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
        needed = needs_recording(request, config, now)
        response = self.get_response(request)
        assert not isinstance(response, Awaitable)
        if needed:
            record(request, response, config, now)
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        config = get_config()
        now = time.time()
        needed = needs_recording(request, config, now)
        response = self.get_response(request)
        assert isinstance(response, Awaitable)
        result = await response
        if needed:
            # Loading the user and talking to Redis both block; keep them off the event loop.
            await sync_to_async(record)(request, result, config, now)
        return result


def needs_recording(request: HttpRequest, config: Config, now: float) -> bool:
    """Decide from cookies and headers alone whether this request should be recorded.

    Also counts the page view when ``COUNT_HITS`` is on, in memory: that costs no Redis call.
    """
    path = request.path_info
    if any(pattern.search(path) for pattern in config.ignore_paths):
        return False
    if config.count_hits:
        api.count_hit(now)
    if not config.throttle:
        return True
    cookie = request.COOKIES.get(throttle.COOKIE_NAME)
    session_cookie = request.COOKIES.get(settings.SESSION_COOKIE_NAME, "")
    binding = throttle.binding(session_cookie, _address(request, config))
    return not throttle.is_fresh(cookie, binding, now, config.throttle)


def record(request: HttpRequest, response: HttpResponseBase, config: Config, now: float) -> None:
    if not api.record_request(request, config, now) or not config.throttle:
        return
    response.set_cookie(
        throttle.COOKIE_NAME,
        throttle.make_cookie(_binding_after_view(request, config), now, config.throttle),
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
