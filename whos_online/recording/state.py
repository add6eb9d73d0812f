"""What whos_online knows of one request, worked out once: ``state_of(request)``.

The middleware, the views, the decorators and the tags ask the same questions of a request (its
client's address, its throttle cookie, its room, its person); each is answered at most once and
kept on one typed object, as django-htmx keeps ``request.htmx`` ("The request's state" in
docs/how-it-works.md).
"""

from __future__ import annotations

import functools
import secrets
from typing import TYPE_CHECKING, Final

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from django.utils.functional import LazyObject, empty

from whos_online.config import process
from whos_online.recording import guests, throttle
from whos_online.store.items import Visitor

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

    from whos_online.config.settings import Config
    from whos_online.recording.throttle import ThrottleCookie
    from whos_online.store.items import Placement
    from whos_online.store.results import Snapshot

    AnyUser = AbstractBaseUser | AnonymousUser

#: The attribute of the request that holds its state (``request.whos_online``).
ATTRIBUTE: Final = "whos_online"
#: The attribute the middleware looks for on ``request.resolver_match.func`` (``not_recorded``).
VIEW_ATTRIBUTE: Final = "whos_online_not_recorded"

_UNSET: Final = object()
#: What ``RequestState.assigned_user`` answers when only the session can tell who the user is.
NOT_LOADED: Final = object()


class RequestState:
    """What whos_online knows of one request (see the module's docstring)."""

    __slots__ = (
        "_address",
        "_candidate",
        "_guest",
        "_mark",
        "_visitor",
        "_visitor_user",
        "announced",
        "cookie",
        "logged_in_as",
        "not_recorded",
        "request",
        "room",
        "room_by_url",
        "room_title",
        "seen",
        "session_user",
        "snapshots",
        "stay",
        "token_issued",
    )

    def __init__(self, request: HttpRequest) -> None:
        self.request = request
        #: Whether the middleware looked at the request (its path is not ignored): its viewer
        #: is recorded, so the tags may count them in (``reading.viewer``).
        self.seen = False
        #: The genuine throttle cookie the browser sent; None without one, or once a login or
        #: logout made by the view spent it.
        self.cookie: ThrottleCookie | None = None
        #: The room the view put the request in (``set_room``, ``in_room``), if any.
        self.room: str | None = None
        #: The room ``ROOMS`` gives the request's URL ("" for none), once worked out.
        self.room_by_url: str | None = None
        #: The title of the request's room, for people ("" for none).
        self.room_title = ""
        #: A page's own word that its reader is still on it (``views.presence``).
        self.stay: Placement | None = None
        #: A page view the page's script announced (``views.page_view``): the room it shows
        #: ("" for none), or None for no such announcement.
        self.announced: str | None = None
        #: Whether the view asked that the request record nobody (``mark_not_recorded``).
        self.not_recorded = False
        #: The snapshots this page's tags read, by room ("" for the site).
        self.snapshots: dict[str, Snapshot] = {}
        #: When the room token the request carried was issued (``reading.viewer``).
        self.token_issued: int | None = None
        #: ``request.user`` as the middlewares before the view left it, not loaded (Django's
        #: lazy object): the session's user, for a view that puts an anonymous one in its place.
        self.session_user: object = request.__dict__.get("user")
        #: The user that a login during the request logged in (an AnonymousUser after a
        #: logout); None if neither happened.
        self.logged_in_as: AnyUser | None = None
        self._candidate: str | None = None
        self._mark = ""
        self._address: object = _UNSET
        self._guest: object = _UNSET
        self._visitor: object = _UNSET
        self._visitor_user: object = _UNSET

    # The client

    def candidate(self, config: Config) -> str:
        """The client's address as the trusted proxies (or the socket) give it, unchecked."""
        if self._candidate is None:
            self._candidate = guests.forwarded_candidate(self.request, config.trusted_proxy_count)
        return self._candidate

    def address(self, config: Config) -> str | None:
        """The client's address, canonical; None when it is not one."""
        if self._address is _UNSET:
            self._address = guests.normalize_ip(self.candidate(config))
        assert self._address is None or isinstance(self._address, str)
        return self._address

    def bound_address(self, config: Config) -> str:
        """What the throttle cookie is bound to of the client: its canonical address, or
        what stands for it (so that a proxy writing a fresh source port still matches)."""
        return self.address(config) or self.candidate(config)

    def sent_cookie(self, config: Config, now: float) -> ThrottleCookie | None:
        """The throttle cookie the browser sent, if this site issued it to this client (its
        session cookie and address) for a visit within ``WINDOW`` (``throttle.read_cookie``).

        A browser sends the same cookie, session cookie and address on every request of a
        ``THROTTLE``: what they come to (the client's address and the cookie's check) is
        remembered by what was sent, so that a throttled request looks them up once rather than
        parsing the address and looking up the cookie's check apart."""
        request = self.request
        value = request.COOKIES.get(throttle.COOKIE_NAME)
        if not value or len(value) > throttle.MAX_COOKIE_LENGTH:
            # The address as the request came in: what runs after this middleware (another
            # middleware, the view) may rewrite REMOTE_ADDR, and the cookie handed out must be
            # bound to the address the browser's next request is checked against.
            self.candidate(config)
            return None
        proxies = config.trusted_proxy_count
        remote, forwarded = guests.address_headers(request, proxies)
        session = guests.session_key(request, sent=True)
        key = throttle.cookie_key()
        if isinstance(remote, str) and len(session) + len(forwarded) + len(remote) <= _MAX_SENT:
            client = _remembered_client(value, session, remote, forwarded, proxies, key=key)
        else:
            client = _client(value, session, remote, forwarded, proxies, key=key)
        candidate, address, cookie = client
        if self._candidate is None:
            self._candidate, self._address = candidate, address
        return throttle.in_time(cookie, now, config.throttle, config.window)

    def guest(self, config: Config, now: float) -> tuple[str, str] | None:
        """The set ("guests" or "bots") and member an anonymous request is recorded as, or
        None when guests are not tracked or the request has no usable client address."""
        if self._guest is _UNSET:
            self._guest = self._work_out_guest(config, now)
        assert self._guest is None or isinstance(self._guest, tuple)
        return self._guest

    def _work_out_guest(self, config: Config, now: float) -> tuple[str, str] | None:
        if not config.track_guests:
            return None
        address = self.address(config)
        if address is None:
            return None
        kind = "bots" if guests.is_bot(self.request, config) else "guests"
        return kind, guests.guest_id(address, config, now)

    def guest_member(self, config: Config, now: float) -> str:
        """The member the request would be recorded as if it were a guest's ("" for none), even
        while guests are not tracked: what a login takes off the guests."""
        address = self.address(config)
        return guests.guest_id(address, config, now) if address else ""

    # The person

    def assigned_user(self) -> AnyUser | object | None:
        """The user the request is recorded as, where that is known without loading anyone, or
        ``NOT_LOADED`` when only the session can tell. Asked after the view, in this order:

        - the user of a login (or the AnonymousUser of a logout) made during the request, whatever
          the view left on ``request.user`` afterwards (django-allauth's app API runs its views
          in a session of its own, and puts the request's own user back after them);
        - an authenticated user on ``request.user``: one the view or its authentication put there
          (Django REST framework's, or any ``request.user = ...``), or the middleware's lazy
          object, once something loaded it;
        - a user that a django-ninja authentication returned, which it keeps as
          ``request.auth``;
        - the middleware's own lazy object, loaded to an anonymous user: the session holds none.

        Neither loads the session or the user, so that a request under ASGI never does so on the
        event loop. An anonymous user that the view put in the lazy object's place (an API that
        knows only tokens, called with a browser's session) is no answer: the session decides.
        """
        if self.logged_in_as is not None:
            return self.logged_in_as
        request = self.request.__dict__
        user = request.get("user")
        found = _loaded(user)
        if found is not NOT_LOADED and getattr(found, "is_authenticated", False):
            return found
        auth: object = request.get("auth")
        if auth is not None and _is_user(auth):
            return auth
        if found is NOT_LOADED or user is not self.session_user:
            return NOT_LOADED
        return found

    def user(self) -> AnyUser | None:
        """The user the request is recorded as (see ``assigned_user``), loading the session's
        if need be (None without ``AuthenticationMiddleware``)."""
        found = self.assigned_user()
        if found is NOT_LOADED:
            found = _load(self.session_user)
        return found  # type: ignore [return-value]

    async def auser(self) -> AnyUser | None:
        """``user`` from an event loop, where the session's user is loaded by the request's
        ``auser()`` (``AuthenticationMiddleware``'s)."""
        found = self.assigned_user()
        if found is NOT_LOADED:
            auser = getattr(self.request, "auser", None)
            if auser is not None:
                found = await auser()
            else:
                found = await sync_to_async(_load)(self.session_user)
        return found  # type: ignore [return-value]

    def visitor(
        self, config: Config, now: float, user: AnyUser | object | None = NOT_LOADED
    ) -> Visitor | None:
        """Who makes the request, as they are recorded (None for someone who is not: a guest
        while guests are not tracked, or without a usable address). The user is ``user()``
        unless given (the ASGI path loads it with ``auser()``); worked out again if it is
        another than last time (the view authenticated someone after a tag looked)."""
        if user is NOT_LOADED:
            user = self.user()
        if self._visitor is _UNSET or user is not self._visitor_user:
            self._visitor = self._work_out_visitor(config, now, user)
            self._visitor_user = user
        assert self._visitor is None or isinstance(self._visitor, Visitor)
        return self._visitor

    def _work_out_visitor(self, config: Config, now: float, user: object) -> Visitor | None:
        if user is not None and getattr(user, "is_authenticated", False):
            return Visitor.of_user(user, config)  # type: ignore [arg-type]
        guest = self.guest(config, now)
        return None if guest is None else Visitor.of_guest(*guest, config)

    def forget_visitor(self) -> None:
        """The view logged someone in or out: who makes the request is to be worked out anew."""
        self._visitor = _UNSET
        self._visitor_user = _UNSET

    def page_view_mark(self) -> str:
        """A mark of this request, made when first asked: its widgets carry it when it is a page
        view, so that the page's script can tell a page view the server took from one it must
        announce (``reading``'s live widget)."""
        if not self._mark:
            self._mark = secrets.token_urlsafe(9)
        return self._mark

    # What the view said

    def is_not_recorded(self) -> bool:
        """Whether the view that served the request was marked ``not_recorded`` (or marked the
        request itself, with ``mark_not_recorded``). Read after the view, from the URL
        resolution Django stored on the request: a request that resolved to no view (a 404) is
        an ordinary visit."""
        if self.not_recorded:
            return True
        match = getattr(self.request, "resolver_match", None)
        return match is not None and getattr(match.func, VIEW_ATTRIBUTE, False) is True


#: Longest session cookie, ``X-Forwarded-For`` and ``REMOTE_ADDR`` together whose meaning is
#: remembered (``RequestState.sent_cookie``): a session key and a few proxies' IPv6 addresses fit;
#: anything longer, such as a forged 8 kB header, is worked out on each request and never kept,
#: so that the memory stays a few megabytes whatever clients send.
_MAX_SENT: Final = 256


def _client(
    value: str, session: str, remote: object, forwarded: str, proxies: int, *, key: bytes
) -> tuple[str, str | None, ThrottleCookie | None]:
    """What a request that sent throttle cookie ``value``, session cookie ``session``,
    ``REMOTE_ADDR`` ``remote`` and ``X-Forwarded-For`` ``forwarded`` comes to: its client's
    address unchecked, canonical (None when it is not one), and the cookie if this site issued
    it to that client under ``key``, whenever that was."""
    candidate = guests.candidate_of(remote, forwarded, proxies)
    address = guests.normalize_ip(candidate)
    return (
        candidate,
        address,
        throttle.genuine(value, throttle.binding(session, address or candidate), key),
    )


# Bounded in entries as the cookies' checks are, and in size by _MAX_SENT. The MACs' key is part
# of what a verdict is remembered by: a check that began before the settings changed, and was
# stored after the change cleared this memory, is then never found under the new key.
_remembered_client = process.cleared_on_reset(
    functools.lru_cache(maxsize=throttle.MEMORY_SIZE)(_client)
)


def _loaded(user: object) -> object:
    """``user``, or what a lazy object holds once loaded (``NOT_LOADED`` before)."""
    if isinstance(user, LazyObject):
        held = user._wrapped  # whether it was loaded, as Django's own code asks
        return NOT_LOADED if held is empty else held
    return user


def _load(user: object) -> object:
    """``user``, a lazy one loaded (which reads the session and may run an SQL query)."""
    if isinstance(user, LazyObject):
        getattr(user, "is_authenticated", None)  # loads it
    return _loaded(user)


def _is_user(value: object) -> bool:
    from django.contrib.auth.base_user import AbstractBaseUser

    return isinstance(value, AbstractBaseUser) and value.is_authenticated


def state_of(request: HttpRequest) -> RequestState:
    """The state of ``request``, made when first asked. Django REST framework's ``Request``
    (which a login made in one of its views hands to Django's signals) stands for the request
    it wraps."""
    inner = request.__dict__.get("_request")
    if isinstance(inner, HttpRequest):
        request = inner
    state = request.__dict__.get(ATTRIBUTE)
    if isinstance(state, RequestState):
        return state
    state = RequestState(request)
    setattr(request, ATTRIBUTE, state)
    return state
