"""A middleware that can only run synchronously, as many a site's own and third-party ones do."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.http import HttpRequest
    from django.http.response import HttpResponseBase


def sync_only_middleware(
    get_response: Callable[[HttpRequest], HttpResponseBase],
) -> Callable[[HttpRequest], HttpResponseBase]:
    """Below whos_online in ``MIDDLEWARE``, it makes Django run whos_online's middleware in sync
    mode under ASGI (in a thread, through ``sync_to_async``); it marks each response, so that a
    test can see it ran."""

    def middleware(request: HttpRequest) -> HttpResponseBase:
        response = get_response(request)
        response["X-Sync-Only"] = "1"
        return response

    return middleware
