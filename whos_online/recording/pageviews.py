"""Which requests are page views: only a page view moves its person into a room or out of one.

A real site's pages make requests of their own once they have loaded: a bookmark or "mark as
read" POST, a notifications poll, analytics, htmx swaps, a single-page app's API calls. Each of
them keeps its person online, but none is the person going somewhere else: if they moved people
between rooms, every page that makes one would take its own reader out of its room a moment after
they arrived.

The browser says what a request is for with Fetch Metadata: ``Sec-Fetch-Dest: document`` for a
page in a tab, ``iframe`` (or ``frame``) for one inside a page, and something else (``empty`` for
fetch and XHR, ``image``, ``script``…) for the rest. Every current browser sends it on every
request to a secure origin or to localhost. Without it (an older browser, plain HTTP on another
host, curl), a page view is a GET or HEAD that is not an ``X-Requested-With`` request.

Either way the answer must be a page, that is a 2xx ``text/html`` response: a redirect after a
form's POST, an error page, a 404 for a topic that does not exist, a download or a JSON reply
moves nobody. A 404 therefore never creates a room.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from django.http import HttpRequest
    from django.http.response import HttpResponseBase

#: The ``Sec-Fetch-Dest`` values of a page the person is looking at.
PAGE_DESTINATIONS: Final = frozenset({"document", "iframe", "frame"})
#: The media types of a page.
PAGE_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})
#: What a page view's request method may be when the browser sends no Fetch Metadata.
SAFE_METHODS: Final = frozenset({"GET", "HEAD"})


def is_page_view(request: HttpRequest, response: HttpResponseBase) -> bool:
    """Whether ``request`` was a person opening a page (see the module's docstring)."""
    if not 200 <= response.status_code < 300:
        return False
    media_type = response.get("Content-Type", "").partition(";")[0].strip().lower()
    return media_type in PAGE_TYPES and may_be_page_view(request)


def may_be_page_view(request: HttpRequest) -> bool:
    """Whether ``request`` is a page view if its response is a page: what can be told before
    the view has answered (for the template tags, which render the answer)."""
    destination = request.META.get("HTTP_SEC_FETCH_DEST")
    if destination is not None:
        return destination.lower() in PAGE_DESTINATIONS
    return (
        request.method in SAFE_METHODS
        and request.META.get("HTTP_X_REQUESTED_WITH") is None
        and request.META.get("HTTP_HX_REQUEST") is None
    )
