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

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from whos_online.config.settings import get_config
from whos_online.recording import requests, visits
from whos_online.recording.requests import Decision

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
        state, decision = requests.before_view(request, config, now)
        # Not an Awaitable in sync mode (asserting so asks an ABC, on every request).
        response = cast("HttpResponseBase", self.get_response(request))
        if decision is not Decision.IGNORE:
            placement = requests.after_view(state, response, config, now, decision)
            if placement is not None:
                recorded = requests.record_request(state, config, now, placement)
                requests.hand_out_cookie(state, response, config, recorded)
            else:
                visits.flush_if_stopping()
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        config = get_config()
        now = time.time()
        state, decision = requests.before_view(request, config, now)
        response = self.get_response(request)
        assert isinstance(response, Awaitable)
        result = await response
        if decision is not Decision.IGNORE:
            placement = requests.after_view(state, result, config, now, decision)
            if placement is not None:
                recorded = await requests.arecord_request(state, config, now, placement)
                requests.hand_out_cookie(state, result, config, recorded)
            else:
                await visits.aflush_if_stopping()
        return result
