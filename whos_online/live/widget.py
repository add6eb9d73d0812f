"""The live widget's URLs: what the tag puts in the page, and what the widget view reads back.

``{% whos_online live=True %}`` refreshes from the widget view, which renders the same tag with
the same arguments in the page's language: the URL carries them, and a room's its token (and so
does the URL of the presence view, which a room's page tells it is still shown or left).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlencode

from django.conf import settings
from django.utils import translation

from whos_online.reading import access
from whos_online.recording import rooms

if TYPE_CHECKING:
    from django.http import HttpRequest, QueryDict

    from whos_online.config.settings import Config

#: The longest refresh= a widget URL may ask for: a day.
MAX_REFRESH: Final = 86_400
_FLAGS: Final = {"0": False, "1": True}


def widget_query(
    request: HttpRequest | None,
    *,
    peak: bool,
    visitors: bool,
    refresh: int,
    room: str | None = None,
    site: bool = False,
) -> str:
    """The query string of the widget view for these tag arguments, in the current language;
    a room's carries its token for the viewer of ``request`` (and ``site=1`` when the widget
    shows the site's list too)."""
    query: dict[str, str | int] = {
        "peak": int(peak),
        "visitors": int(visitors),
        "refresh": refresh,
        "lang": translation.get_language() or settings.LANGUAGE_CODE,
    }
    if room is not None:
        query["room"] = room
        query["token"] = access.room_token(room, request)
        if site:
            query["site"] = 1
    return urlencode(query)


def presence_query(request: HttpRequest | None, room: str) -> str:
    """The query string of the presence view for ``room``, for the viewer of ``request``."""
    return urlencode({"room": room, "token": access.room_token(room, request)})


def stay_interval(config: Config) -> int:
    """How often, in seconds, a room's page says its reader is still there: once the throttle
    cookie that spares the write has run out, and no more often than the widgets refresh."""
    return max(config.throttle + 1, config.refresh_interval)


def widget_arguments(query: QueryDict, config: Config) -> dict[str, Any]:
    """The tag's arguments from ``widget_query``'s query string; ValueError says what is wrong."""
    arguments: dict[str, Any] = {}
    for name, default in (("peak", True), ("visitors", False), ("site", False)):
        raw = query.get(name)
        if raw is not None and raw not in _FLAGS:
            msg = f"{name} must be 0 or 1."
            raise ValueError(msg)
        arguments[name] = default if raw is None else _FLAGS[raw]
    raw = query.get("refresh")
    if raw is None:
        arguments["refresh"] = config.refresh_interval
    elif raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_REFRESH:
        arguments["refresh"] = int(raw)
    else:
        msg = f"refresh must be a whole number of seconds from 1 to {MAX_REFRESH}."
        raise ValueError(msg)
    room = query.get("room")
    arguments["room"] = None if room is None else rooms.check_room(room)
    return arguments


def page_language(query: QueryDict) -> str | None:
    """The language of the page that carries the widget, if this site still offers it.

    It is taken as the page had it (``en-us``, not the ``en`` it falls back to), so that the
    refresh carries the page's own URL. A language the site no longer offers (a page left open
    across a deploy) is not an error: the widget is then rendered in the language of the
    request, as any page would be.
    """
    raw = query.get("lang")
    if not raw or not translation.check_for_language(raw):
        return None
    if raw == settings.LANGUAGE_CODE:
        return raw
    try:
        translation.get_supported_language_variant(raw)
    except LookupError:
        return None
    return raw
