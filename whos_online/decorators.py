"""``not_recorded``: a view whose requests record nobody and count no page hit; ``in_room``: a view
whose requests put the person in a room (see ``rooms``).

``not_recorded`` is meant for views that pages poll, such as the JSON view of the counts: a poll
is not a visit, and recording it would write to Redis on every poll, set a throttle cookie (so
that a CDN could not cache the response) and count a page view that nobody made.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, TypeVar, cast

from asgiref.sync import iscoroutinefunction

from whos_online.recording.rooms import set_room
from whos_online.recording.state import VIEW_ATTRIBUTE, state_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.http import HttpRequest

ViewT = TypeVar("ViewT", bound="Callable[..., object]")


def not_recorded(view: ViewT) -> ViewT:
    """Mark ``view`` so that ``WhosOnlineMiddleware`` leaves its requests alone.

    The view itself is returned, not a wrapper, so that async views stay coroutine functions. For
    a class-based view, decorate the result of ``as_view()``.
    """
    setattr(view, VIEW_ATTRIBUTE, True)
    return view


def mark_not_recorded(request: HttpRequest) -> None:
    """Leave this one request alone, as if its view were marked ``not_recorded``."""
    state_of(request).not_recorded = True


def in_room(pattern: str) -> Callable[[ViewT], ViewT]:
    """Put every request of the decorated view in the room ``pattern`` names, formatted with the
    view's keyword arguments: ``@in_room("topic:{pk}")`` on a view of ``topics/<int:pk>/``.

    A pattern that names an argument the view does not get raises ``KeyError`` on its first
    request: a mistake in the code, not in the request.
    """

    def decorate(view: ViewT) -> ViewT:
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_view(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                set_room(request, pattern.format(**kwargs))
                return await view(request, *args, **kwargs)

            return cast("ViewT", async_view)

        @functools.wraps(view)
        def sync_view(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            set_room(request, pattern.format(**kwargs))
            return view(request, *args, **kwargs)

        return cast("ViewT", sync_view)

    return decorate
