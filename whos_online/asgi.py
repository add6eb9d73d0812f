"""``LiveStreams``: the site's ASGI application, with whos_online's live streams sent to their
connections straight from the process's subscription rather than through Django's response.

Django serves a stream's opening as any view's (its middleware, session, user and the widgets'
rules), and its first state; then its request is over, and the stream goes on here, one
``Line`` per connection: a change costs each open stream one call of the server's ``send``,
where Django's handler would wake a task of its own for it, and nothing of Django's handler
(its tasks, the request's thread) stays behind while the page is open. docs/live.md says how
to install it and what it saves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.urls import NoReverseMatch, get_script_prefix, reverse

from whos_online.live.line import OPENING, Opening
from whos_online.live.resources import Freezer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    Scope = dict[str, Any]
    Message = Mapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    Application = Callable[[Scope, Receive, Send], Awaitable[None]]


class LiveStreams:
    """Wrap the site's ASGI application: ``application = LiveStreams(get_asgi_application())``.
    Every request but a live stream's goes to it untouched.

    With ``freeze`` (the default), the garbage collector's full passes skip the objects of the
    open streams (``live.resources.Freezer``): a process with 10 000 of them would otherwise stop
    for most of a second each time more open. False leaves the collector as it is."""

    def __init__(self, application: Application, *, freeze: bool = True) -> None:
        self.application = application
        self.freezer = Freezer() if freeze else None
        self._path: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith(self._stream_path()):
            await self.application(scope, receive, send)
            return
        opening = Opening(send, receive)
        try:
            await self.application(
                {**scope, OPENING: opening}, opening.receive, opening.send_response
            )
        except BaseException:
            opening.abandon()
            raise
        await opening.go_on(self.freezer)

    def _stream_path(self) -> str:
        """The stream's path, as the site's URLconf names it (without the script's prefix: the
        scope's path ends with it)."""
        if self._path is None:
            try:
                found = reverse("whos_online:stream")
            except NoReverseMatch:
                found = "\0"  # no URL of it: nothing to take
            self._path = "/" + found.removeprefix(get_script_prefix())
        return self._path
