"""Who may see what: a room (its token, or ``ROOM_ACCESS``) and names (``SHOW_NAMES_TO``).

A room token, a keyed MAC over the room, the viewer's session and when it was issued, proves for
``ROOM_TOKEN_MAX_AGE`` seconds that a viewer was shown a room. Names are decided without loading
the session when there is no session cookie, so that the answer to others stays cacheable.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import time
from typing import TYPE_CHECKING, Final

from django.conf import settings
from django.utils.crypto import constant_time_compare
from django.utils.http import int_to_base36

from whos_online.recording.guests import session_key
from whos_online.recording.state import state_of

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    from whos_online.config.settings import Config

    AnyUser = AbstractBaseUser | AnonymousUser


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
