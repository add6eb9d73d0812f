"""The staff dashboard's views: online now, the peak, today's visitors and the charts.

The dashboard is for active staff users: anonymous visitors are sent to ``LOGIN_URL``, others
get a 403 (and so does every refresh of a page whose session has ended). Opening it is a visit
like any other; its own refreshes (``dashboard_refresh``, the part of the page below the header)
are not recorded.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from whos_online import dashboard
from whos_online.config.rules import is_staff
from whos_online.config.settings import get_config
from whos_online.decorators import not_recorded

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.http import HttpRequest

    View = Callable[..., HttpResponse]


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
