"""Rooms: who is on one page ("3 people are reading this topic"), besides who is on the site.

A request is in the room ``ROOMS`` names for its URL, or the one its view sets (``set_room``,
which wins); a person is in the room of their latest page view (``is_page_view``), and the throttle
cookie's room tag makes staying in a room cost nothing.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
from typing import TYPE_CHECKING, Final

from whos_online.config.process import PerProcess
from whos_online.config.settings import get_config, secret_key
from whos_online.recording.state import state_of
from whos_online.store.items import STAY, Placement

if TYPE_CHECKING:
    from django.http import HttpRequest
    from django.http.response import HttpResponseBase

    from whos_online.config.settings import Config
    from whos_online.recording.state import RequestState


logger = logging.getLogger("whos_online")

#: Longest room name, in characters: a name becomes part of Redis keys.
MAX_ROOM_LENGTH: Final = 200


def check_room(name: object) -> str:
    """``name`` if it is a room name (text of 1 to ``MAX_ROOM_LENGTH`` characters)."""
    if not isinstance(name, str):
        msg = f"A room name is text, not {type(name).__name__}."
        raise ValueError(msg)
    if not 1 <= len(name) <= MAX_ROOM_LENGTH:
        msg = f"A room name has 1 to {MAX_ROOM_LENGTH} characters, not {len(name)}."
        raise ValueError(msg)
    # A lone surrogate cannot be sent to Redis.
    return name.encode("utf-8", "replace").decode()


def set_room(request: HttpRequest, name: str | None, *, title: str = "") -> None:
    """Put the person making ``request`` in room ``name`` (see the module's docstring), which
    ``title`` names for people (the dashboard shows it; the name stays the room's identity).

    ``None`` puts the request in no room, whatever ``ROOMS`` says: for a response that is not
    the page's content, such as a login or password form shown in its place, whose viewer must
    not be counted among the page's readers."""
    state = state_of(request)
    if name is None:
        state.room, state.room_title = "", ""
        return
    state.room = check_room(name)
    state.room_title = check_title(title)
    _usage.get().seen = True


def stay_in(request: HttpRequest, room: str) -> None:
    """Record the person making ``request`` in ``room`` unless a later page of theirs put them in
    another: a page's own word that its reader is still on it (``views.presence``)."""
    state_of(request).stay = Placement(check_room(room), STAY)


def announce_page_view(request: HttpRequest, room: str) -> None:
    """Take ``request`` as a page view in ``room`` ("" for none): a page's script says its reader
    went to another page without a reload (``views.page_view``)."""
    state_of(request).announced = check_room(room) if room else ""


class _Usage:
    """Whether this process has seen a request in a room (``in_use``)."""

    seen = False


_usage: Final = PerProcess(_Usage)


def in_use(config: Config) -> bool:
    """Whether the site puts requests in rooms: ``ROOMS`` says so, or a view of it did in this
    process. Until then a page view moves nobody between rooms, whichever process serves it."""
    return bool(config.rooms) or _usage.get().seen


def room_of(state: RequestState) -> str:
    """The room of the request of ``state``, or "" for none: the one its view set, else the one
    ``ROOMS`` gives its URL (once the URL is resolved, that is from the view on)."""
    if state.room is not None:
        return state.room
    if state.room_by_url is not None:
        return state.room_by_url
    if getattr(state.request, "resolver_match", None) is None:
        return ""  # not resolved yet (or no URL matched): not worth keeping
    room, title = room_by_url(state.request, get_config())
    state.room_by_url, state.room_title = room, title
    if room:
        _usage.get().seen = True
    return room


def room_by_url(request: HttpRequest, config: Config) -> tuple[str, str]:
    """The room ``ROOMS`` names for the URL ``request`` resolved to, and its title ("" for
    none of either).

    An entry that makes no room name (a capture too long, a function that fails or returns
    something else) puts the request in no room rather than failing it: the system checks
    report entries that name captures the URL does not have, and a function's failure is
    logged.
    """
    match = request.resolver_match
    if not config.rooms or match is None:
        return "", ""
    rule = config.rooms.get(match.view_name)
    if rule is None:
        return "", ""
    try:
        room, title = rule.room(request, match)
        return (check_room(room), check_title(title)) if room else ("", "")
    except (ValueError, TypeError):
        return "", ""
    except Exception:
        logger.exception("whos_online: the ROOMS function for %r failed", match.view_name)
        return "", ""


#: Longest room title, in characters.
MAX_TITLE_LENGTH: Final = 200


def check_title(title: object) -> str:
    """``title`` as a room's title: text, cut to ``MAX_TITLE_LENGTH`` characters."""
    if not isinstance(title, str):
        msg = f"A room title is text, not {type(title).__name__}."
        raise TypeError(msg)
    return title[:MAX_TITLE_LENGTH].encode("utf-8", "replace").decode()


def room_tag(room: str) -> str:
    """What the throttle cookie carries of ``room``: 8 characters of a keyed hash ("" for no
    room). Two rooms that share a tag (one pair in 2^48) would let a move between them wait for
    the cookie to expire, which is the cost of a cookie that grows by 9 characters only."""
    return _tag(room, secret_key()) if room else ""


@functools.lru_cache(maxsize=4096)
def _tag(room: str, secret: str) -> str:
    key = hashlib.blake2b(secret.encode(), person=b"whos_online.rm", digest_size=32).digest()
    digest = hashlib.blake2b(room.encode(), key=key, digest_size=6).digest()
    return base64.urlsafe_b64encode(digest).decode()


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
#: Every header but ``Accept`` that ``is_speculative`` and ``is_navigation`` read: a request
#: with none of them is neither.
_SCRIPT_HEADERS: Final = frozenset(
    {
        *SPECULATIVE,
        *LIBRARY_REQUESTS,
        "HTTP_HX_BOOSTED",
        "HTTP_HX_HISTORY_RESTORE_REQUEST",
        "HTTP_X_REQUESTED_WITH",
    }
)
#: What Turbo 7 sends as ``Accept`` with a visit (and, first, the Turbo Streams type with a form).
TURBO_7_ACCEPT: Final = "text/html, application/xhtml+xml"
TURBO_STREAM: Final = "text/vnd.turbo-stream.html"
_TURBO_STREAM_FIRST: Final = f"{TURBO_STREAM}, "


def is_page_view(request: HttpRequest, response: HttpResponseBase) -> bool:
    """Whether ``request`` was a person opening a page (see the module's docstring)."""
    if not 200 <= response.status_code < 300:
        return False
    return _is_page_type(response.get("Content-Type", "")) and may_be_page_view(request)


@functools.lru_cache(maxsize=64)
def _is_page_type(content_type: str) -> bool:
    """Whether a response of ``content_type`` is a page. The site's views, not its clients,
    choose the few values this sees, so each is parsed once per process."""
    return content_type.partition(";")[0].strip().lower() in PAGE_TYPES


def may_be_page_view(request: HttpRequest) -> bool:
    """Whether ``request`` is a page view if its response is a page: what can be told before
    the view has answered (for the template tags, which render the answer)."""
    if request.method == "HEAD":
        return False
    meta = request.META
    if meta.keys().isdisjoint(_SCRIPT_HEADERS):  # one look, for most of a browser's requests
        return _is_turbo_7_visit(meta.get("HTTP_ACCEPT", "")) or _by_destination(request, True)
    if is_speculative(request):
        return False
    return is_navigation(request) or _by_destination(request, False)


def _by_destination(request: HttpRequest, plain: bool) -> bool:
    """What ``Sec-Fetch-Dest`` says, or without it, whether the request is a plain ``GET`` (no
    library's request: ``plain`` says none of their headers is there)."""
    meta = request.META
    destination = meta.get("HTTP_SEC_FETCH_DEST")
    if destination is not None:
        destination = destination.lower()
        if destination in FRAMES:
            site: str = meta.get("HTTP_SEC_FETCH_SITE", "")
            return site.lower() != "same-origin"
        return destination in PAGE_DESTINATIONS
    return request.method == "GET" and (
        plain
        or (
            meta.get("HTTP_X_REQUESTED_WITH") is None
            and not any(header in meta for header in LIBRARY_REQUESTS)
        )
    )


def is_navigation(request: HttpRequest) -> bool:
    """Whether ``request`` is a script's request that stands for the browser's navigation to
    another page, which it replaces: htmx's boosted requests and history restores, Turbo Drive's
    visits (see the module's docstring)."""
    meta = request.META
    boosted, restored = meta.get("HTTP_HX_BOOSTED"), meta.get("HTTP_HX_HISTORY_RESTORE_REQUEST")
    if (boosted or restored) and (_is_true(boosted) or _is_true(restored)):
        return True
    if "HTTP_TURBO_FRAME" in meta or "HTTP_X_REQUESTED_WITH" in meta or "HTTP_HX_REQUEST" in meta:
        return False
    accept: str = meta.get("HTTP_ACCEPT", "")
    if "HTTP_X_TURBO_REQUEST_ID" in meta:  # Turbo 8: a visit asks for a page
        return "text/html" in accept
    return _is_turbo_7_visit(accept)


def _is_turbo_7_visit(accept: str) -> bool:
    """Turbo 7 says nothing of a visit but its Accept (after the Turbo Streams type, for a
    form)."""
    return accept.removeprefix(_TURBO_STREAM_FIRST) == TURBO_7_ACCEPT


def _is_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def is_speculative(request: HttpRequest) -> bool:
    """Whether ``request`` fetches a page ahead of time, for a person who may never look at it
    (``SPECULATIVE``). ``Sec-Purpose`` is a list of tokens with parameters (``prefetch;
    prerender``): its words are compared one by one, not as a string."""
    meta = request.META
    for header, words in SPECULATIVE.items():  # a loop: every request asks, most have none
        value = meta.get(header)
        if value is not None and not words.isdisjoint(_words(value)):
            return True
    return False


def _words(value: str) -> set[str]:
    """The words of a header such as ``prefetch;prerender, other``, in lower case."""
    return {word.strip().lower() for item in value.split(",") for word in item.split(";") if word}
