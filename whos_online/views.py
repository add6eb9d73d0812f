"""What pages poll (the live widget's HTML and the JSON view of the counts); the staff
dashboard's views are in ``dashboard``.

The polled views record nobody, read Redis once, are publicly cacheable unless they name people
some viewers may not see, and fail open. A widget's refresh renders the tag itself, so that the
site's template and every language's plurals apply to it as to the page.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from django.core.exceptions import DisallowedHost
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse, HttpResponseBadRequest, HttpResponseForbidden
from django.template import Engine
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.cache import add_never_cache_headers, patch_cache_control
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST, require_safe

from whos_online.config.settings import get_config
from whos_online.decorators import mark_not_recorded, not_recorded
from whos_online.live.widget import (
    HTML_SAFE,
    MAX_WIDGETS,
    WidgetOptions,
    answer_widgets,
    answers_body,
    presence_query,
    read_for_widgets,
    render,
    stay_interval,
)
from whos_online.reading import viewer
from whos_online.reading.viewer import may_see_names, shows_names_to_everyone
from whos_online.recording import guests, rooms, throttle, visits
from whos_online.store.results import EMPTY_SNAPSHOT, Snapshot

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from django.http import HttpRequest

    from whos_online.config.settings import Config
    from whos_online.reading.viewer import Reader

    View = Callable[..., HttpResponse]


def counts_document(found: Snapshot | None, *, names: bool, room: str = "") -> dict[str, Any]:
    """The JSON view's document; ``found`` is None when Redis could not be read. A room's has
    its name, and none of the site's own figures (the peak, today's visitors)."""
    snapshot = EMPTY_SNAPSHOT if found is None else found
    counts = snapshot.counts
    document: dict[str, Any] = {
        "ok": found is not None,
        "users": counts.users,
        "guests": counts.guests,
        "bots": counts.bots,
        "total": counts.total,
    }
    if room:
        document["room"] = room
    else:
        peak = snapshot.peak
        document["peak"] = {"people": peak.people, "when": peak.when}
        document["visitors_today"] = snapshot.visitors
    if names:
        listed = snapshot.users
        document["names"] = [{"name": user.name, "url": user.url} for user in listed]
        document["more"] = snapshot.more
    return document


def _poll_cache_control(
    request: HttpRequest,
    response: HttpResponse,
    config: Config,
    *,
    names: bool,
    rooms: Iterable[str] = (),
    reader: Reader | None = None,
) -> None:
    """Public unless the answer names people that only some viewers may see, or shows a room
    (of ``rooms``; "" is the site) that ``ROOM_ACCESS`` lets only some viewers read, or that a
    token bound to the viewer's session opened (a shared cache would answer it to whoever has
    the URL), or counts its own reader in (``reader``)."""
    by_room = any(rooms)
    if (
        (names and not shows_names_to_everyone(config))
        or (by_room and config.room_access)
        or (by_room and guests.session_key(request, live=True))
        or (reader is not None and reader.added)
    ):
        patch_cache_control(response, private=True, max_age=config.json_max_age)
    else:
        patch_cache_control(response, public=True, max_age=config.json_max_age)


def _room_refused(request: HttpRequest, room: str, config: Config) -> HttpResponse | None:
    """A 403 for a reader who may not see who is in ``room`` (see ``viewer.may_read``)."""
    if not room or viewer.may_read(request, room, config):
        return None
    return HttpResponseForbidden(
        "This room is shown only with the token of a page that shows it.",
        content_type="text/plain; charset=utf-8",
    )


def _room_asked(request: HttpRequest, config: Config) -> str | HttpResponse:
    """The room of ``?room=`` ("" for the site), or the answer refusing it: 400 for a bad name,
    403 without the room's token or when ``ROOM_ACCESS`` says no."""
    raw = request.GET.get("room")
    try:
        room = "" if raw is None else rooms.check_room(raw)
    except ValueError as error:
        return HttpResponseBadRequest(str(error), content_type="text/plain; charset=utf-8")
    refused = _room_refused(request, room, config)
    return room if refused is None else refused


@not_recorded
@require_safe
def counts(request: HttpRequest) -> HttpResponse:
    """The counts as JSON; ``?room=name&token=…`` for a room's (400 for a bad name, 403 without
    the room's token, or when ``ROOM_ACCESS`` says no)."""
    config = get_config()
    name = _room_asked(request, config)
    if isinstance(name, HttpResponse):
        return name
    names = may_see_names(request, config)
    reader = viewer.reader_of(request, config, [name])
    found = viewer.read_shown(request, config, [name], names=names, reader=reader)[name]
    document = counts_document(found, names=names, room=name)
    body = json.dumps(document, cls=DjangoJSONEncoder)
    response = HttpResponse(body.translate(HTML_SAFE), content_type="application/json")
    _poll_cache_control(request, response, config, names=names, rooms=[name], reader=reader)
    return response


#: The header of the widget view saying whether Redis was read ("1") or not ("0", the widget
#: then shows zeros, which live.js does not swap in).
OK_HEADER: Final = "Whos-Online-Ok"


@not_recorded
@require_safe
def widget(request: HttpRequest) -> HttpResponse:
    """``{% whos_online live=True %}`` as the page would render it now: what live.js swaps in.

    Same names rule, Redis read, caching and fail-open as the JSON view; rendered in the page's
    language (``lang``), with the tag arguments the page's widget was given. live.js refreshes
    every widget of a page at once from ``widgets``; this view answers one, for pages and
    templates from before it, and for a site's own scripts.
    """
    config = get_config()
    try:
        options = WidgetOptions.from_query(request.GET)
    except ValueError as error:
        return HttpResponseBadRequest(str(error), content_type="text/plain; charset=utf-8")
    room = options.room or ""
    refused = _room_refused(request, room, config)
    if refused is not None:
        return refused
    names = may_see_names(request, config)
    shown = options.rooms_shown()
    reader = viewer.reader_of(request, config, shown)
    unread = read_for_widgets(request, config, shown, names=names, reader=reader)
    body, language = render(request, Engine.get_default(), options)
    response = HttpResponse(body)
    response[OK_HEADER] = "0" if unread else "1"
    if language:
        response["Content-Language"] = language
    _poll_cache_control(request, response, config, names=names, rooms=[room], reader=reader)
    return response


@not_recorded
@require_safe
def widgets(request: HttpRequest) -> HttpResponse:
    """Every live widget of a page, refreshed in one request: what live.js asks once per
    interval, however many ``{% whos_online live=True %}`` tags the page has.

    ``?widget=<query>&widget=<query>…``, each the query string of one widget's own URL (what
    the widget view takes, ``lang`` and a room's ``token`` included), at most ``MAX_WIDGETS``.
    The answer is JSON, ``{"widgets": [...]}``, one object per ``widget`` in the same order:
    ``{"status": 200, "ok": true, "html": "…"}`` with what the widget view would answer (``ok``
    false where Redis could not be read, the widget view's ``Whos-Online-Ok: 0``),
    ``{"status": 400, "error": "…"}`` for arguments the tag does not write, ``{"status": 403}``
    for a room whose token is refused (the page renews that widget's URLs and asks again): one
    widget's answer never holds back the others'. Every room and the site are read in one round
    trip. Cached as the widget view caches each answer: public only when none of them names
    people only some may see or shows a room read by a session's token or by ``ROOM_ACCESS``;
    never stored when one was refused, a verdict of the moment.
    """
    config = get_config()
    queries = request.GET.getlist("widget")
    if not 1 <= len(queries) <= MAX_WIDGETS:
        msg = f"Give 1 to {MAX_WIDGETS} widget= queries, not {len(queries)}."
        return HttpResponseBadRequest(msg, content_type="text/plain; charset=utf-8")
    read = answer_widgets(request, config, queries)
    response = HttpResponse(answers_body(read.answers), content_type="application/json")
    if any(answer["status"] == 403 for answer in read.answers):
        add_never_cache_headers(response)
    else:
        _poll_cache_control(
            request, response, config, names=read.names, rooms=read.shown, reader=read.reader
        )
    return response


@csrf_exempt  # sendBeacon cannot send Django's token; _from_this_site stands in for it
@require_POST
def presence(request: HttpRequest) -> HttpResponse:
    """What the live widget of a room says of its reader: still here (``?room=…&token=…``,
    recorded through the throttle like a page of that room, unless a later page put them in
    another), or gone (``&leave=1``, sent as the page is left: out of the room within
    ``LEAVE_GRACE`` seconds, if it is still theirs).

    Only the reader's own presence can change: who they are comes from their session and
    address, as for any visit. A page of another site cannot send it for them (Fetch Metadata,
    or the Origin header, must say the request comes from this site), nor for a room it was not
    shown (the room's token, or ``ROOM_ACCESS``). Leaving is bounded like recording: it acts only
    where the reader's throttle cookie (or, without one, this process's memory) says they were
    put in that room, and spends that cookie.
    """
    config = get_config()
    if not _from_this_site(request):
        return HttpResponseForbidden(
            "Only this site's pages say who is on them.", content_type="text/plain; charset=utf-8"
        )
    try:
        room = rooms.check_room(request.GET.get("room"))
    except ValueError as error:
        return HttpResponseBadRequest(str(error), content_type="text/plain; charset=utf-8")
    refused = _room_refused(request, room, config)
    if refused is not None:
        return refused
    response = HttpResponse(status=204)
    if request.GET.get("leave") == "1":
        mark_not_recorded(request)
        if visits.leave_room(request, config, room):
            response.delete_cookie(throttle.COOKIE_NAME, samesite="Lax")
    else:
        rooms.stay_in(request, room)
    return response


@csrf_exempt  # as presence: _from_this_site stands in for Django's token
@require_POST
def page_view(request: HttpRequest) -> HttpResponse:
    """A page's script says that its reader went to another page without a reload (a
    single-page app's router, a frame or a fragment that changed the address): a page view in
    ``?room=…&token=…``, or in no room without ``room``, recorded as the middleware records
    a page view (it moves its reader, and counts a hit with ``COUNT_HITS``).

    Only the reader's own presence can change, as with ``presence``: who they are comes from
    their session and address, the request must come from a page of this site, and a room
    needs its token (or ``ROOM_ACCESS``), so that nobody enters a room they were not shown.
    It costs what a page view costs: staying in a room writes nothing within ``THROTTLE``,
    going to another is one write. The answer gives a room's presence URL and interval, with
    which the page says its reader is still there, as a room's widget does.
    """
    config = get_config()
    if not _from_this_site(request):
        return HttpResponseForbidden(
            "Only this site's pages say who is on them.", content_type="text/plain; charset=utf-8"
        )
    room = _room_asked(request, config)
    if isinstance(room, HttpResponse):
        return room
    rooms.announce_page_view(request, room)
    document: dict[str, Any] = {}
    if room:
        document["presence"] = f"{reverse('whos_online:presence')}?{presence_query(request, room)}"
        document["stay"] = stay_interval(config)
    response = HttpResponse(
        json.dumps(document).translate(HTML_SAFE), content_type="application/json"
    )
    add_never_cache_headers(response)
    return response


#: How long a browser keeps ``live_check``'s script, in seconds.
LIVE_CHECK_MAX_AGE: Final = 86_400


@not_recorded
@require_safe
def live_check(request: HttpRequest) -> HttpResponse:
    """The script that says in the browser's console when live.js did not load: served by
    whos_online itself, where the site's static files may not be (see the script)."""
    body = render_to_string("whos_online/live-check.js")
    response = HttpResponse(body, content_type="text/javascript; charset=utf-8")
    patch_cache_control(response, public=True, max_age=LIVE_CHECK_MAX_AGE)
    return response


def _from_this_site(request: HttpRequest) -> bool:
    """Whether a browser says ``request`` comes from a page of this site. A client that sends
    neither Fetch Metadata nor an Origin is no browser another site's page could drive."""
    site: str | None = request.META.get("HTTP_SEC_FETCH_SITE")
    if site is not None:
        return site == "same-origin"
    origin: str | None = request.META.get("HTTP_ORIGIN")
    if origin is None:
        return True
    try:
        return origin == f"{request.scheme}://{request.get_host()}"
    except DisallowedHost:
        return False
