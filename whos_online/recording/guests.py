"""Who made a request: the client IP, the session its browser speaks for, the guest's daily
pseudonym, and whether it is a bot.

Nothing here calls Redis. What runs on every request is cached: parsing an address and deriving
the day's key (from ``SECRET_KEY``, which is why the caches are dropped when settings change) both
show up in profiles of the request path otherwise.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
from typing import TYPE_CHECKING, Final

from django.conf import settings
from django.contrib.sessions.backends.base import SessionBase
from django.core.exceptions import SynchronousOnlyOperation

from whos_online.backend.keyspace import utc_day
from whos_online.config import process
from whos_online.config.settings import secret_key

if TYPE_CHECKING:
    import re

    from django.http import HttpRequest

    from whos_online.config.settings import Config


def session_key(request: HttpRequest, *, sent: bool = False, live: bool = False) -> str:
    """The session a browser speaks for ("" for none): the one whose key it sent (``sent``),
    or by default the one it will send next, a view that logged someone in or out having given
    the session a new key; with ``live``, only if that session is alive (``live_key``).

    Without ``SessionMiddleware`` the session cookie is all there is."""
    session = None if sent else getattr(request, "session", None)
    if session is None:
        return request.COOKIES.get(session_cookie_name(), "")
    if live:
        return (live_key(session) if isinstance(session, SessionBase) else None) or ""
    return session.session_key or ""


@process.per_settings
def session_cookie_name() -> str:
    """``SESSION_COOKIE_NAME``, read once per settings (every request asks for it)."""
    return settings.SESSION_COOKIE_NAME


def live_key(session: SessionBase) -> str | None:
    """``session``'s key if its store holds it, alive; None for none, or for one logged out,
    flushed or expired.

    Django takes the key from any well-formed cookie, and loading a session makes its store
    (database, cache, cached database, file) drop a key it does not hold, or holds expired. The
    session is loaded once per request, and not at all where the request has read it already.
    A signed-cookie session cannot be revoked. An event loop may not load a session from the
    database: there the key goes unchecked, and the views that check a token, which run in a
    thread, refuse it if its session is dead."""
    key = session.session_key
    if key is None:
        return None
    try:
        session.keys()  # loads the session unless it is loaded
    except SynchronousOnlyOperation:
        return key
    return session.session_key


#: Longest text that can be an address in any form a proxy writes (``[v6%zone]:port``).
MAX_ADDRESS_LENGTH = 64


def forwarded_candidate(request: HttpRequest, trusted_proxy_count: int) -> str:
    """Return the raw address string that identifies the client, before validation.

    With N trusted proxies, each appended the address it saw to ``X-Forwarded-For``, so the
    client is the N-th entry from the right; anything further left was written by the client and
    may be forged. With fewer than N entries the request did not come through the proxies and
    REMOTE_ADDR is used. The N-th entry is the answer even when it is empty or not an address
    (then the client is unknown and nobody is recorded): falling back to REMOTE_ADDR would name
    the proxy, and merge every client that pads its header into one guest.

    The header is read from the right, N commas deep, so a header of any length costs the same.
    """
    return candidate_of(*address_headers(request, trusted_proxy_count), trusted_proxy_count)


def address_headers(request: HttpRequest, trusted_proxy_count: int) -> tuple[object, str]:
    """What the request says of its client's address: its ``REMOTE_ADDR`` (which a server may
    give as something other than text) and, behind trusted proxies, its ``X-Forwarded-For``
    ("" for none)."""
    meta = request.META
    forwarded = (meta.get("HTTP_X_FORWARDED_FOR") or "") if trusted_proxy_count else ""
    return meta.get("REMOTE_ADDR") or "", forwarded


def candidate_of(remote: object, forwarded: str, trusted_proxy_count: int) -> str:
    """``forwarded_candidate`` of a request whose ``address_headers`` are ``remote`` and
    ``forwarded``."""
    if not forwarded or not trusted_proxy_count:
        return str(remote).strip()
    end = len(forwarded)
    for _ in range(trusted_proxy_count - 1):
        end = forwarded.rfind(",", 0, end)
        if end < 0:
            return str(remote).strip()
    entry = forwarded[forwarded.rfind(",", 0, end) + 1 : end].strip()
    # Anything longer is not an address; cut, it could not fill the caches with large keys.
    return entry if len(entry) <= MAX_ADDRESS_LENGTH else ""


@functools.lru_cache(maxsize=4096)
def normalize_ip(candidate: str) -> str | None:
    """Return the canonical text of an IPv4 or IPv6 address, or ``None`` if it is not one.

    Accepts the forms proxies write: ``1.2.3.4:5678``, ``[2001:db8::1]:443`` and zone ids. An
    IPv4-mapped IPv6 address becomes the IPv4 address, so one client has one identity.
    """
    text = candidate.strip()
    if not text or len(text) > MAX_ADDRESS_LENGTH:
        return None
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    text = text.partition("%")[0]
    # The forms nearly every client has, read without ``ipaddress`` (several microseconds for an
    # IPv4 address and tens for an IPv6 one, on each new client's first request); anything
    # else, and the special ranges, as ``ipaddress`` reads them.
    if _is_canonical_ipv4(text):
        return text
    value = _ipv6_value(text)
    if value is not None and value >> 80:
        return _ipv6_text(value)
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return str(address.ipv4_mapped)
    return str(address)


def _is_canonical_ipv4(text: str) -> bool:
    """Whether ``text`` is an IPv4 address as ``ipaddress`` writes it: four decimal numbers up
    to 255, without leading zeros (which ``ipaddress`` refuses)."""
    parts = text.split(".")
    if len(parts) != 4:
        return False
    for part in parts:
        if not (part.isascii() and part.isdigit()) or len(part) > 3:
            return False
        if (part[0] == "0" and len(part) > 1) or int(part) > 255:
            return False
    return True


_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_HEXTETS: Final = 8


def _ipv6_value(text: str) -> int | None:
    """The value of an IPv6 address written in hextets alone (at most one ``::``, no dotted
    IPv4 tail, no zone), or None for any other text, which ``ipaddress`` reads instead."""
    if ":" not in text or "." in text:
        return None
    head, double, tail = text.partition("::")
    groups = head.split(":") if head else []
    if double:
        after = tail.split(":") if tail else []
        # Another "::" leaves an empty group, which is refused below.
        missing = _HEXTETS - len(groups) - len(after)
        groups += ["0"] * missing + after if missing > 0 else [""]
    if (
        len(groups) != _HEXTETS
        or not 0 < len(min(groups, key=len)) <= len(max(groups, key=len)) <= 4
    ):
        return None
    digits = "".join([group.zfill(4) for group in groups])
    return int(digits, 16) if _HEX_DIGITS.issuperset(digits) else None


def _ipv6_text(value: int) -> str:
    """``value`` as ``ipaddress`` writes an IPv6 address (RFC 5952): hextets in lower case
    without leading zeros, the first longest run of two or more zero hextets as ``::``. Not
    for the ranges it writes otherwise (IPv4-mapped ones, on Python 3.13): the callers leave
    every address below 2^80 to ``ipaddress``."""
    digits = f"{value:032x}"
    parts = [digits[start : start + 4].lstrip("0") or "0" for start in range(0, 32, 4)]
    best, best_length, start, length = 0, 0, 0, 0
    for index, part in enumerate(parts):
        if part != "0":
            length = 0
            continue
        if not length:
            start = index
        length += 1
        if length > best_length:
            best, best_length = start, length
    if best_length > 1:
        end = best + best_length
        parts[best:end] = [""]
        if best == 0:
            parts.insert(0, "")
        if end == _HEXTETS:
            parts.append("")
    return ":".join(parts)


def client_ip(request: HttpRequest, config: Config) -> str | None:
    return normalize_ip(forwarded_candidate(request, config.trusted_proxy_count))


@process.cleared_on_reset
@functools.lru_cache(maxsize=4)
def _day_key(secret: str, day: str) -> bytes:
    # A key per UTC day: the same IP gets an unrelated pseudonym tomorrow, and without
    # SECRET_KEY nobody can test which address a stored pseudonym belongs to.
    return hashlib.blake2b(
        f"{day}:{secret}".encode(), person=b"whos_online.ip", digest_size=32
    ).digest()


#: Bytes of keyed hash in a pseudonym: 72 bits, 12 base64 characters without padding. Redis
#: stores a member of 7 to 14 characters in a 16-byte allocation and one of 16 in 24 bytes, so a
#: guest online takes 94 bytes of Redis memory instead of 102 (bench/memory.py, 1 000 000 of
#: them). Two of a million guests share a pseudonym with odds of about 1 in 10^10.
PSEUDONYM_BYTES = 9


@process.cleared_on_reset
@functools.lru_cache(maxsize=8192)
def _pseudonym(ip: str, key: bytes) -> str:
    digest = hashlib.blake2b(ip.encode(), key=key, digest_size=PSEUDONYM_BYTES).digest()
    return base64.urlsafe_b64encode(digest).decode()


def guest_id(ip: str, config: Config, now: float) -> str:
    """The member stored for a guest or bot: a keyed hash of the address (of its network, for
    IPv6; see ``guest_network``), or that address itself."""
    address = guest_network(ip, config.guest_ipv6_prefix)
    if config.guest_identity == "ip":
        return address
    return _pseudonym(address, _day_key(secret_key(), utc_day(now)))


@functools.lru_cache(maxsize=4096)
def guest_network(ip: str, prefix: int) -> str:
    """``ip`` itself, or for an IPv6 address with a ``prefix`` below 128, its network in CIDR
    form (``2001:db8:1:2::/64``).

    A device on IPv6 picks a new address inside its /64 every day or so (privacy extensions), and
    anyone can pick one per request: counted by whole address, one visitor would be thousands of
    guests, and raise the peak with them. What is not an IPv6 address is returned as it is.
    """
    if prefix >= 128 or ":" not in ip:
        return ip
    value = _ipv6_value(ip)
    if value is not None and prefix > 0:
        first = value >> (128 - prefix) << (128 - prefix)
        if first >> 80:
            return f"{_ipv6_text(first)}/{prefix}"
    try:
        network = ipaddress.IPv6Network((ip, prefix), strict=False)
    except ValueError:
        return ip
    return str(network)


def daily_id(member: str, now: float) -> str:
    """What the day's unique-visitor HyperLogLog receives: always a keyed hash, whatever
    ``GUEST_IDENTITY`` says, so that nobody without ``SECRET_KEY`` can test whether a given user
    or address is among a day's visitors."""
    return _pseudonym(member, _day_key(secret_key(), utc_day(now)))


def is_bot(request: HttpRequest, config: Config) -> bool:
    if config.bot_user_agents is None:
        return False
    agent = request.META.get("HTTP_USER_AGENT") or ""
    return bool(agent) and _matches(config.bot_user_agents, str(agent)[:512])


@process.cleared_on_reset
@functools.lru_cache(maxsize=1024)
def _matches(pattern: re.Pattern[str], agent: str) -> bool:
    # The default pattern is a long case-insensitive alternation: tens of microseconds per
    # search, on every recorded anonymous request. A site sees few distinct user agents, and
    # one that sends a new one each time costs the search, as before.
    return pattern.search(agent) is not None
