"""Helpers shared by the test modules: settings, what Redis holds, round trips, and sessions."""

from __future__ import annotations

import contextlib
import html
import re
import threading
import time
from importlib import import_module
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings as django_settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.template import engines
from django.test import Client, RequestFactory
from redis.cluster import RedisCluster
from redis.connection import AbstractConnection

from whos_online.config.settings import get_config
from whos_online.recording import throttle
from whos_online.recording.guests import guest_id

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    import redis
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AbstractUser
    from django.test import AsyncClient

T = TypeVar("T")

#: Long enough for any thread of the tests on a loaded machine; a deadlock would never end.
JOIN_TIMEOUT = 30
#: A name that is markup, an entity, quotes and a right-to-left override, for user and counter
#: names that must come out as text.
HOSTILE = '<img src=x onerror="alert(1)">&amp; "\u202e'
#: A user agent that the default BOT_USER_AGENTS counts as a bot.
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
#: The names rule's cases: SHOW_NAMES_TO, the reader's username (None: a guest) and whether
#: they are shown names, among the users of the ``alice`` and ``staff`` ("sam") fixtures.
NAMES_RULE_CASES = [
    ("staff", None, False),
    ("staff", "alice", False),
    ("staff", "sam", True),
    ("authenticated", None, False),
    ("authenticated", "alice", True),
    ("everyone", None, True),
]
#: The address of the test clients: the ``client`` fixture's and ``client_of``'s.
GUEST_IP = "203.0.113.7"


def configure(settings: Any, **values: object) -> None:
    """Merge ``values`` into WHOS_ONLINE, keeping the REDIS_URL of the real backend.

    Changing settings drops buffered hits and cached clients (``conf.reset``), so tests
    configure first.
    """
    settings.WHOS_ONLINE = {**getattr(settings, "WHOS_ONLINE", {}), **values}


def single_redis() -> redis.Redis:
    """The admin client, on the one Redis (fakeredis or real) that most tests run against."""
    from whos_online.backend.clients import admin_client

    client = admin_client()
    assert not isinstance(client, RedisCluster)
    return client


def hide_bob(user: AbstractBaseUser) -> bool:
    """A HIDE_USER callable, by its path ``tests.support.helpers.hide_bob``: bob is hidden."""
    return user.get_username() == "bob"


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def members(r: redis.Redis, kind: str) -> list[str]:
    """The members of one of the sorted sets of people online, sorted, once what this process
    queued is written (as a read of the site's would)."""
    from whos_online.flushing import flusher as flushing

    flushing.flush()
    return sorted(text(member) for member in r.zrange(f"{{whos_online}}:{kind}", 0, -1))


def flood_rooms(r: redis.Redis, rooms: int, *, at: float, prefix: str = "whos_online") -> None:
    """What a crawler walking ``/topic/<n>/`` leaves: the index names the rooms, all empty now."""
    pipe = r.pipeline(transaction=False)
    for start in range(0, rooms, 10_000):
        batch = range(start, min(start + 10_000, rooms))
        pipe.zadd(f"{{{prefix}}}:rooms", {f"flood:{number}": at for number in batch})
    pipe.execute()


def render(source: str, context: dict[str, Any] | None = None, request: Any = None) -> str:
    """``source`` rendered by Django's template engine, for a GET of "/" unless ``request``."""
    if request is None:
        request = RequestFactory().get("/")
    return engines["django"].from_string(source).render(context or {}, request)


def override_widget_template(settings: Any, tmp_path: Path, source: str) -> None:
    """Give the site a ``whos_online/online.html`` of its own, ``source``, as a site overrides
    the widget's template: in a templates folder ahead of the app's."""
    override = tmp_path / "whos_online" / "online.html"
    override.parent.mkdir()
    override.write_text(source)
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(tmp_path)]}]


def widget_text(markup: str, *, peak: bool = False) -> str:
    """What a visitor reads: tags stripped, entities decoded, whitespace collapsed.

    The peak line is left out unless asked for; the tests of the sentence ignore it.
    """
    if not peak:
        markup = re.sub(r'<div class="whos-online-peak"[^>]*>[^<]*</div>', "", markup)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]*>", "", markup))).strip()


def widget_urls(markup: str) -> tuple[str, str]:
    """The live and presence URLs of the room widget in ``markup``, as live.js reads them."""
    live = re.search(r'data-whos-online-live="([^"]+)"', markup)
    presence = re.search(r'data-whos-online-presence="([^"]+)"', markup)
    assert live is not None
    assert presence is not None
    return html.unescape(live.group(1)), html.unescape(presence.group(1))


def latin1(raw: bytes | str) -> str:
    """Bytes as a WSGI server hands header values to Django (PEP 3333): decoded as latin-1."""
    return raw if isinstance(raw, str) else raw.decode("latin-1")


def keyspace_text(r: redis.Redis) -> str:
    """Every key, member, field, value and score in the database; binary values as latin-1.

    Latin-1 decodes any bytes, and an ASCII text such as an address shows up in it exactly where
    it was stored.
    """
    return "\n".join(key_text(r, raw_key) for raw_key in r.scan_iter())


def key_text(r: redis.Redis, raw_key: bytes | str) -> str:
    """One key of ``keyspace_text``: its name, then what it holds, in an order that depends on
    its contents alone (a HASH's fields and a set's members sorted; a sorted set's by score)."""
    parts = [latin1(raw_key)]
    kind = text(r.type(raw_key))
    if kind == "string":
        # Byte for byte, so that a HyperLogLog's registers are searched too.
        parts.append(latin1(r.get(raw_key) or b""))
    elif kind == "hash":
        for field, value in sorted(r.hgetall(raw_key).items()):
            parts += [latin1(field), latin1(value)]
    elif kind == "zset":
        pairs: Any = r.zrange(raw_key, 0, -1, withscores=True)
        for member, score in pairs:
            parts += [latin1(member), repr(score)]
    elif kind == "set":
        parts += [latin1(member) for member in sorted(r.smembers(raw_key))]
    elif kind == "list":
        parts += [latin1(item) for item in r.lrange(raw_key, 0, -1)]
    else:
        raise AssertionError(f"unexpected type {kind} of {raw_key!r}")
    return "\n".join(parts)


def guest(ip: str) -> str:
    """The member the middleware stores today for a guest at ``ip``."""
    return guest_id(ip, get_config(), time.time())


def valid_cookie(session_key: str = "", address: str = GUEST_IP) -> str:
    """A throttle cookie the middleware honours now, for ``session_key`` at ``address``."""
    return throttle.make_cookie(throttle.binding(session_key, address), time.time(), 120)


def run_threads(targets: list[Callable[[], T]]) -> list[T]:
    """Run each target in its own thread, all released at once; re-raise the first failure."""
    start = threading.Barrier(len(targets))
    results: dict[int, T] = {}
    failures: list[BaseException] = []

    def work(index: int) -> None:
        try:
            start.wait(JOIN_TIMEOUT)
            results[index] = targets[index]()
        except BaseException as error:  # reported below, not lost in the thread
            failures.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(len(targets))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), "a thread never finished"
    if failures:
        raise failures[0]
    return [results[index] for index in range(len(targets))]


class BreakerClock:
    """The circuit breaker's monotonic clock (``whos_online.backend.connection.time``), moved by
    hand."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def log_in_quietly(client: Client | AsyncClient, user: AbstractUser) -> None:
    """Give ``client`` a session of ``user`` without sending user_logged_in.

    That is a visitor who comes back with the session of an earlier visit: the middleware alone
    has to record them.
    """
    engine = import_module(django_settings.SESSION_ENGINE)
    session = engine.SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    client.cookies[django_settings.SESSION_COOKIE_NAME] = session.session_key


def client_of(user: AbstractUser | None = None) -> Client:
    """A browser at GUEST_IP, anonymous or with a session of ``user`` (see log_in_quietly)."""
    client = Client(REMOTE_ADDR=GUEST_IP)
    if user is not None:
        log_in_quietly(client, user)
    return client


class RedisCalls:
    """Every round trip to Redis in a block, as lists of command names (one list per trip)."""

    def __init__(self) -> None:
        self.trips: list[list[str]] = []

    @property
    def commands(self) -> list[str]:
        return [name for trip in self.trips for name in trip]

    def clear(self) -> None:
        self.trips.clear()


def _command_names(packed: bytes) -> list[str]:
    # Requests are RESP arrays of bulk strings: "*N\r\n" then N times "$len\r\n<data>\r\n".
    names = []
    position = 0
    while position < len(packed):
        assert packed[position : position + 1] == b"*"
        end = packed.index(b"\r\n", position)
        count = int(packed[position + 1 : end])
        position = end + 2
        for index in range(count):
            end = packed.index(b"\r\n", position)
            length = int(packed[position + 1 : end])
            start = end + 2
            if index == 0:
                names.append(packed[start : start + length].decode().upper())
            position = start + length + 2
    return names


#: What redis-py sends once per new connection; a process pays it once, not per request.
CONNECTION_SET_UP = frozenset({"HELLO", "CLIENT", "AUTH", "SELECT"})


@contextlib.contextmanager
def counting_redis_calls() -> Iterator[RedisCalls]:
    """Record every round trip of the block at the socket boundary, which fakeredis and redis-py
    share, leaving out connection set-up."""
    calls = RedisCalls()
    original = AbstractConnection.send_packed_command

    def send_packed_command(
        self: AbstractConnection, command: Any, check_health: bool = True
    ) -> None:
        chunks = [command] if isinstance(command, (bytes, str)) else list(command)
        packed = b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks)
        names = _command_names(packed)
        if not set(names) <= CONNECTION_SET_UP:
            calls.trips.append(names)
        original(self, command, check_health)  # type: ignore [no-untyped-call]

    AbstractConnection.send_packed_command = send_packed_command  # type: ignore [method-assign]
    try:
        yield calls
    finally:
        AbstractConnection.send_packed_command = original  # type: ignore [method-assign]
