"""``{% whos_online %}``, ``{% online_count %}`` and ``{% last_seen user %}``.

Thin wrappers over the API; a page that uses several reads Redis once, the snapshot being kept on
the request. A live widget's refresh renders this same tag, so that its sentence is written in one
template (``whos_online/online.html``); it names people only to those ``SHOW_NAMES_TO`` allows.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from html import escape
from typing import TYPE_CHECKING, Any

from django import template
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.template.base import render_value_in_context
from django.urls import NoReverseMatch, reverse
from django.utils.functional import SimpleLazyObject
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, ngettext

from whos_online import api
from whos_online.config.rules import is_staff
from whos_online.config.settings import get_config
from whos_online.live.widget import WidgetOptions, presence_query, stay_interval, with_options
from whos_online.reading import snapshots, viewer
from whos_online.reading.viewer import may_see_names
from whos_online.recording import rooms
from whos_online.recording.state import state_of
from whos_online.store.results import EMPTY_SNAPSHOT, ListedUser, OnlineCounts, Snapshot

if TYPE_CHECKING:
    from datetime import datetime

    from django.http import HttpRequest

    from whos_online.config.settings import Config

register = template.Library()
logger = logging.getLogger("whos_online")

#: Set once the missing URLs have been logged, so that a misconfigured site logs it once.
_unmounted_logged = False


def _snapshot(context: template.Context, room: str | None = None) -> Snapshot:
    """The snapshot of the site (or of ``room``) for this page, its viewer counted in
    (``whos_online.reading.viewer``): one read however many tags."""
    return _snapshots(context, [room])[0]


def _snapshots(context: template.Context, shown: list[str | None]) -> list[Snapshot]:
    """``_snapshot`` of each of ``shown`` (None for the site): those the page has not read yet
    are read together, in one round trip."""
    request = context.get("request")
    names = ["" if room is None else rooms.check_room(room) for room in shown]
    config = get_config()
    found = {name: snapshots.of_request(request, name) for name in names}
    missing = [name for name, kept in found.items() if kept is None]
    if missing:
        read = snapshots.read_many(
            config.display_limit,
            missing,
            max_age=config.snapshot_max_age,
            readers=viewer.sought_on_page(request, config, missing),
        )
        for name, one in read.items():
            if one is not None and request is not None:
                snapshots.keep_on_request(request, one, name)
            found[name] = one
    # Redis could not be read: EMPTY_SNAPSHOT, not kept, so that the next render can show Redis
    # again once it is back. Nor is the viewer shown alone, as if nobody else were online.
    return [
        EMPTY_SNAPSHOT
        if (one := found[name]) is None
        else viewer.with_viewer(one, request, config, name)
        for name in names
    ]


def _room_argument(context: template.Context, room: str | None, here: object) -> str | None:
    """The room a tag shows: ``room=``, or with ``here=True`` the room of the page's request
    (None, the site, for a request in no room)."""
    if not here:
        return room
    if room is not None:
        msg = "whos_online tags take room= or here=True, not both."
        raise template.TemplateSyntaxError(msg)
    request = context.get("request")
    return (rooms.room_of(state_of(request)) or None) if request is not None else None


@register.inclusion_tag("whos_online/online.html", takes_context=True)
@with_options
def whos_online(
    context: template.Context,
    *,
    live: bool = False,
    here: bool = False,
    navigations: bool = False,
    **given: Any,
) -> dict[str, Any]:
    """Render "Who's online: alice, bob, 3 more and 12 guests" (hidden users are not named).

    ``peak=False`` leaves out "Most people ever online was N on DATE"; ``visitors=True`` adds
    today's unique visitors. Both come from the same single read as the names. ``live=True``
    refreshes the counts every ``REFRESH_INTERVAL`` seconds, ``refresh=N`` every N seconds.
    ``room=name`` shows who is in that room instead (a room has no peak or visitors of its own),
    and ``here=True`` who is in the room of the page (from ``ROOMS``, ``set_room`` or
    ``in_room``; the site, for a page in no room). ``site=True`` shows the site's list too,
    below the room's, with the site's peak and visitors: both from one read.
    ``navigations=True`` (with ``live``) has the page announce as page views the navigations its
    scripts make without a reload (``history.pushState``, the back button): see live.js.
    The options beside ``live``, ``here`` and ``navigations`` are the fields of
    ``WidgetOptions`` (``live.widget``), which its refreshes carry.
    """
    config = get_config()
    options = WidgetOptions(**given)
    room = _room_argument(context, options.room, here)
    # The site's list beside a room's: a tag that shows the site already shows it, once.
    site = bool(options.site) and room is not None
    found, *beside = _snapshots(context, [room, None] if site else [room])
    peak, visitors = options.peak, options.visitors
    if room is not None and not site:
        peak = visitors = False
    figures = beside[0] if beside else found  # the site's, whose peak and visitors are shown
    wants_live = live or options.refresh is not None
    shown = (
        _live(
            context.get("request"),
            config,
            replace(options, peak=peak, visitors=visitors, room=room, site=site),
            navigations=navigations,
        )
        if wants_live
        else None
    )
    # Asked for live, the widget names people only to whom SHOW_NAMES_TO allows, even when it
    # falls back to the static widget: a URLconf slip must not show the names it restricts.
    names = not wants_live or may_see_names(context.get("request"), config)
    return {
        **_listing(found, named=names),
        "site": _listing(beside[0], named=names) if beside else None,
        "peak": figures.peak if peak else None,
        "visitors": figures.visitors if visitors else None,
        "live": shown,
        "room": room,
    }


def _listing(found: Snapshot, *, named: bool) -> dict[str, Any]:
    """One list of the widget, "alice, bob, 3 more and 12 guests", as online.html takes it:
    ``names`` (the HTML the default template shows), ``counts``, ``more``, and for templates
    that override it ``users`` and ``parts``, built only if a template asks for them."""
    counts = found.counts
    listed = found.listed if named else []
    more = found.more if named else 0
    texts = _count_texts(more, counts, named=named)
    # A list of DISPLAY_LIMIT users is only built if a template asks for it.
    users = SimpleLazyObject(lambda: found.users if named else [])
    parts = SimpleLazyObject(lambda: [(user, "") for user in users] + [(None, t) for t in texts])
    return {
        "users": users,
        "more": more,
        "counts": counts,
        "parts": parts,
        "names": _names_html(listed, texts),
    }


def _live(
    request: HttpRequest | None,
    config: Config,
    options: WidgetOptions,
    *,
    navigations: object = False,
) -> dict[str, Any] | None:
    """What live.js needs, or None to render the static widget when the URLs are missing."""
    refresh: object = options.refresh
    if refresh is None:
        refresh = config.refresh_interval
    elif isinstance(refresh, bool) or not isinstance(refresh, int) or refresh < 1:
        msg = (
            f"whos_online refresh= takes a whole number of seconds of at least 1, not {refresh!r}."
        )
        raise template.TemplateSyntaxError(msg)
    try:
        url = reverse("whos_online:widget")
    except NoReverseMatch:
        global _unmounted_logged  # noqa: PLW0603 - one warning per process, not per page
        msg = (
            "{% whos_online live=True %} refreshes from whos_online's widget view, but "
            "whos_online.urls is not in the URLconf: add "
            'path("online/", include("whos_online.urls")) to your urlpatterns.'
        )
        if settings.DEBUG:
            raise ImproperlyConfigured(msg) from None
        if not _unmounted_logged:
            _unmounted_logged = True
            logger.warning("%s The widget is shown without refreshes.", msg)
        return None
    shown: dict[str, Any] = {
        "url": f"{url}?{replace(options, refresh=refresh).query(request)}",
        "refresh": refresh,
        # Where live.js refreshes every widget of the page at once (see views.widgets).
        "widgets": reverse("whos_online:widgets"),
        # Where it announces a page view the page's script made without a reload.
        "page_view": reverse("whos_online:page_view"),
        "viewed": _page_view_mark(request),
        # What says in the console when live.js could not be loaded (a static file).
        "check": reverse("whos_online:live_check"),
        "navigations": bool(navigations),
    }
    if config.live_updates:
        # Where it follows them as they change instead, under ASGI (see live.streaming; under
        # WSGI the view says 204 and the page polls).
        shown["stream"] = reverse("whos_online:stream")
    room = options.room
    if room is not None:
        # The reader of a room's page tells it they are still there while the page is shown,
        # once their throttle cookie has run out, and that they left as they leave.
        shown["presence"] = f"{reverse('whos_online:presence')}?{presence_query(request, room)}"
        shown["stay"] = stay_interval(config)
        shown["renew"] = viewer.renew_in(request, config.room_token_max_age)
    return shown


def _page_view_mark(request: HttpRequest | None) -> str:
    """What tells live.js that the request rendering the widget is a page view the middleware
    records ("" for one it does not): a mark of its own, the same for the request's widgets,
    so that the page does not announce it again (a boosted navigation's page, whose address
    the library sets as it swaps the page in)."""
    if request is None:
        return ""
    state = state_of(request)
    if not state.seen or state.is_not_recorded() or not rooms.may_be_page_view(request):
        return ""
    return state.page_view_mark()


def _count_texts(more: int, counts: OnlineCounts, *, named: bool) -> list[str]:
    """The sentence's counted parts: "3 more", and "2 users" where users are not named."""
    texts = []
    if more:
        texts.append(ngettext("%(count)d more", "%(count)d more", more) % {"count": more})
    if not named and counts.users:
        texts.append(
            ngettext("%(count)d user", "%(count)d users", counts.users) % {"count": counts.users}
        )
    if counts.guests:
        texts.append(
            ngettext("%(count)d guest", "%(count)d guests", counts.guests)
            % {"count": counts.guests}
        )
    if counts.bots:
        texts.append(
            ngettext("%(count)d bot", "%(count)d bots", counts.bots) % {"count": counts.bots}
        )
    return texts


def _names_html(listed: list[ListedUser], texts: list[str]) -> SafeString:
    """The sentence's list: "alice, bob, 3 more and 12 guests", names linked to their profile.

    Built here rather than by a loop in the template, which took about 30 us per name (the list
    has up to DISPLAY_LIMIT of them, on every page). Every name, URL and text is escaped with
    ``html.escape``, which is what Django's autoescaping runs (``django.utils.html.escape``
    without its wrapper for lazy strings, which cost more than the escaping): the markup is the
    same as the template loop made.
    """
    shown = [_user_html(row.name, row.url) for row in listed] + [escape(t) for t in texts]
    if len(shown) < 2:
        return mark_safe("".join(shown))  # noqa: S308 (each part is escaped)
    last = escape(gettext("and"))
    return mark_safe(f"{', '.join(shown[:-1])} {last} {shown[-1]}")  # noqa: S308 (as above)


def _user_html(name: str, url: str) -> str:
    # dir="auto" isolates the name: whatever direction its letters take stays inside it.
    if url:
        return f'<a class="whos-online-user" href="{escape(url)}" dir="auto">{escape(name)}</a>'
    return f'<span class="whos-online-user" dir="auto">{escape(name)}</span>'


@register.simple_tag(takes_context=True)
def online_count(
    context: template.Context, kind: str = "total", room: str | None = None, here: bool = False
) -> int:
    """How many are online (in ``room``, if given, or with ``here=True`` in the room of the
    page): ``total`` (users and guests), ``users``, ``guests`` or ``bots``."""
    counts = _snapshot(context, _room_argument(context, room, here)).counts
    if kind not in counts._fields:
        msg = f"online_count takes one of {', '.join(counts._fields)}, not {kind!r}."
        raise template.TemplateSyntaxError(msg)
    return int(getattr(counts, kind))


class LastSeenNode(template.Node):
    def __init__(self, user: template.base.FilterExpression, target: str | None) -> None:
        self.user = user
        self.target = target

    def render(self, context: template.Context) -> str:
        user = self.user.resolve(context)
        seen: datetime | None = None
        if (
            user is not None
            and getattr(user, "is_authenticated", False)
            and _may_see_presence_of(user, context.get("request"))
        ):
            seen = api.last_seen(user)
        if self.target is not None:
            context[self.target] = seen
            return ""
        # Rendered like {{ value }}: in the current time zone, format and language.
        return "" if seen is None else render_value_in_context(seen, context)


def _may_see_presence_of(user: Any, request: HttpRequest | None) -> bool:
    """Whether the viewer making ``request`` may see when ``user`` was last seen: always, unless
    ``HIDE_USER`` hides ``user``; then only ``user`` themselves and active staff may.

    The viewer is the request's user, never a ``user`` variable of the context, which a profile
    page often sets to the profile's owner. It is only looked at for a hidden user, so that
    showing everyone else does not load the session. Without a request, nobody is the viewer.
    """
    config = get_config()
    if config.hide_user is None or not config.hide_user(user):
        return True
    viewer = getattr(request, "user", None)
    if viewer is None or not viewer.is_authenticated:
        return False
    return bool(viewer.pk == user.pk or is_staff(viewer))


@register.tag
def last_seen(parser: template.base.Parser, token: template.base.Token) -> LastSeenNode:
    """``{% last_seen user %}`` renders when the user was last seen (or nothing);
    ``{% last_seen user as seen %}`` stores the aware datetime, or None, in ``seen``.

    Of a user ``HIDE_USER`` hides, it shows nothing (None) except to that user and to staff:
    a profile page must not tell visitors when an invisible user was around."""
    bits = token.split_contents()
    if len(bits) == 2:
        return LastSeenNode(parser.compile_filter(bits[1]), None)
    if len(bits) == 4 and bits[2] == "as":
        return LastSeenNode(parser.compile_filter(bits[1]), bits[3])
    msg = f"{bits[0]} takes a user, optionally followed by 'as name'."
    raise template.TemplateSyntaxError(msg)
