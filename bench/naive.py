"""The naive approach, as a baseline: one plain ZADD on every request, nothing else.

Users are stored by primary key and guests by the client address from ``X-Forwarded-For`` (the
rightmost entry, written by the one trusted proxy), scored by the time; there is no throttle, no
pseudonym, no counter and no failure handling.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.http import HttpRequest
    from django.http.response import HttpResponseBase


class NaiveZaddMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        self.client = redis.Redis.from_url(os.environ["REDIS_URL"])

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.user.is_authenticated:
            self.client.zadd("naive:users", {str(request.user.pk): time.time()})
        else:
            forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
            address = forwarded.rpartition(",")[2].strip() or request.META["REMOTE_ADDR"]
            self.client.zadd("naive:guests", {address: time.time()})
        return self.get_response(request)
