"""The throttle cookie and the in-process memory that spare Redis on most requests.

A browser recorded moments ago needs no write: its cookie says so, checked in microseconds without
loading the session or the user; clients that keep no cookie are remembered in the process instead
("The throttle cookie" in docs/how-it-works.md).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from whos_online.config import process
from whos_online.config.process import PerProcess
from whos_online.config.settings import secret_key

if TYPE_CHECKING:
    from collections.abc import Iterable


COOKIE_NAME: Final = "whos_online"
#: Longest cookie value that can be genuine (10-digit expiry, dot, 22-char MAC, a room's ".r"
#: and 8-character tag, an epoch's ".e" and 15 characters, ".n"), with room to spare.
MAX_COOKIE_LENGTH: Final = 72
#: Identities the in-process memory holds; the oldest is forgotten first beyond this.
MEMORY_SIZE: Final = 10_000
#: Longest binding whose MAC is remembered: a session key (32 characters with Django's database
#: and cache backends) and an address (at most 64) fit. A longer one, such as a forged 8 kB
#: session cookie, is hashed on each request and never kept, so that the cache stays a few
#: megabytes however large the cookies clients make up.
MAX_REMEMBERED_BINDING: Final = 160


@process.per_settings
def cookie_key() -> bytes:
    """The key of the cookies' MACs, derived from ``SECRET_KEY`` once per settings: reading a
    setting costs a throttled request as much as checking its remembered cookie does."""
    return hashlib.blake2b(secret_key().encode(), person=b"whos_online.ck", digest_size=32).digest()


def _mac(expiry: int, binding: str) -> str:
    key = cookie_key()
    if len(binding) > MAX_REMEMBERED_BINDING:
        return _compute_mac(expiry, binding, key)
    return _remembered_mac(expiry, binding, key)


def _compute_mac(expiry: int, binding: str, key: bytes) -> str:
    digest = hashlib.blake2b(
        f"{expiry}|{binding}".encode("utf-8", "surrogateescape"), key=key, digest_size=16
    ).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


# A browser sends the same cookie on every request for THROTTLE seconds: remembering its MAC
# spares the hashing on nearly every throttled request. A client that makes up new cookies only
# churns this cache, bounded in entries and (by MAX_REMEMBERED_BINDING) in their size, and pays
# for the hashing, as it would without it.
_remembered_mac = process.cleared_on_reset(functools.lru_cache(maxsize=MEMORY_SIZE)(_compute_mac))


def binding(session_key: str, address: str) -> str:
    """What the cookie is tied to: the session cookie's value and the client's address."""
    return f"{session_key}|{address}"


#: Ends the cookie of a browser whose visitor was not online before they were recorded, so that
#: their next page is not shown a snapshot read before then (``snapshots``). It is outside the
#: MAC: a client that adds it gets at most one fresh read of its own.
ARRIVED_SUFFIX: Final = ".n"


#: Before the tag of the room a cookie was issued for (see ``rooms.room_tag``).
ROOM_MARK: Final = ".r"
#: The room tag of a cookie issued when the room its browser is in was not known (a request
#: that moves nobody, recorded without a cookie to say where they were): it matches no room,
#: so that the browser's next page view is recorded, and says where they are.
UNKNOWN_ROOM: Final = "*"


@dataclass(frozen=True)
class ThrottleCookie:
    """What a genuine cookie says of its browser's last recorded visit."""

    #: The visit was recorded at ``expiry - THROTTLE``; no new write is needed before this.
    expiry: int
    #: The tag of the room of the visit ("" for none, ``UNKNOWN_ROOM`` if not known).
    room: str
    #: Whether the visitor was not online before that visit (see ``ARRIVED_SUFFIX``).
    arrived: bool
    #: The epoch of the visitor's shard when it was recorded ("" if the process did not know
    #: it): a cookie from before Redis lost its data spares no write (``whos_online.store.epochs``).
    epoch: str = ""

    def fresh(self, now: float) -> bool:
        return now < self.expiry


#: Before the epoch of the visitor's shard.
EPOCH_MARK: Final = ".e"


def _bound_to(binding: str, room: str, epoch: str = "") -> str:
    # Without a room or an epoch, what the MAC covers is what it always covered: such cookies
    # stay valid. (Neither a room tag nor an epoch holds "|".)
    if epoch:
        return f"{binding}|{room}|{epoch}"
    return f"{binding}|{room}" if room else binding


def make_cookie(
    binding: str,
    now: float,
    throttle: int,
    *,
    arrived: bool = False,
    room: str = "",
    epoch: str = "",
) -> str:
    """The cookie for a visit just recorded; ``room`` is the tag of the visit's room, ``epoch``
    its shard's epoch."""
    expiry = int(now) + throttle
    mac = _mac(expiry, _bound_to(binding, room, epoch))
    marks = (ROOM_MARK + room if room else "") + (EPOCH_MARK + epoch if epoch else "")
    return f"{expiry}.{mac}{marks}{ARRIVED_SUFFIX if arrived else ''}"


def _parts(value: str) -> tuple[str, str, str, str] | None:
    """The expiry, MAC, room tag and epoch of ``EXPIRY.MAC[.rTAG][.eEPOCH][.n]``, or None for
    another shape.

    A mark with nothing after it is another shape: the MAC of a visit in no room covers no tag,
    so ``EXPIRY.MAC.r`` would otherwise be a second spelling of ``EXPIRY.MAC``."""
    expiry, _, rest = value.removesuffix(ARRIVED_SUFFIX).partition(".")
    mac, *marks = rest.split(".")
    room = epoch = ""
    if marks and marks[0].startswith("r"):
        room = marks.pop(0)[1:]
        if not room:
            return None
    if marks and marks[0].startswith("e"):
        epoch = marks.pop(0)[1:]
        if not epoch:
            return None
    if marks:
        return None
    return expiry, mac, room, epoch


def cookie_room(value: str) -> str:
    """The room tag a cookie (one ``fresh_expiry`` accepted) was issued for, "" for none."""
    parts = _parts(value)
    return parts[2] if parts else ""


def arrived(value: str) -> bool:
    return value.endswith(ARRIVED_SUFFIX)


def is_fresh(value: str | None, binding: str, now: float, throttle: int) -> bool:
    """True when ``value`` is a cookie this site issued for ``binding`` and it has not expired."""
    return fresh_expiry(value, binding, now, throttle) is not None


def fresh_expiry(value: str | None, binding: str, now: float, throttle: int) -> int | None:
    """The expiry of ``value`` if it is a cookie this site issued for ``binding`` and it has not
    expired, else None. It was issued, and its browser recorded, ``throttle`` seconds before."""
    cookie = read_cookie(value, binding, now, throttle, throttle)
    return cookie.expiry if cookie is not None and cookie.fresh(now) else None


def read_cookie(
    value: str | None, binding: str, now: float, throttle: int, window: int
) -> ThrottleCookie | None:
    """What ``value`` says, if it is a cookie this site issued for ``binding`` for a visit
    recorded within the last ``window`` seconds; None for anything else."""
    if not value or len(value) > MAX_COOKIE_LENGTH:
        return None
    key = cookie_key()
    if len(binding) > MAX_REMEMBERED_BINDING:
        cookie = genuine(value, binding, key)
    else:
        cookie = _remembered_genuine(value, binding, key)
    return in_time(cookie, now, throttle, window)


def in_time(
    cookie: ThrottleCookie | None, now: float, throttle: int, window: int
) -> ThrottleCookie | None:
    """``cookie``, if it speaks of a visit recorded within the last ``window`` seconds."""
    if cookie is None:
        return None
    # The upper bound refuses a genuine cookie issued under a longer THROTTLE than today's.
    expiry = cookie.expiry
    if not (now - window < expiry - throttle and expiry <= now + throttle):
        return None
    return cookie


def genuine(value: str, binding: str, key: bytes) -> ThrottleCookie | None:
    """What ``value`` (at most ``MAX_COOKIE_LENGTH`` characters) says if this site issued it for
    ``binding`` under ``key`` (``cookie_key()``), whenever that was; not remembered here
    (``_remembered_genuine`` and ``RequestState.sent_cookie`` remember it)."""
    parts = _parts(value)
    if parts is None:
        return None
    expiry_text, mac, room, epoch = parts
    # Digits only, as ``make_cookie`` writes them: the MAC covers the number, so a leading zero
    # would make a second cookie of the same visit.
    if (
        not mac
        or not expiry_text.isascii()
        or not expiry_text.isdigit()
        or expiry_text.startswith("0")
    ):
        return None
    expiry = int(expiry_text)
    # compare_digest raises TypeError on non-ASCII text, which a client can send.
    expected = _compute_mac(expiry, _bound_to(binding, room, epoch), key)
    if mac.isascii() and hmac.compare_digest(mac, expected):
        return ThrottleCookie(expiry=expiry, room=room, arrived=arrived(value), epoch=epoch)
    return None


# A browser sends the same cookie on every request for THROTTLE seconds: remembering what it
# says spares the parsing and the hashing on nearly every throttled request (a throttled page
# view costs the middleware a few microseconds). Bounded as the MACs are, above.
_remembered_genuine = process.cleared_on_reset(functools.lru_cache(maxsize=MEMORY_SIZE)(genuine))


class RecentVisitors:
    """A bounded, thread-safe map of a person's key (``backend.keyspace``) -> time until which they
    need no new write.

    Each entry also keeps the *generation* it was written in: a number the caller takes to change
    whenever what the process stored may have been lost (``store.epochs.generation``). An entry from
    before the latest failure no longer counts, so that a visitor this process stored before an
    outage is written again, rather than handed a new cookie for a visit Redis may have lost (a
    Redis that comes back empty has forgotten them).
    """

    def __init__(self, size: int = MEMORY_SIZE) -> None:
        self._size = size
        self._until: OrderedDict[str, tuple[float, int, str]] = OrderedDict()
        self._lock = threading.Lock()

    def seen_recently(self, key: str, now: float, generation: int = 0, room: str = "") -> bool:
        """Whether ``key`` was written, in ``room`` (a room tag), within its throttle."""
        found = self.entry(key, now, generation)
        return found is not None and found[1] == room

    def entry(self, key: str, now: float, generation: int = 0) -> tuple[float, str] | None:
        """Until when ``key`` needs no new write, and the tag of the room it was written
        in, if it was written within its throttle and since Redis last failed."""
        entry = self._until.get(key)
        if entry is None or not now < entry[0] or entry[1] != generation:
            return None
        return entry[0], entry[2]

    def remember(self, key: str, until: float, generation: int = 0, room: str = "") -> None:
        with self._lock:
            self._until[key] = (until, generation, room)
            self._until.move_to_end(key)
            while len(self._until) > self._size:
                self._until.popitem(last=False)

    def forget(self, keys: Iterable[str]) -> None:
        with self._lock:
            for key in keys:
                self._until.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._until.clear()

    def __len__(self) -> int:
        return len(self._until)


_recent: Final = PerProcess(RecentVisitors)


def recent() -> RecentVisitors:
    """This process's memory of the visitors it recorded (``config.process``)."""
    return _recent.get()
