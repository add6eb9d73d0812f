"""The viewer on their own page: a page that lists who is online counts the person reading it.

A page is rendered before its visit is written (the view decides the room, and may log someone
in or out), so the snapshot a newcomer's first page shows was read without them: left alone, it
would tell them "Who's online: nobody", and a room's page "Here now: nobody", while they read it.

So the tags ask whether the snapshot already counts its viewer, and add them when it does not:
one more user (named first where names are shown, unless they are hidden), guest or bot. The
answer costs no Redis read. The throttle cookie, which a browser keeps as long as its visit
counts (``WINDOW``), says when and in which room its browser was last recorded; a snapshot read
after that counts them. For a client without one, this process's memory of the visitors it
recorded says the same. A request with neither is a newcomer's (or a browser's that dropped its
cookies), and its visit is written at the end of this very request.

Only pages are adjusted: not the requests a page makes itself (the widget's refreshes, whose
answers may be shared by a cache between viewers, or any view marked ``not_recorded``), and not
a request on an ignored path, whose viewer is never recorded. Three limits are accepted: a user
online from another device and not among the names shown, and a guest sharing an address with
someone online, are counted once more on their first page; so is a client without cookies on
the first page another process serves it (or the first after its process learns that Redis lost
its data, which makes the memory's entries from before count for nothing).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from whos_online.recording import pageviews, rooms
from whos_online.recording.state import state_of
from whos_online.recording.throttle import recent
from whos_online.store import epochs

if TYPE_CHECKING:
    from django.http import HttpRequest

    from whos_online.config.settings import Config
    from whos_online.recording.state import Visitor
    from whos_online.store.results import Snapshot


def with_viewer(
    found: Snapshot, request: HttpRequest | None, config: Config, room: str
) -> Snapshot:
    """``found`` (of the site, or of ``room``), with the viewer of ``request`` counted in if it
    does not count them yet (see the module's docstring)."""
    if request is None or not _shows_its_viewer(request, room):
        return found
    state = state_of(request)
    cookie = state.cookie
    if cookie is not None and epochs.epochs.gone(cookie.epoch, config):
        cookie = None  # from before Redis lost its data: the viewer is not in what it holds
    if cookie is not None and (not room or cookie.room == rooms.room_tag(room)):
        # Online since the visit it speaks of; if they were not online before it, the snapshot
        # was read after it was written (``snapshots``: the middleware notes when).
        return found
    viewer = state.visitor(config, time.time())
    if viewer is None or _counted(found, viewer, config, room, remembered=cookie is None):
        return found
    return found.with_one_more(viewer.kind_of(config), viewer.details(config))


def _shows_its_viewer(request: HttpRequest, room: str) -> bool:
    """Whether ``request`` is a page whose viewer is (or is about to be) recorded, in ``room``
    if it names one: not on an ignored path, not a view left unrecorded, and for a room, a page
    view of that room (a page that lists another room's readers does not make its viewer one).
    """
    state = state_of(request)
    if not state.seen or state.is_not_recorded():
        return False
    if not room:
        return True
    return room == rooms.room_of(request) and pageviews.may_be_page_view(request)


def _counted(
    found: Snapshot, viewer: Visitor, config: Config, room: str, *, remembered: bool
) -> bool:
    """Whether ``found`` counts ``viewer`` already: a user listed by name, or (with
    ``remembered``, for a client without a cookie) a visitor this process wrote, in ``room``,
    before ``found`` was read."""
    if viewer.user is not None and any(row.pk == viewer.member for row in found.listed):
        return True
    if not remembered or not config.throttle:
        return False
    entry = recent.entry(viewer.key, time.time(), epochs.generation())
    return (
        entry is not None
        and found.read_at >= entry[0] - config.throttle
        and (not room or entry[1] == rooms.room_tag(room))
    )
