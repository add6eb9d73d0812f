"""The JSON view of the counts, which pages poll, and the staff dashboard.

The JSON view records nobody (``not_recorded``) and reads Redis once (``snapshots.read``). Its
answer is publicly cacheable for ``JSON_MAX_AGE`` seconds unless it names people only some
viewers may see, so that a CDN can absorb the polls of a busy site. It fails open: while Redis
cannot be read it answers the zero counts with ``"ok": false``, which the live widget takes as
"keep showing what you have".

The dashboard is for active staff users: anonymous visitors are sent to ``LOGIN_URL``, others
get a 403 (and so does every refresh of a page whose session has ended). Opening it is a visit
like any other; its own refreshes (``dashboard_refresh``, the part of the page below the header)
are not recorded.
"""

from __future__ import annotations

import functools
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_cache_control
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from whos_online import dashboard, snapshots
from whos_online.conf import get_config
from whos_online.decorators import not_recorded
from whos_online.results import EMPTY_SNAPSHOT, Snapshot
from whos_online.visibility import is_staff, may_see_names, shows_names_to_everyone

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.http import HttpRequest

    View = Callable[..., HttpResponse]

#: "<", ">" and "&" written as JSON escapes, as Django's json_script does: names are anyone's
#: text, and the document must stay inert even if something renders it as HTML.
_HTML_SAFE: Final = {ord("<"): "\\u003C", ord(">"): "\\u003E", ord("&"): "\\u0026"}


def counts_document(found: Snapshot | None, *, names: bool) -> dict[str, Any]:
    """The JSON view's document; ``found`` is None when Redis could not be read."""
    snapshot = EMPTY_SNAPSHOT if found is None else found
    counts = snapshot.counts
    peak = snapshot.peak
    document: dict[str, Any] = {
        "ok": found is not None,
        "users": counts.users,
        "guests": counts.guests,
        "bots": counts.bots,
        "total": counts.total,
        "peak": {"people": peak.people, "when": peak.when},
        "visitors_today": snapshot.visitors,
    }
    if names:
        listed = snapshot.users
        document["names"] = [{"name": user.name, "url": user.url} for user in listed]
        document["more"] = snapshot.more
    return document


@not_recorded
@require_safe
def counts(request: HttpRequest) -> HttpResponse:
    config = get_config()
    names = may_see_names(request, config)
    # A limit of 0 reads no names at all: the counts alone are cheaper to read.
    found = snapshots.read(
        config.display_limit if names else 0,
        max_age=config.snapshot_max_age,
        fresh_after=snapshots.recorded_at(request),
    )
    body = json.dumps(counts_document(found, names=names), cls=DjangoJSONEncoder)
    response = HttpResponse(body.translate(_HTML_SAFE), content_type="application/json")
    if names and not shows_names_to_everyone(config):
        patch_cache_control(response, private=True, max_age=config.json_max_age)
    else:
        patch_cache_control(response, public=True, max_age=config.json_max_age)
    return response


def staff_only(*, redirect_anonymous: bool) -> Callable[[View], View]:
    """Let active staff users in; send anonymous visitors to ``LOGIN_URL`` or refuse them.

    The dashboard's refreshes are refused rather than redirected: a tab left open after its
    session ended would otherwise fetch the login page, a page view like any other, forever.
    """

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                if redirect_anonymous:
                    return redirect_to_login(request.get_full_path())
                raise PermissionDenied
            if not is_staff(request.user):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


def _render_dashboard(request: HttpRequest, template: str) -> HttpResponse:
    config = get_config()
    try:
        precision = dashboard.parse_precision(request.GET.get("precision"), config)
    except ValueError as error:
        return HttpResponseBadRequest(str(error), content_type="text/plain; charset=utf-8")
    now = timezone.now()
    shown = dashboard.collect(precision, now=now.timestamp())
    return render(
        request,
        template,
        {
            "dashboard": shown,
            "precisions": [
                (choice, dashboard.precision_label(choice), choice == precision)
                for choice in config.counter_precisions
            ],
            "precision_label": dashboard.precision_label(precision),
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
