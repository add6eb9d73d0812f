"""The viewer: what they may see, and themselves on the page they read.

A room token, a keyed MAC over the room, the viewer's session and when it was issued, proves for
``ROOM_TOKEN_MAX_AGE`` seconds that a viewer was shown a room (or ``ROOM_ACCESS`` lets them in).
Names (``SHOW_NAMES_TO``) are decided without loading the session when there is no session
cookie, so that the answer to others stays cacheable.

A page that lists who is online counts the person reading it, in its render, its widgets'
refreshes and its live stream, even before their visit reaches Redis ("The reader on their own
page" in docs/how-it-works.md says how, and its four limits).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from django.conf import settings
from django.utils.crypto import constant_time_compare
from django.utils.http import int_to_base36

from whos_online.backend.keyspace import Person
from whos_online.reading import snapshots
from whos_online.recording import rooms, visits
from whos_online.recording.guests import session_key
from whos_online.recording.state import state_of
from whos_online.recording.throttle import recent
from whos_online.store import epochs

if TYPE_CHECKING:
    from collections.abc import Iterable

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    from whos_online.config.settings import Config
    from whos_online.recording.state import RequestState
    from whos_online.recording.throttle import ThrottleCookie
    from whos_online.store.items import Visitor
    from whos_online.store.results import Snapshot

    AnyUser = AbstractBaseUser | AnonymousUser


#: Seconds, beyond ``SNAPSHOT_MAX_AGE``, within which an arrival's visit may not have reached
#: Redis yet: the second its cookie names (the time of the request, to the second), the render
#: of that page, and the flush that writes it (``FLUSH_INTERVAL``, or longer on a busy process).
LANDING: Final = 4.0


def doubt(config: Config) -> float:
    """Seconds after an arrival during which a read looks for the newcomer rather than trusting
    that its snapshot counts them: a kept snapshot is at most ``SNAPSHOT_MAX_AGE`` old."""
    return config.snapshot_max_age + LANDING


def _arrived_lately(cookie: ThrottleCookie, config: Config, now: float) -> bool:
    return cookie.arrived and now < cookie.expiry - config.throttle + doubt(config)


@dataclass(eq=False)
class Reader:
    """The person a page is shown to, as the widget's refreshes and the live stream see them:
    the rooms the page counts them in ("" for the site), whether a read must look for them in
    Redis (see the module's docstring), and who they are, worked out (loading the session and
    the user) only once something needs it: a refresh of a page whose reader is not in doubt
    costs no query for them."""

    state: RequestState
    rooms: frozenset[str]
    doubtful: bool
    #: Whether their cookie is from before Redis lost its data, as this process knows.
    forgotten: bool = False
    #: The rooms in which a read found them since they became doubtful.
    found_in: set[str] = field(default_factory=set)
    #: Whether a snapshot was shown with them added (it is then theirs alone, not to be shared).
    added: bool = False

    def _visitor(self, config: Config) -> Visitor | None:
        return self.state.visitor(config, time.time())

    def _person(self, config: Config) -> Person | None:
        visitor = self._visitor(config)
        return None if visitor is None else Person(visitor.kind_of(config), visitor.member)

    def sought(self, shown: Iterable[str], config: Config) -> dict[str, list[Person]]:
        """The rooms of ``shown`` in which a read must look for them, each with them."""
        wanted = [room for room in shown if room in self.rooms - self.found_in]
        person = self._person(config) if self.doubtful and wanted else None
        return {} if person is None else {room: [person] for room in wanted}

    def shown_in(self, found: Snapshot, room: str, config: Config) -> Snapshot:
        """``found`` (of ``room``), with the reader counted in where it was read looking for
        them and did not find them; noting where it did."""
        if not found.readers or room not in self.rooms:
            return found  # not looked for: they are in it, as far as anyone knows
        visitor = self._visitor(config)
        if visitor is None:
            return found
        person = Person(visitor.kind_of(config), visitor.member)
        held = found.counts_reader(person.key)
        if held:
            self.found_in.add(room)
            self.doubtful = not self.rooms <= self.found_in
        if held is False:
            self.added = True
            return found.with_one_more(person.kind, visitor.details(config))
        return found

    def lost(self, config: Config) -> None:
        """Redis lost what it held of them (or may have, after an outage): look for them in
        every read until one finds them, and record them again now, in their room unless a
        later page put them in another."""
        self.doubtful = True
        self.found_in.clear()
        visitor = self._visitor(config)
        if visitor is not None:
            here = sorted(room for room in self.rooms if room)
            visits.record_again(visitor, config, here[0] if here else "")


def reader_of(
    request: HttpRequest, config: Config, shown: Iterable[str], now: float | None = None
) -> Reader | None:
    """The reader of the page that ``request`` comes from (a refresh of its widgets, its live
    stream), where ``shown`` are the rooms it shows ("" for the site): in the site's list, and in
    the room their throttle cookie says their latest page view put them in. None without a
    genuine cookie (the page's own render counted them; the refresh has nothing to go by), or
    when the page shows none of those rooms."""
    state = state_of(request)
    cookie = state.cookie
    if cookie is None:
        return None
    here = frozenset(room for room in shown if not room or rooms.room_tag(room) == cookie.room)
    if not here:
        return None
    now = time.time() if now is None else now
    forgotten = epochs.current().gone(cookie.epoch, config)
    doubtful = forgotten or _arrived_lately(cookie, config, now)
    return Reader(state, here, doubtful, forgotten=forgotten)


def sought_on_page(
    request: HttpRequest | None, config: Config, shown: Iterable[str]
) -> dict[str, list[Person]]:
    """The rooms of ``shown`` in which the read of a page's tags must look for its viewer: those
    their cookie says they arrived in moments ago (see the module's docstring)."""
    if request is None:
        return {}
    cookie = state_of(request).cookie
    now = time.time()
    if cookie is None or not _arrived_lately(cookie, config, now):
        return {}
    if epochs.current().gone(cookie.epoch, config):
        return {}  # not in what Redis holds: ``with_viewer`` counts them in anyway
    found = [room for room in shown if _shows_its_viewer(request, room)]
    here = [room for room in found if not room or cookie.room == rooms.room_tag(room)]
    viewer = state_of(request).visitor(config, now) if here else None
    if viewer is None:
        return {}
    person = Person(viewer.kind_of(config), viewer.member)
    return {room: [person] for room in here}


def with_viewer(
    found: Snapshot, request: HttpRequest | None, config: Config, room: str
) -> Snapshot:
    """``found`` (of the site, or of ``room``), with the viewer of ``request`` counted in if it
    does not count them yet (see the module's docstring)."""
    if request is None or not _shows_its_viewer(request, room):
        return found
    state = state_of(request)
    cookie = state.cookie
    if cookie is not None and epochs.current().gone(cookie.epoch, config):
        cookie = None  # from before Redis lost its data: the viewer is not in what it holds
    if cookie is not None and (not room or cookie.room == rooms.room_tag(room)):
        # Online since the visit it speaks of, unless it was moments ago and the read that
        # looked for them (``sought_on_page``) did not find them yet.
        viewer = state.visitor(config, time.time())
        if viewer is None or found.counts_reader(viewer.key) is not False:
            return found
        return found.with_one_more(viewer.kind_of(config), viewer.details(config))
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
    return room == rooms.room_of(state) and rooms.may_be_page_view(request)


def _counted(
    found: Snapshot, viewer: Visitor, config: Config, room: str, *, remembered: bool
) -> bool:
    """Whether ``found`` counts ``viewer`` already: a user listed by name, or (with
    ``remembered``, for a client without a cookie) a visitor this process wrote, in ``room``,
    before ``found`` was read. A user that ``found`` would list, and does not, is not counted,
    whatever this process wrote: another process may have moved them on since."""
    if viewer.user is not None and any(row.pk == viewer.member for row in found.listed):
        return True
    if viewer.kind_of(config) == "users" and not found.more:
        return False  # every visible user is listed
    if not remembered or not config.throttle:
        return False
    entry = recent().entry(viewer.key, time.time(), epochs.generation())
    return (
        entry is not None
        and found.read_at >= entry[0] - config.throttle
        and (not room or entry[1] == rooms.room_tag(room))
    )


def read_shown(
    request: HttpRequest,
    config: Config,
    rooms: Iterable[str],
    *,
    names: bool,
    reader: Reader | None = None,
) -> dict[str, Snapshot | None]:
    """The snapshots of ``rooms`` ("" for the site), read in one round trip, with ``reader``
    (the page's own, ``viewer.reader_of``) counted in where the read looked for them and did not
    find them yet. A reader whose visit Redis lost is recorded again first, so that the read,
    which writes the process's queue first, finds them. None for a room that could not be read.
    """
    shown = list(dict.fromkeys(rooms))
    if reader is not None and reader.forgotten:
        reader.lost(config)
    found = snapshots.read_many(
        # A limit of 0 reads no names at all: the counts alone are cheaper to read.
        config.display_limit if names else 0,
        shown,
        max_age=config.snapshot_max_age,
        readers=reader.sought(shown, config) if reader is not None else None,
    )
    if reader is None:
        return found
    return {
        room: None if one is None else reader.shown_in(one, room, config)
        for room, one in found.items()
    }


#: Seconds a token may be dated in the future: the clocks of a site's servers differ a little.
CLOCK_SKEW: Final = 60
#: Longest token that can be genuine (a base-36 time and a 22-character MAC), with room to spare:
#: a longer one is refused before any hashing.
MAX_TOKEN_LENGTH: Final = 48


def room_token(room: str, request: HttpRequest | None = None, *, now: float | None = None) -> str:
    """The token that lets the viewer of ``request`` read ``room`` through the JSON, widget and
    presence views for ``ROOM_TOKEN_MAX_AGE`` seconds. Without a request, the token of a viewer
    with no session. Inside a view that was given a token, its issue time is kept."""
    issued = state_of(request).token_issued if request is not None else None
    if issued is None:
        issued = int(time.time() if now is None else now)
    viewer = session_key(request, live=True) if request is not None else ""
    return f"{int_to_base36(issued)}.{_mac(room, viewer, issued, settings.SECRET_KEY)}"


def renew_in(request: HttpRequest | None, max_age: int, *, now: float | None = None) -> int:
    """Seconds from now after which a page should fetch fresh tokens (``live.js`` renews them at
    its next refresh from then on): a quarter of ``max_age`` before the tokens ``room_token``
    gives ``request`` run out, at most a minute before, and never less than a second from now."""
    current = time.time() if now is None else now
    issued = state_of(request).token_issued if request is not None else None
    if issued is None:
        issued = int(current)
    margin = min(60, max_age // 4)
    return max(1, issued + max_age - margin - int(current))


def check_token(
    room: str, token: str, request: HttpRequest, max_age: int, *, now: float | None = None
) -> bool:
    """Whether ``token`` is a token of ``room`` for the viewer of ``request``, issued at most
    ``max_age`` seconds ago, under the current secret or a fallback one. A genuine token's issue
    time is noted on the request's state (``token_issued``)."""
    if not token.isascii() or len(token) > MAX_TOKEN_LENGTH:
        return False
    stamp, dot, mac = token.partition(".")
    if not dot or not stamp or not mac:
        return False
    issued = _issue_time(stamp)
    if issued is None:
        return False
    current = time.time() if now is None else now
    if not current - max_age <= issued <= current + CLOCK_SKEW:
        return False
    viewer = session_key(request, live=True)
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())]
    # Every secret is tried, whichever matches: the time taken says nothing of which one did.
    matched = [constant_time_compare(mac, _mac(room, viewer, issued, secret)) for secret in secrets]
    if not any(matched):
        return False
    state_of(request).token_issued = issued
    return True


def _issue_time(stamp: str) -> int | None:
    """The issue time ``stamp`` spells, if it spells it as ``room_token`` does: ``int`` would
    also read a sign, spaces, underscores, leading zeros and capitals, and each such spelling
    of one token would be another URL to the caches and logs that key on it."""
    try:
        issued = int(stamp, 36)
    except ValueError:
        return None
    if issued < 0 or int_to_base36(issued) != stamp:
        return None
    return issued


def _mac(room: str, viewer: str, issued: int, secret: str) -> str:
    message = json.dumps([room, viewer, issued], ensure_ascii=False)
    digest = hashlib.blake2b(
        message.encode("utf-8", "surrogatepass"), key=_key(secret), digest_size=16
    ).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@functools.lru_cache(maxsize=8)
def _key(secret: str) -> bytes:
    """The tokens' own key, derived from ``secret`` apart from any other use of it."""
    return hashlib.blake2b(secret.encode(), person=b"whos_online.tk", digest_size=32).digest()


def may_read(request: HttpRequest, room: str, config: Config, *, token: str | None = None) -> bool:
    """Whether ``request`` may see who is in ``room``: ``ROOM_ACCESS`` decides where the site set
    it; otherwise the request must carry a token of the room for its viewer (``?token=``, or
    ``token`` for one of the widgets a request refreshes together)."""
    if config.room_access is not None:
        return bool(config.room_access(request, room))
    if token is None:
        token = request.GET.get("token", "")
    return check_token(room, token, request, config.room_token_max_age)


def issued(request: HttpRequest) -> int | None:
    """When the token ``check_token`` last accepted for ``request`` was issued, if any."""
    return state_of(request).token_issued


def use_issued(request: HttpRequest, issued: int | None) -> None:
    """Make the tokens ``room_token`` gives ``request`` those of ``issued`` (None: of now).

    A request that refreshes several widgets checks a token for each; each widget's fresh URLs
    keep its own token's issue time, as they would in a refresh of its own."""
    state_of(request).token_issued = issued


def may_see_names(request: HttpRequest | None, config: Config) -> bool:
    rule = config.show_names_to
    if rule is None:
        return True
    if request is None or settings.SESSION_COOKIE_NAME not in request.COOKIES:
        # Anonymous for every session-based login; the rule is asked about an AnonymousUser,
        # which reads no session (a rule of the site's own may admit anonymous visitors).
        from django.contrib.auth.models import AnonymousUser

        return bool(rule(AnonymousUser()))
    user = getattr(request, "user", None)
    return user is not None and bool(rule(user))


def shows_names_to(user: AnyUser, config: Config) -> bool:
    """Whether ``SHOW_NAMES_TO`` lets ``user`` see names, for a view that authenticated them
    itself (an API's token, which the JSON view cannot know)."""
    rule = config.show_names_to
    return rule is None or bool(rule(user))


def shows_names_to_everyone(config: Config) -> bool:
    """Whether every viewer gets the same names, so that an answer with names may be shared."""
    return config.show_names_to is None
