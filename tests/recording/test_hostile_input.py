"""Hostile input at request time, and what it leaves in Redis; privacy of what is stored.

Already covered elsewhere and not repeated here: an empty, "garbage" or out-of-range REMOTE_ADDR, a
16 kB X-Forwarded-For behind one proxy, tampered, expired, 4 kB, 100 kB and "garbage" throttle
cookies, UTF-8 digits in a cookie, no raw IPv4 address stored (tests/test_middleware.py);
``is_fresh`` on malformed and non-ASCII values and its hypothesis property
(tests/recording/test_cookie.py); properties of ``forwarded_candidate`` and ``normalize_ip``, and
guest pseudonyms by UTC day and SECRET_KEY at the function level (tests/recording/test_identity.py);
names with HTML or any Unicode, and the 150-character cut, through the API (tests/test_api.py) and
escaped by the tag (tests/templatetags/); deleting a user erases them from the API
(tests/test_signals.py).

This file sends what is left through Django's handler, on fakeredis and on a real redis-server:
environs built as a WSGI server builds them (header bytes decoded as latin-1, REMOTE_ADDR
missing), 100 kB and garbage X-Forwarded-For with 0 and 2 trusted proxies, truncated, 10 kB and
binary cookies (and forged, other-session and other-address ones again: the middleware tests send
those through the test client, this file through a hand-built environ), 150-character hostile
names on a rendered page, users deleted while online, a property test of the whole request path
on arbitrary header bytes, and a whole-keyspace scan for raw addresses after a realistic mix of
traffic. After each, the page answered 200 and Redis holds only well-formed keys and values.
"""

from __future__ import annotations

import ipaddress
import math
import re
import time
from datetime import datetime, timezone
from io import BytesIO, StringIO
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.template import engines
from django.test import Client, RequestFactory, override_settings
from django.test.client import ClientHandler
from django.utils.html import escape
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import whos_online
from tests.support.helpers import (
    GOOGLEBOT,
    GUEST_IP,
    client_of,
    configure,
    guest,
    keyspace_text,
    latin1,
    members,
    single_redis,
    text,
    valid_cookie,
)
from whos_online.config.settings import get_config
from whos_online.recording import throttle
from whos_online.recording import visits as recording
from whos_online.recording.guests import client_ip
from whos_online.store.users import MAX_DISPLAY_NAME_LENGTH

if TYPE_CHECKING:
    import redis
    from django.http.response import HttpResponseBase

COOKIE = throttle.COOKIE_NAME
TAG = "{% load whos_online %}{% whos_online %}"
#: A guest's or bot's stored member in the default mode: 9 bytes of keyed hash, base64url.
PSEUDONYM = re.compile(r"[A-Za-z0-9_-]{12}")
#: Every key the request path may leave (the cleanup command adds its own two).
KEY = re.compile(
    r"\{whos_online\}:(?:users|hidden|guests|bots|epoch|user:\d+|gone:\d+|peak"
    r"|visitors:\d{4}-\d\d-\d\d|counters|counters-cleaned|counter:\d+:[\w:.-]+"
    r"|hits-applied:[0-9a-f]{16})"
)


def send(path: str = "/", *, drop: tuple[str, ...] = (), **headers: str) -> HttpResponseBase:
    """GET ``path`` through Django's handler with a hand-built WSGI environ.

    Unlike the test client, nothing is added or re-encoded: ``drop`` removes keys a server might
    not send (REMOTE_ADDR behind a Unix socket), and values go in exactly as given.
    """
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": GUEST_IP,
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": BytesIO(b""),
        "wsgi.errors": StringIO(),
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        **headers,
    }
    for name in drop:
        environ.pop(name, None)
    response: HttpResponseBase = ClientHandler(enforce_csrf_checks=False)(environ)
    return response


def assert_page(response: HttpResponseBase, path: str = "/") -> None:
    assert response.status_code == 200
    content = getattr(response, "content", b"")
    assert (b"<main>page</main>" if path == "/" else b"plain") in content


def assert_no_garbage(r: redis.Redis) -> None:
    """Redis holds only the app's keys, each of its type, with well-formed members and values."""
    now = time.time()
    for raw_key in r.scan_iter():
        key = text(raw_key)
        assert KEY.fullmatch(key), key
        kind = text(r.type(raw_key))
        suffix = key.removeprefix("{whos_online}:")
        if suffix in {"users", "hidden", "guests", "bots"}:
            assert kind == "zset", key
            pairs: Any = r.zrange(raw_key, 0, -1, withscores=True)
            for member, score in pairs:
                pattern = r"\d+" if suffix in {"users", "hidden"} else PSEUDONYM
                assert re.fullmatch(pattern, member.decode()), (key, member)
                assert now - 2 * 86400 < score <= now + 60, (key, member, score)
        elif suffix.startswith("user:"):
            assert kind == "hash", key
            fields = {text(f): text(v) for f, v in r.hgetall(raw_key).items()}
            assert set(fields) == {"name", "url", "seen"}, fields
            assert len(fields["name"]) <= MAX_DISPLAY_NAME_LENGTH
            assert math.isfinite(float(fields["seen"]))
            assert 0 < r.ttl(raw_key) <= (get_config().last_seen_days + 1) * 86400
        elif suffix == "peak":
            assert kind == "hash", key
            assert set(map(text, r.hkeys(raw_key))) == {"count", "at"}
        elif suffix.startswith("visitors:"):
            # fakeredis keeps a HyperLogLog as a set; Redis as a string that PFCOUNT can read.
            assert kind in {"string", "set"}, key
            assert r.pfcount(raw_key) >= 1
        elif suffix.startswith("counter:"):
            assert kind == "hash", key
            for field, value in r.hgetall(raw_key).items():
                int(field), int(value)
        elif suffix.startswith("gone:"):
            # When a user logged out or was erased: a time, and no more, that expires.
            assert kind == "string", key
            float(text(r.get(raw_key) or b""))
            assert r.ttl(raw_key) > 0, key
        elif suffix == "epoch":
            # When it began and a random word, kept while the data lasts.
            assert kind == "string", key
            assert re.fullmatch(r"[0-9a-f]+-[\w-]{6}", text(r.get(raw_key) or b"")), key
        elif suffix.startswith("hits-applied:"):
            # The highest batch of page hits a process added, forgotten a day later.
            assert kind == "string", key
            assert int(text(r.get(raw_key) or b"0")) >= 1
            assert 0 < r.ttl(raw_key) <= 86400
        else:
            assert kind in {"zset", "hash"}, key


# REMOTE_ADDR ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("remote", "recorded"),
    [
        pytest.param(None, None, id="missing"),
        pytest.param("", None, id="empty"),
        pytest.param(" \t ", None, id="blank"),
        pytest.param("unknown", None, id="unknown"),
        pytest.param("unix:/run/gunicorn.sock", None, id="unix-socket"),
        pytest.param("203.0.113.7, 198.51.100.1", None, id="two-addresses"),
        pytest.param("::ffff:999.1.1.1", None, id="mapped-out-of-range"),
        # Lenient, and harmless: the text inside the bracket is a whole address.
        pytest.param("[2001:db8::1", "2001:db8::1", id="unclosed-bracket"),
        pytest.param("1" * 100_000, None, id="100kB"),
        pytest.param(latin1(b"\xff\xfe\xc3\x28\x00"), None, id="invalid-utf8"),
        pytest.param("203.0.113.7\r\nX-Injected: 1", None, id="header-injection"),
        pytest.param("<script>alert(1)</script>", None, id="html"),
        pytest.param("203.0.113.7:65535", GUEST_IP, id="with-port"),
        pytest.param(" 2001:DB8::0:1 ", "2001:db8::1", id="ipv6-uncanonical"),
    ],
)
def test_any_remote_addr_gives_a_page_and_at_most_a_well_formed_guest(r, remote, recorded):
    response = send(drop=("REMOTE_ADDR",)) if remote is None else send(REMOTE_ADDR=remote)
    assert_page(response)
    assert members(r, "guests") == ([guest(recorded)] if recorded else [])
    assert_no_garbage(r)


def test_unusable_remote_addr_is_still_throttled_by_its_cookie(r, redis_calls):
    # Nobody is recorded, and the cookie that says so spares the next request every Redis call.
    first = send("/plain/", REMOTE_ADDR="unknown")
    assert_page(first, "/plain/")
    cookie = first.cookies[COOKIE].value
    redis_calls.clear()
    second = send("/plain/", REMOTE_ADDR="unknown", HTTP_COOKIE=f"{COOKIE}={cookie}")
    assert_page(second, "/plain/")
    assert redis_calls.trips == []
    assert r.dbsize() == 0


# X-Forwarded-For --------------------------------------------------------------------------------

HUGE_VALID = ", ".join(["198.51.100.50"] * 7000)
HUGE_GARBAGE = latin1(bytes(range(256)) * 400)


@pytest.mark.parametrize(
    ("forwarded", "with_two_proxies"),
    [
        # However long the header, the second entry from the right is the client: never the
        # proxy's REMOTE_ADDR, which would merge every client that pads the header into one.
        pytest.param(HUGE_VALID, "198.51.100.50", id="100kB-of-addresses"),
        pytest.param(HUGE_GARBAGE, None, id="100kB-of-bytes"),
        pytest.param("," * 100_000, None, id="100kB-of-commas"),
        pytest.param(",,,,", None, id="empty-entries"),
        pytest.param(
            "x" * 100_000 + ", 198.51.100.53, 10.0.0.2", "198.51.100.53", id="100kB-of-padding"
        ),
        pytest.param("unknown, unknown", None, id="unknown"),
        pytest.param(latin1(b"\xff\xfe, \x00, 10.0.0.2"), None, id="nul-entry"),
        pytest.param("<script>, 198.51.100.50, 10.0.0.2", "198.51.100.50", id="html-further-left"),
        pytest.param(
            latin1(b"\xc3\x28, 198.51.100.51, 10.0.0.2"), "198.51.100.51", id="bytes-further-left"
        ),
        pytest.param("[2001:DB8::5]:443, 10.0.0.2", "2001:db8::5", id="ipv6-with-port"),
        pytest.param("198.51.100.52", GUEST_IP, id="fewer-entries-than-proxies"),
    ],
)
@pytest.mark.parametrize("proxies", [0, 2])
def test_any_forwarded_for_gives_a_page_and_the_right_guest(
    r, settings, redis_calls, *, proxies, forwarded, with_two_proxies
):
    configure(settings, TRUSTED_PROXY_COUNT=proxies)
    # Without trusted proxies the header is the client's own word and is never read.
    expected = GUEST_IP if proxies == 0 else with_two_proxies

    first = send(HTTP_X_FORWARDED_FOR=forwarded)

    assert_page(first)
    assert members(r, "guests") == ([guest(expected)] if expected else [])
    assert_no_garbage(r)
    # Whatever the header held, the cookie it earned names it again on the next request.
    redis_calls.clear()
    again = send(
        "/plain/",
        HTTP_X_FORWARDED_FOR=forwarded,
        HTTP_COOKIE=f"{COOKIE}={first.cookies[COOKIE].value}",
    )
    assert_page(again, "/plain/")
    assert redis_calls.trips == []


# Invalid UTF-8 in headers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "kind"),
    [
        pytest.param(latin1(b"Mozilla/5.0 \xff\xfe\xc3\x28 Firefox/125.0"), "guests", id="browser"),
        pytest.param(latin1(b"\xc0\xaf\xed\xa0\x80" * 2000), "guests", id="10kB-of-bytes"),
        pytest.param(latin1(b"Googlebot/2.1 \xff\xfe (+http://x)"), "bots", id="bot"),
        pytest.param(latin1(b"\x00"), "guests", id="nul"),
    ],
)
def test_invalid_utf8_in_the_user_agent(r, agent, kind):
    response = send(HTTP_USER_AGENT=agent)
    assert_page(response)
    assert members(r, kind) == [guest(GUEST_IP)]
    assert_no_garbage(r)


@pytest.mark.parametrize(
    "forwarded",
    [latin1(b"\xff\xfe\xfd"), latin1(b"198.51.100.7\xff"), latin1(b"\xef\xbc\x91.2.3.4")],
    ids=["bytes", "address-then-byte", "full-width-digit"],
)
def test_invalid_utf8_in_the_forwarded_for_records_nobody(r, settings, forwarded):
    configure(settings, TRUSTED_PROXY_COUNT=1)
    response = send(HTTP_X_FORWARDED_FOR=forwarded)
    assert_page(response)
    assert r.dbsize() == 0


@pytest.mark.parametrize(
    "cookie_header",
    [
        latin1(b"whos_online=\xff\xfe\xfd"),
        latin1(b"whos_online=1800000000.\xc3\x28\xc3\x28; sessionid=\xff\xfe"),
        latin1(b"\xff\xfe=\xfd; whos_online"),
        latin1(b"sessionid=" + b"\xe2\x82" * 3000),
    ],
    ids=["throttle-cookie", "both-cookies", "nameless", "6kB-session-cookie"],
)
def test_invalid_utf8_in_cookies_counts_as_no_cookie(r, db, cookie_header):
    response = send(HTTP_COOKIE=cookie_header)
    assert_page(response)
    assert members(r, "guests") == [guest(GUEST_IP)]
    assert COOKIE in response.cookies
    assert_no_garbage(r)


def test_a_valid_cookie_among_invalid_bytes_is_honoured(r, redis_calls):
    header = latin1(b"junk=\xff\xfe; other=\xc3\x28; ") + f"{COOKIE}={valid_cookie()}"
    response = send("/plain/", HTTP_COOKIE=header, HTTP_USER_AGENT=latin1(b"\xff"))
    assert_page(response, "/plain/")
    assert redis_calls.trips == []
    assert r.dbsize() == 0


def test_invalid_utf8_headers_of_a_logged_in_user(r, client, alice):
    client.force_login(alice)
    client.cookies.pop(COOKIE, None)
    whos_online.forget_user(alice)
    response = client.get(
        "/",
        HTTP_USER_AGENT=latin1(b"\xff\xfe"),
        HTTP_X_FORWARDED_FOR=latin1(b"\xc3\x28"),
        HTTP_ACCEPT_LANGUAGE=latin1(b"\xff;q=\xfe"),
    )
    assert_page(response)
    assert members(r, "users") == [str(alice.pk)]
    assert_no_garbage(r)


# Throttle cookies -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_value",
    [
        pytest.param(lambda: valid_cookie()[:-1], id="last-character-cut"),
        pytest.param(lambda: valid_cookie()[:20], id="cut-in-the-mac"),
        pytest.param(lambda: valid_cookie()[:11], id="cut-after-the-dot"),
        pytest.param(lambda: valid_cookie()[:10], id="expiry-only"),
        pytest.param(lambda: valid_cookie()[1:], id="first-digit-cut"),
        pytest.param(lambda: valid_cookie() + "A" * 10_000, id="10kB"),
        pytest.param(lambda: "A" * 10_000, id="10kB-of-A"),
        pytest.param(lambda: f"{int(time.time()) + 60}." + "x" * 22, id="forged"),
        pytest.param(lambda: valid_cookie(session_key="a" * 32), id="another-session"),
        pytest.param(lambda: valid_cookie(address="198.51.100.9"), id="another-address"),
    ],
)
def test_bad_cookie_is_absent_and_never_reaches_redis(r, make_value):
    value = make_value()
    response = send(HTTP_COOKIE=f"{COOKIE}={value}")
    assert_page(response)
    assert members(r, "guests") == [guest(GUEST_IP)]
    fresh = response.cookies[COOKIE].value
    assert fresh != value
    assert throttle.is_fresh(fresh, throttle.binding("", GUEST_IP), time.time(), 120)
    assert_no_garbage(r)


def test_cookie_of_another_users_session_does_not_skip_recording(r, alice, bob):
    # Bob's genuine cookie replayed with Alice's session: she is recorded all the same.
    bobs = Client(REMOTE_ADDR=GUEST_IP)
    bobs.force_login(bob)
    bobs.get("/plain/")
    stolen = bobs.cookies[COOKIE].value
    alices = Client(REMOTE_ADDR=GUEST_IP)
    alices.force_login(alice)
    whos_online.forget_user(alice)
    alices.cookies[COOKIE] = stolen
    response = alices.get("/plain/")
    assert_page(response, "/plain/")
    assert members(r, "users") == sorted([str(alice.pk), str(bob.pk)])
    assert response.cookies[COOKIE].value != stolen
    assert_no_garbage(r)


# Names on the page ------------------------------------------------------------------------------

#: 150 characters (Django's longest username) of markup, template syntax and any Unicode.
HOSTILE_NAME = (
    '<script>alert("x")</script><img src=x onerror=alert(1)>&amp;{{ secret }}{% now "Y" %}'
    "Zoë 👩\u200d💻 名前 مرحبا \u202eevil\u202c\x00"
)
HOSTILE_NAME += "é" * (150 - len(HOSTILE_NAME))
#: What is kept of it: all but the NUL (the override is closed, so it stays).
KEPT_NAME = HOSTILE_NAME.replace("\x00", "")


def test_a_150_character_hostile_name_is_rendered_escaped(r, client, db):
    assert len(HOSTILE_NAME) == 150
    user = get_user_model().objects.create_user(HOSTILE_NAME)
    client.force_login(user)

    response = client.get("/")

    assert_page(response)
    content = response.content.decode()
    assert f'<span class="whos-online-user" dir="auto">{escape(KEPT_NAME)}</span>' in content
    assert "&amp;amp;" in content
    assert "\x00" not in content
    for raw in ("<script>", "<img", "{{ secret }}", '{% now "Y" %}'):
        assert raw not in content.replace(escape(KEPT_NAME), "")
    assert str(datetime.now(tz=timezone.utc).year) + "Zo" not in content
    assert [u.name for u in whos_online.online_users()] == [KEPT_NAME]
    assert_no_garbage(r)


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        pytest.param("a" * 148 + "<script>" * 1000, "a" * 148 + "&lt;s", id="cut-inside-a-tag"),
        pytest.param("🦄" * 10_000, "🦄" * 150, id="10k-emoji"),
        pytest.param("bad\udcffname", "bad?name", id="lone-surrogate"),
        pytest.param(12345, "12345", id="not-a-str"),
    ],
)
def test_display_name_of_any_length_or_type_is_cut_and_escaped(
    r, client, settings, alice, *, name, shown
):
    configure(settings, DISPLAY_NAME=lambda user: name)
    client.force_login(alice)

    response = client.get("/")

    assert_page(response)
    assert f'<span class="whos-online-user" dir="auto">{shown}</span>' in response.content.decode()
    assert_no_garbage(r)


@pytest.mark.parametrize(
    ("url", "linked"),
    [
        pytest.param("/people/7/", True, id="site-path"),
        pytest.param("https://example.com/u/7", True, id="https"),
        pytest.param("HTTP://example.com/u/7", True, id="http-upper-case"),
        pytest.param("javascript:alert(1)", False, id="javascript"),
        pytest.param("JavaScript:alert(1)", False, id="javascript-mixed-case"),
        pytest.param("java\tscript:alert(1)", False, id="javascript-with-a-tab"),
        pytest.param(" javascript:alert(1)", False, id="javascript-after-a-space"),
        pytest.param("data:text/html,<script>alert(1)</script>", False, id="data"),
        pytest.param("vbscript:msgbox(1)", False, id="vbscript"),
        pytest.param("//evil.example/", False, id="another-host-without-a-scheme"),
        pytest.param("/\\evil.example/", False, id="backslash-read-as-another-host"),
        pytest.param("https:evil", False, id="https-without-a-host"),
        pytest.param("people/7/", False, id="relative-to-the-page"),
    ],
)
def test_profile_urls_are_linked_only_when_they_cannot_run_script(
    r, settings, monkeypatch, alice, staff, *, url, linked
):
    configure(settings, SHOW_NAMES_TO="everyone")
    monkeypatch.setattr(type(alice), "get_absolute_url", lambda self: url, raising=False)
    whos_online.record_user(alice)
    link = f'href="{escape(url)}"'

    tag = engines["django"].from_string("{% load whos_online %}{% whos_online %}").render({})
    document = Client().get("/online/counts.json").json()
    dashboard = client_of(staff).get("/online/").content.decode()

    assert (link in tag) is linked
    assert document["names"] == [{"name": "alice", "url": url if linked else ""}]
    assert (link in dashboard) is linked
    # The staff user's visit to the dashboard listed them too, with the same URL.
    assert {u.url for u in whos_online.online_users()} == {url if linked else ""}


def test_a_url_stored_before_it_was_checked_is_not_linked(r, alice):
    whos_online.record_user(alice)
    r.hset(f"{{whos_online}}:user:{alice.pk}", "url", "javascript:alert(1)")

    tag = engines["django"].from_string("{% load whos_online %}{% whos_online %}").render({})

    assert "javascript" not in tag
    assert [u.url for u in whos_online.online_users()] == [""]


# Users deleted while online ---------------------------------------------------------------------


def test_user_deleted_while_online_is_forgotten_and_pages_still_render(r, client, alice, bob):
    client.force_login(alice)
    whos_online.record_user(bob)
    assert "alice" in client.get("/").content.decode()
    pk = alice.pk

    alice.delete()

    # Her browser still holds a session and a fresh throttle cookie.
    page = client.get("/")
    assert_page(page)
    assert ">alice<" not in page.content.decode()
    assert ">bob<" in page.content.decode()
    assert members(r, "users") == [str(bob.pk)]
    assert r.exists(f"{{whos_online}}:user:{pk}") == 0
    assert [u.pk for u in whos_online.online_users()] == [bob.pk]
    assert whos_online.online_counts() == (1, 0, 0, 1)
    # Once the cookie has expired, the session names nobody: she is a guest now.
    client.cookies.pop(COOKIE)
    assert_page(client.get("/plain/"), "/plain/")
    assert members(r, "users") == [str(bob.pk)]
    assert members(r, "guests") == [guest(GUEST_IP)]
    assert_no_garbage(r)


def test_users_deleted_in_bulk_are_forgotten(r, alice, bob):
    whos_online.record_user(alice)
    whos_online.record_user(bob)
    get_user_model().objects.filter(pk__in=[alice.pk, bob.pk]).delete()
    assert r.dbsize() > 0
    assert members(r, "users") == []
    assert r.exists(f"{{whos_online}}:user:{alice.pk}", f"{{whos_online}}:user:{bob.pk}") == 0
    assert whos_online.online_users() == []


def test_user_deleted_behind_djangos_back_still_renders_and_can_be_forgotten(
    r, client, alice, bob, django_assert_num_queries
):
    client.force_login(alice)
    whos_online.record_user(bob)
    pk = alice.pk
    with connection.cursor() as cursor:  # no signal: as a raw SQL clean-up would do it
        cursor.execute("DELETE FROM auth_user WHERE id = %s", [pk])

    # What Redis still holds is rendered as it is, without looking the user up.
    with django_assert_num_queries(0):
        markup = engines["django"].from_string(TAG).render({}, RequestFactory().get("/"))
    assert ">alice<" in markup
    assert ">bob<" in markup
    assert {u.pk for u in whos_online.online_users()} == {pk, bob.pk}
    # Her session now names nobody: her next request is a guest's, and the page renders.
    client.cookies.pop(COOKIE, None)
    assert_page(client.get("/"))
    assert members(r, "guests") == [guest(GUEST_IP)]

    assert whos_online.forget_user(pk) is True

    assert members(r, "users") == [str(bob.pk)]
    assert r.exists(f"{{whos_online}}:user:{pk}") == 0
    assert ">alice<" not in engines["django"].from_string(TAG).render({}, RequestFactory().get("/"))
    assert_no_garbage(r)


# Properties -------------------------------------------------------------------------------------

properties = hypothesis_settings(
    database=None,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def header_bytes(max_size: int = 80) -> st.SearchStrategy[str]:
    """Header values as a WSGI server passes them: any bytes, decoded as latin-1."""
    addressy = st.lists(
        st.one_of(
            st.ip_addresses().map(str),
            st.sampled_from([" ", ",", ":", "[", "]", "%", "\xff", "\x00", "unknown"]),
        ),
        max_size=6,
    ).map("".join)
    return st.one_of(st.binary(max_size=max_size).map(latin1), addressy)


@properties
@given(
    remote=st.one_of(st.none(), header_bytes()),
    forwarded=st.one_of(st.none(), header_bytes(200)),
    agent=st.one_of(st.none(), header_bytes(), st.just(GOOGLEBOT)),
    cookie=st.one_of(st.none(), header_bytes()),
    proxies=st.integers(min_value=0, max_value=3),
)
def test_client_ip_is_none_or_a_canonical_address(remote, forwarded, agent, cookie, proxies):
    meta = {"HTTP_X_FORWARDED_FOR": forwarded, "HTTP_USER_AGENT": agent, "HTTP_COOKIE": cookie}
    request = RequestFactory().get("/", **{k: v for k, v in meta.items() if v is not None})
    if remote is None:
        del request.META["REMOTE_ADDR"]
    else:
        request.META["REMOTE_ADDR"] = remote
    with override_settings(WHOS_ONLINE={"TRUSTED_PROXY_COUNT": proxies}):
        address = client_ip(request, get_config())
    if address is not None:
        parsed = ipaddress.ip_address(address)
        assert str(parsed) == address
        assert not (isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped)


@properties
@given(
    remote=st.one_of(st.none(), header_bytes()),
    forwarded=st.one_of(st.none(), header_bytes(200)),
    agent=st.one_of(st.none(), header_bytes(), st.just(GOOGLEBOT)),
    cookie=st.one_of(st.none(), header_bytes(), st.builds("whos_online={}".format, header_bytes())),
    proxies=st.integers(min_value=0, max_value=3),
)
def test_any_headers_give_a_page_and_at_most_the_clients_member(
    db, *, remote, forwarded, agent, cookie, proxies
):
    headers = {"HTTP_X_FORWARDED_FOR": forwarded, "HTTP_USER_AGENT": agent, "HTTP_COOKIE": cookie}
    headers = {name: value for name, value in headers.items() if value is not None}
    r = single_redis()
    r.flushdb()
    throttle.recent().clear()
    # The keys are read by their names, under the prefix the settings give (not a test's own).
    with override_settings(WHOS_ONLINE={"TRUSTED_PROXY_COUNT": proxies, "ISOLATE_TESTS": False}):
        if remote is None:
            response = send("/plain/", drop=("REMOTE_ADDR",), **headers)
            request = response.wsgi_request  # type: ignore [attr-defined]
        else:
            response = send("/plain/", REMOTE_ADDR=remote, **headers)
            request = response.wsgi_request  # type: ignore [attr-defined]
        assert_page(response, "/plain/")
        address = client_ip(request, get_config())
        stored = [*members(r, "guests"), *members(r, "bots")]
        assert stored == ([guest(address)] if address else [])
        assert_no_garbage(r)


# Privacy ----------------------------------------------------------------------------------------

IPV4_CLIENTS = ["203.0.113.7", "198.51.100.23", "192.0.2.200"]
IPV6_CLIENTS = ["2001:db8::7", "2001:db8:85a3::8a2e:370:7334", "fd00:1234:5678::42"]
#: Written by clients into X-Forwarded-For, left of what the trusted proxy appended.
FORGED = ["192.0.2.99", "2001:db8:dead:beef::1"]
BOT_IPS = ["192.0.2.150", "2001:db8:b07::1"]
USER_IPS = ["198.51.100.77", "2001:db8:1::77"]
#: Recorded an hour ago through the API, then pruned by the cleanup command.
GONE_IPS = ["::ffff:192.0.2.201", "192.0.2.202", "2001:db8:60:e::1"]
PROXY_IP = "10.0.0.1"


def address_forms(address: str) -> list[str]:
    """Ways a raw address could show up in stored text."""
    parsed = ipaddress.ip_address(address)
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped:
        parsed = parsed.ipv4_mapped
    forms = {str(parsed), parsed.exploded, str(parsed).upper()}
    if isinstance(parsed, ipaddress.IPv4Address):
        forms.add(f"::ffff:{parsed}")
    else:
        forms.add(latin1(parsed.packed))
    return sorted(forms)


def test_no_raw_address_anywhere_after_a_realistic_mix_of_traffic(r, settings, alice, bob):
    configure(settings, COUNT_HITS=True, TRUSTED_PROXY_COUNT=1)
    forged = iter(FORGED * 10)
    for address in IPV4_CLIENTS + IPV6_CLIENTS:
        for path in ("/", "/plain/", "/"):
            browser = Client(REMOTE_ADDR=PROXY_IP)  # a new one each time: cookies dropped
            response = browser.get(path, HTTP_X_FORWARDED_FOR=f"{next(forged)}, {address}")
            assert response.status_code == 200
    for address in BOT_IPS:
        response = Client(REMOTE_ADDR=PROXY_IP).get(
            "/", HTTP_USER_AGENT=GOOGLEBOT, HTTP_X_FORWARDED_FOR=address
        )
        assert response.status_code == 200
    browsers = []
    for user, address in zip((alice, bob), USER_IPS, strict=True):
        browser = Client(REMOTE_ADDR=address)  # behind the proxy count: REMOTE_ADDR is used
        if user == alice:
            browser.get("/plain/")  # a guest first, who then logs in from the same address
        assert browser.get(f"/login/{user.username}/").status_code == 200
        assert browser.get("/").status_code == 200
        browsers.append(browser)
    assert browsers[1].get("/logout/").status_code == 200
    assert browsers[1].get("/plain/").status_code == 200  # bob is a guest again
    for address in GONE_IPS:
        whos_online.record_guest(address, now=time.time() - 3600)
    whos_online.update_counter("signups", 3)
    call_command("whos_online_cleanup", stdout=StringIO(), stderr=StringIO())
    assert recording.flush_hits() is True

    assert whos_online.online_counts() == (1, len(IPV4_CLIENTS + IPV6_CLIENTS) + 1, 2, 8)
    assert sum(count for _, count in whos_online.get_counter("hits", 86400)) >= 27
    everything = keyspace_text(r)
    assert len(everything) > 1000
    addresses = IPV4_CLIENTS + IPV6_CLIENTS + FORGED + BOT_IPS + USER_IPS + GONE_IPS + [PROXY_IP]
    for address in addresses:
        for form in address_forms(address):
            assert form not in everything, (address, form)
    assert_no_garbage(r)


#: Noon UTC on two days in a row.
DAY_ONE = datetime(2027, 3, 3, 12, tzinfo=timezone.utc).timestamp()
DAY_TWO = DAY_ONE + 86400


def test_the_stored_guest_member_changes_with_the_utc_day_and_the_secret_key(r, settings):
    address = "198.51.100.23"
    whos_online.record_guest(address, now=DAY_ONE)
    whos_online.record_guest(address, now=DAY_ONE + 3600)  # the same day: the same member
    (day_one,) = members(r, "guests")
    r.delete("{whos_online}:guests")

    whos_online.record_guest(address, now=DAY_TWO)
    (day_two,) = members(r, "guests")
    r.delete("{whos_online}:guests")

    settings.SECRET_KEY = "another-deployment"
    whos_online.record_guest(address, now=DAY_ONE)
    (other_key,) = members(r, "guests")

    assert len({day_one, day_two, other_key}) == 3
    for member in (day_one, day_two, other_key):
        assert PSEUDONYM.fullmatch(member)
        assert address not in member


def test_a_guest_through_the_middleware_gets_another_member_under_another_secret_key(r, settings):
    assert_page(send(REMOTE_ADDR="2001:db8::7"))
    (first,) = members(r, "guests")
    settings.SECRET_KEY = "another-deployment"
    r.delete("{whos_online}:guests")

    assert_page(send(REMOTE_ADDR="2001:db8::7"))

    (second,) = members(r, "guests")
    assert first != second
    assert "2001" not in first + second
