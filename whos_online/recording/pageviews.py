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
host, curl), a page view is a GET that is not an ``X-Requested-With`` request.

A page fetched ahead of time is no page view either, even with ``Sec-Fetch-Dest: document``:
the person may never look at it. Browsers say so with ``Sec-Purpose: prefetch`` (Chrome's
speculation rules, ``<link rel=prefetch>``; ``prefetch;prerender`` for a page rendered in the
background), and did with ``Purpose: prefetch`` (Chrome before ``Sec-Purpose``), ``X-Moz:
prefetch`` (Firefox before it) and ``X-Purpose: preview`` (Safari's thumbnails of Top Sites);
scripts say so with ``X-Sec-Purpose: prefetch`` (Turbo 8) and ``HX-Preloaded: true`` (htmx). A
page shown later from such a fetch sends no request: its reader is put in its room by the live
widget's "still here", or by their next page view. Nor is ``HEAD``, which asks for the headers of
a page without its content: a link checker, a monitor, a script, never a person reading.

A frame of the site's own pages (``iframe`` or ``frame`` with ``Sec-Fetch-Site: same-origin``) is
part of the page around it, not somewhere its person went: a CMS's preview panel, a widget the
site embeds in its own admin. It keeps its person where the page around it put them. A frame of
the site in another site's page is the site's page as that person sees it, and a page view.

Either way the answer must be a page, that is a 2xx ``text/html`` response: a redirect after a
form's POST, an error page, a 404 for a topic that does not exist, a download or a JSON reply
moves nobody. A 404 therefore never creates a room.

Some pages go to another page without a reload: a library fetches the next page with a script and
swaps it in, and changes the address bar itself. The request is a fetch (``Sec-Fetch-Dest:
empty``), but it stands for the browser's own navigation, and is a page view when the library
says it is one (``is_navigation``): htmx's boosted links and forms (``HX-Boosted: true``) and
its history restores (``HX-History-Restore-Request: true``), and Turbo Drive's visits (Turbo 8
sends ``X-Turbo-Request-Id`` on every request it makes; Turbo 7 sends nothing of its own but
its ``Accept``; neither is a visit with ``Turbo-Frame``, the request of one frame). The other
requests of these libraries (an htmx swap, a Turbo frame, any request of Unpoly, which says
nothing of whether it will change the address) are a page's own requests, even without Fetch
Metadata. A navigation that no request says is one (a frame that changes the address, Unpoly's,
a single-page app's router) is announced by the live client (``views.page_view``).

Whatever the request, the middleware keeps its person online: only the rooms and the page hits
(``COUNT_HITS``) count page views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from django.http import HttpRequest
    from django.http.response import HttpResponseBase

#: The ``Sec-Fetch-Dest`` values of a page the person is looking at.
PAGE_DESTINATIONS: Final = frozenset({"document", "iframe", "frame"})
#: Those of a page inside another page, which is no page view when that page is the site's own.
FRAMES: Final = frozenset({"iframe", "frame"})
#: The media types of a page.
PAGE_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})
#: The headers (as ``request.META`` names them) that say a page is fetched ahead of time, and
#: the words of theirs that do.
SPECULATIVE: Final = {
    "HTTP_SEC_PURPOSE": frozenset({"prefetch"}),
    "HTTP_PURPOSE": frozenset({"prefetch"}),
    "HTTP_X_MOZ": frozenset({"prefetch"}),
    "HTTP_X_PURPOSE": frozenset({"prefetch", "preview"}),
    # Turbo 8's prefetch of a link under the pointer (a script cannot set Sec-Purpose), and
    # htmx's preload extension's.
    "HTTP_X_SEC_PURPOSE": frozenset({"prefetch"}),
    "HTTP_HX_PRELOADED": frozenset({"true"}),
}
#: The headers of a script's request made by a library the site uses, which is no page view
#: unless ``is_navigation`` says so: htmx, Turbo (a frame's, or any of Turbo 8's), Unpoly.
LIBRARY_REQUESTS: Final = (
    "HTTP_HX_REQUEST",
    "HTTP_TURBO_FRAME",
    "HTTP_X_TURBO_REQUEST_ID",
    "HTTP_X_UP_VERSION",
)
#: What Turbo 7 sends as ``Accept`` with a visit (and, first, the Turbo Streams type with a form).
TURBO_7_ACCEPT: Final = "text/html, application/xhtml+xml"
TURBO_STREAM: Final = "text/vnd.turbo-stream.html"


def is_page_view(request: HttpRequest, response: HttpResponseBase) -> bool:
    """Whether ``request`` was a person opening a page (see the module's docstring)."""
    if not 200 <= response.status_code < 300:
        return False
    media_type = response.get("Content-Type", "").partition(";")[0].strip().lower()
    return media_type in PAGE_TYPES and may_be_page_view(request)


def may_be_page_view(request: HttpRequest) -> bool:
    """Whether ``request`` is a page view if its response is a page: what can be told before
    the view has answered (for the template tags, which render the answer)."""
    if request.method == "HEAD" or is_speculative(request):
        return False
    if is_navigation(request):
        return True
    destination = request.META.get("HTTP_SEC_FETCH_DEST")
    if destination is not None:
        destination = destination.lower()
        if destination in FRAMES:
            site: str = request.META.get("HTTP_SEC_FETCH_SITE", "")
            return site.lower() != "same-origin"
        return destination in PAGE_DESTINATIONS
    return (
        request.method == "GET"
        and request.META.get("HTTP_X_REQUESTED_WITH") is None
        and not any(header in request.META for header in LIBRARY_REQUESTS)
    )


def is_navigation(request: HttpRequest) -> bool:
    """Whether ``request`` is a script's request that stands for the browser's navigation to
    another page, which it replaces: htmx's boosted requests and history restores, Turbo Drive's
    visits (see the module's docstring)."""
    meta = request.META
    if _is_true(meta.get("HTTP_HX_BOOSTED")) or _is_true(
        meta.get("HTTP_HX_HISTORY_RESTORE_REQUEST")
    ):
        return True
    if "HTTP_TURBO_FRAME" in meta or "HTTP_X_REQUESTED_WITH" in meta or "HTTP_HX_REQUEST" in meta:
        return False
    accept: str = meta.get("HTTP_ACCEPT", "")
    if "HTTP_X_TURBO_REQUEST_ID" in meta:  # Turbo 8: a visit asks for a page
        return "text/html" in accept
    # Turbo 7 says nothing but its Accept (after the Turbo Streams type, for a form).
    return accept.removeprefix(f"{TURBO_STREAM}, ") == TURBO_7_ACCEPT


def _is_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def is_speculative(request: HttpRequest) -> bool:
    """Whether ``request`` fetches a page ahead of time, for a person who may never look at it
    (``SPECULATIVE``). ``Sec-Purpose`` is a list of tokens with parameters (``prefetch;
    prerender``): its words are compared one by one, not as a string."""
    meta = request.META
    return any(
        not words.isdisjoint(_words(meta[header]))
        for header, words in SPECULATIVE.items()
        if header in meta
    )


def _words(value: str) -> set[str]:
    """The words of a header such as ``prefetch;prerender, other``, in lower case."""
    return {word.strip().lower() for item in value.split(",") for word in item.split(";") if word}
