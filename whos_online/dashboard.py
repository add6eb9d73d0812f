"""The staff dashboard: its views, for active staff users only, and what it shows, read from
Redis in a bounded number of steps.

Each read is bounded, so that a big site's dashboard costs Redis little ("Reading" in
docs/how-it-works.md); while Redis cannot be read it shows zeros, empty charts and a warning.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.urls import reverse
from django.utils import dateformat
from django.utils import timezone as django_timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from whos_online.backend import connection
from whos_online.config.rules import is_staff
from whos_online.config.settings import get_config
from whos_online.decorators import not_recorded
from whos_online.flushing import batches
from whos_online.reading import charts, snapshots
from whos_online.store import counters, users
from whos_online.store.results import (
    EMPTY_SNAPSHOT,
    OnlineCounts,
    OnlineUser,
    Peak,
    Snapshot,
    as_datetime,
)
from whos_online.store.snapshot import recent_rooms, room_titles

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from django.http import HttpRequest
    from django.utils.functional import _StrPromise
    from django.utils.safestring import SafeString

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config

    View = Callable[..., HttpResponse]


#: Users listed by name; the rest are "N more".
NAMES_SHOWN: Final = 100
#: Charts drawn at most, the standard ones included; further counters are only counted.
MAX_CHARTS: Final = 24
#: Slices per chart at most, whatever COUNTER_SAMPLES says.
MAX_POINTS: Final = 360
#: The precision shown when none is asked for: this one if configured, else the next coarser.
PREFERRED_PRECISION: Final = 60
#: Rooms shown, the fullest first, among the most recently active of each shard.
ROOMS_SHOWN: Final = 10
#: The most recently active rooms of each shard whose people are counted for it.
ROOMS_READ: Final = 50
#: Colours in dashboard.css (``.wo-colour-0`` …), given to the charts in turn.
PALETTE_SIZE: Final = 6

#: The online counts are gauges: each slice holds the largest count seen in it, and a slice
#: without a sample is unknown rather than zero. Every other counter adds up, so a slice without
#: a sample is a zero.
GAUGE_PREFIX: Final = "online:"

#: Counters charted first, with their titles; ``hits`` only when counted or present.
STANDARD: Final[Sequence[tuple[str, _StrPromise]]] = (
    ("online:users", _("Users online")),
    ("online:guests", _("Guests online")),
    ("online:bots", _("Bots online")),
    (batches.COUNTER_NAME, _("Page views")),
)


def is_gauge(name: str) -> bool:
    return name.startswith(GAUGE_PREFIX)


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    starts: list[int]
    values: list[int | None]
    #: The colour of the series, as an index into the stylesheet's palette.
    colour: int
    svg: SafeString

    @property
    def gauge(self) -> bool:
        return is_gauge(self.name)

    @property
    def highest(self) -> int | None:
        present = [value for value in self.values if value is not None]
        return max(present) if present else None

    @property
    def total(self) -> int:
        return sum(value for value in self.values if value is not None)


@dataclass(frozen=True)
class Dashboard:
    #: False while Redis could not be read: everything below is then empty.
    ok: bool
    snapshot: Snapshot
    precision: int
    charts: list[Chart]
    #: Counters kept at this precision that were left out (beyond ``MAX_CHARTS``).
    left_out: int
    #: Set when the online sets hold people gone for several windows (see
    #: ``cleanup_late_since``): the cleanup command is not running.
    cleanup_late_since: datetime | None = None
    #: The busiest rooms now, with who is in each, the fullest first (``busiest_rooms``).
    rooms: Sequence[ShownRoom] = ()

    @property
    def users(self) -> list[OnlineUser]:
        return self.snapshot.users

    @property
    def more(self) -> int:
        return self.snapshot.more

    @property
    def counts(self) -> OnlineCounts:
        return self.snapshot.counts

    @property
    def peak(self) -> Peak:
        return self.snapshot.peak


def default_precision(config: Config) -> int:
    coarser = [p for p in config.counter_precisions if p >= PREFERRED_PRECISION]
    return coarser[0] if coarser else config.counter_precisions[-1]


def parse_precision(raw: str | None, config: Config) -> int:
    """The precision asked for in the query string; ValueError names the choices."""
    if raw is None:
        return default_precision(config)
    if raw.isascii() and raw.isdigit() and int(raw) in config.counter_precisions:
        return int(raw)
    choices = ", ".join(map(str, config.counter_precisions))
    msg = f"precision must be one of COUNTER_PRECISIONS: {choices} (seconds)."
    raise ValueError(msg)


def precision_label(seconds: int) -> str:
    """60 → "1 min", 18000 → "5 h", 86400 → "1 day"."""
    if seconds % 86400 == 0:
        days = seconds // 86400
        return ngettext("%(count)d day", "%(count)d days", days) % {"count": days}
    for size, unit in ((3600, _("h")), (60, _("min"))):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} {_('s')}"


def time_label(precision: int) -> Callable[[int], str]:
    """How a slice start reads on the time axis, in the current time zone: as finely as the
    slices are, with the day once a chart spans several."""
    if precision < 60:
        layout = "H:i:s"
    elif precision < 3600:
        layout = "H:i"
    elif precision < 86400:
        layout = "j M H:i"
    else:
        layout = "j M Y"

    def label(start: int) -> str:
        moment = datetime.fromtimestamp(start, tz=timezone.utc)
        return dateformat.format(django_timezone.localtime(moment), layout)

    return label


def slice_starts(now: float, precision: int, count: int) -> list[int]:
    """The starts of the last ``count`` slices, the current one last."""
    current = counters.slice_start(now, precision)
    return [current - precision * (count - 1 - index) for index in range(count)]


#: What ``collect`` reads besides the snapshot: the counters charted, how many were left out, the
#: samples of each, when the longest-unseen member of the online sets was last seen, and the
#: rooms most recently active with who is in each.
class ShownRoom(NamedTuple):
    """A room on the dashboard: its name (its identity), who is in it, and its title, if any."""

    name: str
    counts: OnlineCounts
    title: str = ""


_Read = tuple[
    list[str], int, list[list[int | None]], float | None, dict[str, OnlineCounts], dict[str, str]
]

#: Windows past which someone still in the online sets shows that the cleanup command is not
#: running (it removes them within a window when cron runs it every minute).
OVERDUE_WINDOWS: Final = 3


def collect(precision: int, *, now: float) -> Dashboard:
    config = get_config()
    found = snapshots.read(NAMES_SHOWN)
    starts = slice_starts(now, precision, min(config.counter_samples, MAX_POINTS))
    standard = [name for name, _title in STANDARD if is_gauge(name) or config.count_hits]

    def read(client: Client, config: Config) -> _Read:
        kept, total, standard_kept = counters.names(
            client, config, precision, limit=MAX_CHARTS, among=standard
        )
        own = [name for name in kept if name not in standard][: MAX_CHARTS - len(standard)]
        # Every counter at this precision is drawn or left out; the standard ones are drawn
        # whether or not they have samples yet, so only those that exist count as drawn.
        left_out = total - standard_kept - len(own)
        wanted = [*standard, *own]
        samples = counters.samples(client, config, wanted, precision, starts)
        rooms = recent_rooms(client, config, now=now, per_shard=ROOMS_READ)
        shown = [room for room, _counts in busiest_rooms(rooms)]
        titles = room_titles(client, config, shown)
        return wanted, left_out, samples, users.oldest_seen(client, config), rooms, titles

    # While Redis cannot be read, the standard charts are drawn empty.
    unknown: _Read = (standard, 0, [[None] * len(starts) for _name in standard], None, {}, {})
    wanted, left_out, values, oldest, rooms, titles = connection.call(unknown, read)
    return Dashboard(
        ok=found is not None,
        snapshot=EMPTY_SNAPSHOT if found is None else found,
        precision=precision,
        charts=[
            _chart(name, stored, starts, colour=index % PALETTE_SIZE, label=time_label(precision))
            for index, (name, stored) in enumerate(zip(wanted, values, strict=True))
        ],
        left_out=left_out,
        cleanup_late_since=cleanup_late_since(oldest, config, now=now),
        rooms=[
            ShownRoom(name, counts, titles.get(name, "")) for name, counts in busiest_rooms(rooms)
        ],
    )


def busiest_rooms(rooms: dict[str, OnlineCounts]) -> list[tuple[str, OnlineCounts]]:
    """The ``ROOMS_SHOWN`` rooms with most people in them (bots last), empty ones left out."""
    occupied = [(name, counts) for name, counts in rooms.items() if counts.total or counts.bots]
    occupied.sort(key=lambda item: (-item[1].total, -item[1].bots, item[0]))
    return occupied[:ROOMS_SHOWN]


def cleanup_late_since(oldest: float | None, config: Config, *, now: float) -> datetime | None:
    """When the oldest member still in the online sets was last seen, if that is more than
    ``OVERDUE_WINDOWS`` windows ago: the cleanup command has not run since (about) then."""
    if oldest is None or oldest >= now - OVERDUE_WINDOWS * config.window:
        return None
    return as_datetime(oldest)


def _chart(
    name: str,
    stored: list[int | None],
    starts: list[int],
    *,
    colour: int,
    label: Callable[[int], str],
) -> Chart:
    values: list[int | None] = stored if is_gauge(name) else [value or 0 for value in stored]
    title = next((str(title) for known, title in STANDARD if known == name), name)
    return Chart(
        name=name,
        title=title,
        starts=starts,
        values=values,
        colour=colour,
        svg=charts.line_chart(
            starts, values, title=title, label=label, empty=str(_("No samples yet"))
        ),
    )


def staff_only(*, redirect_anonymous: bool) -> Callable[[View], View]:
    """Let active staff users in; send anonymous visitors to ``LOGIN_URL`` or refuse them.

    The dashboard's refreshes are refused rather than redirected: a tab left open after its
    session ended would otherwise fetch the login page, a page view like any other, forever.
    A refusal is a page saying why (``forbidden``), not ``PermissionDenied``: someone who is
    simply not staff is no error worth a traceback in the site's log.
    """

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                if redirect_anonymous:
                    return redirect_to_login(request.get_full_path())
                return forbidden(request)
            if not is_staff(request.user):
                return forbidden(request)
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


def forbidden(request: HttpRequest) -> HttpResponse:
    """The 403 page of the dashboard: it needs staff access; back to the site, or log in."""
    user = request.user
    return render(
        request,
        "whos_online/dashboard_forbidden.html",
        {
            "username": user.get_username() if user.is_authenticated else "",
            "login_url": redirect_to_login(reverse("whos_online:dashboard"))["Location"],
        },
        status=403,
    )


def _render_dashboard(request: HttpRequest, template: str) -> HttpResponse:
    config = get_config()
    try:
        precision = parse_precision(request.GET.get("precision"), config)
    except ValueError as error:
        return HttpResponseBadRequest(str(error), content_type="text/plain; charset=utf-8")
    now = django_timezone.now()
    shown = collect(precision, now=now.timestamp())
    return render(
        request,
        template,
        {
            "dashboard": shown,
            "precisions": [
                (choice, precision_label(choice), choice == precision)
                for choice in config.counter_precisions
            ],
            "precision_label": precision_label(precision),
            "refresh_url": f"{reverse('whos_online:dashboard_refresh')}?precision={precision}",
            "refresh_interval": config.refresh_interval,
            "now": now,
            "a_minute_ago": now - timedelta(minutes=1),
        },
    )


@never_cache
@require_safe
@staff_only(redirect_anonymous=True)
def dashboard_page(request: HttpRequest) -> HttpResponse:
    """Online now, the peak, today's visitors and a chart of each counter at one precision."""
    return _render_dashboard(request, "whos_online/dashboard.html")


@not_recorded
@never_cache
@require_safe
@staff_only(redirect_anonymous=False)
def dashboard_refresh(request: HttpRequest) -> HttpResponse:
    """The dashboard below its header, which the page fetches every ``REFRESH_INTERVAL``."""
    return _render_dashboard(request, "whos_online/dashboard_body.html")
