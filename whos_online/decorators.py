"""``not_recorded``: a view whose requests record nobody and count no page hit.

Meant for views that pages poll, such as the JSON view of the counts: a poll is not a visit, and
recording it would write to Redis on every poll, set a throttle cookie (so that a CDN could not
cache the response) and count a page view that nobody made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.http import HttpRequest

#: The attribute the middleware looks for on ``request.resolver_match.func``.
ATTRIBUTE: Final = "whos_online_not_recorded"

ViewT = TypeVar("ViewT", bound="Callable[..., object]")


def not_recorded(view: ViewT) -> ViewT:
    """Mark ``view`` so that ``WhosOnlineMiddleware`` leaves its requests alone.

    The view itself is returned, not a wrapper, so that async views stay coroutine functions. For
    a class-based view, decorate the result of ``as_view()``.
    """
    setattr(view, ATTRIBUTE, True)
    return view


def is_not_recorded(request: HttpRequest) -> bool:
    """Whether the view that served ``request`` was marked with ``not_recorded``.

    Read after the view, from the URL resolution Django stored on the request: a request that
    resolved to no view (a 404) is an ordinary visit.
    """
    match = request.resolver_match
    return match is not None and getattr(match.func, ATTRIBUTE, False) is True
