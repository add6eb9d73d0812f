from __future__ import annotations

import threading
import time
from typing import Any
from unittest import mock

import pytest
from django.conf import settings as django_settings
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import whos_online
from tests.support.helpers import configure, members
from whos_online.config import settings as conf
from whos_online.recording import requests, state, throttle
from whos_online.recording.state import RequestState
from whos_online.recording.throttle import (
    ARRIVED_SUFFIX,
    MAX_COOKIE_LENGTH,
    MEMORY_SIZE,
    ROOM_MARK,
    RecentVisitors,
    binding,
    is_fresh,
    make_cookie,
)

NOW = 1_800_000_000.25
THROTTLE = 120
EXPIRY = 1_800_000_120
BINDING = binding("abcdefghijklmnopqrstuvwxyz012345", "203.0.113.7")


@pytest.fixture
def cookie() -> str:
    return make_cookie(BINDING, NOW, THROTTLE)


def test_binding_joins_session_and_address():
    assert binding("sessionkey", "203.0.113.7") == "sessionkey|203.0.113.7"
    assert binding("", "2001:db8::1") == "|2001:db8::1"


def test_cookie_shape(cookie):
    expiry, dot, mac = cookie.partition(".")
    assert expiry == str(EXPIRY)
    assert dot == "."
    assert len(mac) == 22
    assert mac.isascii()
    assert "=" not in mac
    assert len(cookie) == 33 <= MAX_COOKIE_LENGTH


def test_cookie_is_deterministic(cookie):
    assert make_cookie(BINDING, NOW, THROTTLE) == cookie
    assert make_cookie(BINDING, NOW + 0.5, THROTTLE) == cookie


def test_round_trip(cookie):
    assert is_fresh(cookie, BINDING, NOW, THROTTLE) is True


@pytest.mark.parametrize("later", [0.0, 1.0, 60.0, 119.0, 119.74])
def test_fresh_until_expiry(cookie, later):
    assert is_fresh(cookie, BINDING, NOW + later, THROTTLE) is True


@pytest.mark.parametrize("moment", [EXPIRY, EXPIRY + 0.001, EXPIRY + 1, EXPIRY + 86400])
def test_expired_is_not_fresh(cookie, moment):
    assert is_fresh(cookie, BINDING, moment, THROTTLE) is False


def test_exact_edges():
    now = 1_000_000
    value = make_cookie(BINDING, now, 10)
    assert value.startswith("1000010.")
    # expiry == now + throttle: still valid; expiry == now: expired.
    assert is_fresh(value, BINDING, now, 10) is True
    assert is_fresh(value, BINDING, 1_000_009.999, 10) is True
    assert is_fresh(value, BINDING, 1_000_010, 10) is False


def test_cookie_from_the_future_is_refused():
    # A genuine cookie issued under a longer THROTTLE reaches beyond now + throttle.
    longer = make_cookie(BINDING, NOW, THROTTLE + 1)
    assert is_fresh(longer, BINDING, NOW, THROTTLE) is False
    much_longer = make_cookie(BINDING, NOW, 86400)
    assert is_fresh(much_longer, BINDING, NOW, THROTTLE) is False
    # Once its expiry is within reach again, it is as good as a fresh one.
    assert is_fresh(longer, BINDING, NOW + 1, THROTTLE) is True


def test_cookie_issued_before_a_clock_step_back_is_refused():
    issued = make_cookie(BINDING, NOW, THROTTLE)
    assert is_fresh(issued, BINDING, NOW - 1, THROTTLE) is False


def test_zero_throttle_never_fresh(cookie):
    assert is_fresh(cookie, BINDING, NOW, 0) is False
    assert is_fresh(make_cookie(BINDING, NOW, 0), BINDING, NOW, 0) is False


@pytest.mark.parametrize(
    "other",
    [
        binding("abcdefghijklmnopqrstuvwxyz012346", "203.0.113.7"),
        binding("abcdefghijklmnopqrstuvwxyz012345", "203.0.113.8"),
        binding("", "203.0.113.7"),
        binding("abcdefghijklmnopqrstuvwxyz012345", ""),
        "",
    ],
)
def test_other_binding_is_refused(cookie, other):
    assert is_fresh(cookie, other, NOW, THROTTLE) is False


def flip(text: str, index: int) -> str:
    replacement = "A" if text[index] != "A" else "B"
    return text[:index] + replacement + text[index + 1 :]


@pytest.mark.parametrize("index", [11, 20, 32])
def test_tampered_mac_is_refused(cookie, index):
    assert is_fresh(flip(cookie, index), BINDING, NOW, THROTTLE) is False


@pytest.mark.parametrize("expiry", [EXPIRY - 1, EXPIRY - 60, EXPIRY + 1 - THROTTLE])
def test_tampered_expiry_is_refused(cookie, expiry):
    mac = cookie.partition(".")[2]
    assert is_fresh(f"{expiry}.{mac}", BINDING, NOW, THROTTLE) is False


def test_mac_of_another_expiry_is_refused():
    earlier = make_cookie(BINDING, NOW - 60, THROTTLE)
    mac = earlier.partition(".")[2]
    assert is_fresh(f"{EXPIRY}.{mac}", BINDING, NOW, THROTTLE) is False


@pytest.mark.parametrize(
    "make_bad",
    [
        pytest.param(lambda c: c.replace(".", ""), id="missing-dot"),
        pytest.param(lambda c: c.partition(".")[0], id="expiry-only"),
        pytest.param(lambda c: c.partition(".")[0] + ".", id="empty-mac"),
        pytest.param(lambda c: "." + c.partition(".")[2], id="empty-expiry"),
        pytest.param(lambda c: c + ".", id="trailing-dot"),
        pytest.param(lambda c: c + ".x", id="second-dot"),
        pytest.param(lambda c: c[:-1], id="short-mac"),
        pytest.param(lambda c: c + "=", id="padded-mac"),
        pytest.param(lambda c: c.partition(".")[2] + "." + c.partition(".")[0], id="swapped"),
        pytest.param(lambda c: "18000001x0." + c.partition(".")[2], id="non-digit"),
        pytest.param(lambda c: "-" + c, id="negative"),
        pytest.param(lambda c: "+" + c, id="plus-sign"),
        pytest.param(lambda c: " " + c, id="leading-space"),
        pytest.param(lambda c: c + " ", id="trailing-space"),
        pytest.param(lambda c: "1_800_000_120." + c.partition(".")[2], id="underscores"),
        pytest.param(lambda c: "0x6b49d278." + c.partition(".")[2], id="hex"),
        pytest.param(
            lambda c: "\u0661\u0662\u0663." + c.partition(".")[2], id="arabic-indic-digits"
        ),
        pytest.param(
            lambda c: (
                "\u0661\u0668\u0660\u0660\u0660\u0660\u0660\u0661\u0662\u0660."
                + c.partition(".")[2]
            ),
            id="arabic-indic-expiry",
        ),
        pytest.param(
            lambda c: (
                "\uff11\uff18\uff10\uff10\uff10\uff10\uff10\uff10\uff11\uff12\uff10."
                + c.partition(".")[2]
            ),
            id="full-width",
        ),
        pytest.param(lambda c: "18000001\u00b20." + c.partition(".")[2], id="superscript"),
        pytest.param(lambda c: c + "A" * (MAX_COOKIE_LENGTH - len(c) + 1), id="oversized"),
        pytest.param(lambda c: c * 1000, id="huge"),
        pytest.param(lambda c: "", id="empty"),
        pytest.param(lambda c: None, id="none"),
    ],
)
def test_malformed_cookie_is_refused(cookie, make_bad):
    assert is_fresh(make_bad(cookie), BINDING, NOW, THROTTLE) is False


@pytest.mark.parametrize(
    "make_other",
    [
        pytest.param(lambda c: "0" + c, id="leading-zero"),
        pytest.param(lambda c: "000" + c, id="leading-zeros"),
        pytest.param(lambda c: c + ROOM_MARK, id="empty-room-tag"),
        pytest.param(lambda c: c + ROOM_MARK + ARRIVED_SUFFIX, id="empty-room-tag-arrived"),
    ],
)
def test_only_the_canonical_spelling_of_a_cookie_verifies(cookie, make_other):
    """One visit, one cookie: another spelling of the same expiry and room (which the MAC
    covers as numbers and tags, not as text) is refused, so that no two values are one cookie."""
    assert is_fresh(cookie, BINDING, NOW, THROTTLE) is True
    assert is_fresh(make_other(cookie), BINDING, NOW, THROTTLE) is False


@pytest.mark.parametrize(
    "mac",
    ["\u00e9" * 22, "\u00ff" * 22, "\U0001f600" * 11, "\x00" * 22, "\udcff" * 22],
    ids=["latin-1", "y-umlaut", "emoji", "nul", "lone-surrogate"],
)
def test_non_ascii_mac_with_valid_expiry_is_refused(mac):
    # Cookie headers can carry any Latin-1 text; a crafted one must not break the request.
    assert is_fresh(f"{EXPIRY}.{mac}", BINDING, NOW, THROTTLE) is False


def test_crafted_non_ascii_cookie_does_not_break_the_page(backend, client):
    # Through the middleware: the expiry is within THROTTLE of the real clock, so the MAC
    # comparison is reached, as it is for anyone who sends such a cookie.
    expiry = int(time.time()) + 60
    response = client.get("/plain/", HTTP_COOKIE=f"whos_online={expiry}.\u00e9\u00e9\u00e9")
    assert response.status_code == 200
    assert whos_online.online_counts().guests == 1


def test_another_secret_key_refuses_the_old_cookie(settings, cookie):
    settings.SECRET_KEY = "rotated-secret-key"
    assert is_fresh(cookie, BINDING, NOW, THROTTLE) is False
    fresh = make_cookie(BINDING, NOW, THROTTLE)
    assert fresh != cookie
    assert is_fresh(fresh, BINDING, NOW, THROTTLE) is True


def test_binding_with_any_unicode_round_trips():
    odd = binding("s\u00e9ssion\udcff", "\u202e203.0.113.7")
    value = make_cookie(odd, NOW, THROTTLE)
    assert is_fresh(value, odd, NOW, THROTTLE) is True
    assert is_fresh(value, BINDING, NOW, THROTTLE) is False


# --- RecentVisitors ---------------------------------------------------------------------------


def test_unknown_identity_is_not_seen():
    memory = RecentVisitors()
    assert memory.seen_recently("guests:abc", 0.0) is False
    assert len(memory) == 0


def test_seen_recently_until_the_given_time():
    memory = RecentVisitors()
    memory.remember("guests:abc", 1000.0)
    assert memory.seen_recently("guests:abc", 880.0) is True
    assert memory.seen_recently("guests:abc", 999.999) is True
    assert memory.seen_recently("guests:abc", 1000.0) is False
    assert memory.seen_recently("guests:abc", 1001.0) is False
    assert memory.seen_recently("guests:other", 900.0) is False


def test_remember_again_extends():
    memory = RecentVisitors()
    memory.remember("u:1", 1000.0)
    memory.remember("u:1", 1100.0)
    assert memory.seen_recently("u:1", 1050.0) is True
    assert len(memory) == 1


def test_size_is_bounded_and_oldest_is_evicted():
    memory = RecentVisitors(size=3)
    for name in ("a", "b", "c", "d"):
        memory.remember(name, 1000.0)
    assert len(memory) == 3
    assert [memory.seen_recently(name, 0.0) for name in "abcd"] == [False, True, True, True]


def test_remembering_again_makes_an_entry_the_newest():
    memory = RecentVisitors(size=3)
    for name in ("a", "b", "c"):
        memory.remember(name, 1000.0)
    memory.remember("a", 1000.0)
    memory.remember("d", 1000.0)
    assert [memory.seen_recently(name, 0.0) for name in "abcd"] == [True, False, True, True]


def test_default_size():
    memory = RecentVisitors()
    for index in range(MEMORY_SIZE + 5):
        memory.remember(f"guests:{index}", 1000.0)
    assert len(memory) == MEMORY_SIZE
    assert memory.seen_recently("guests:4", 0.0) is False
    assert memory.seen_recently("guests:5", 0.0) is True


def test_forget():
    memory = RecentVisitors()
    for name in ("u:1", "u:2", "guests:x"):
        memory.remember(name, 1000.0)
    memory.forget(name for name in ["u:1", "guests:x", "never-seen"])
    assert len(memory) == 1
    assert memory.seen_recently("u:1", 0.0) is False
    assert memory.seen_recently("guests:x", 0.0) is False
    assert memory.seen_recently("u:2", 0.0) is True


def test_clear():
    memory = RecentVisitors()
    memory.remember("u:1", 1000.0)
    memory.remember("u:2", 1000.0)
    memory.clear()
    assert len(memory) == 0
    assert memory.seen_recently("u:1", 0.0) is False


def test_process_memory_is_cleared_by_reset_and_settings_change(settings):
    throttle.recent().remember("guests:abc", 2_000_000_000.0)
    conf.reset()
    assert len(throttle.recent()) == 0
    throttle.recent().remember("guests:abc", 2_000_000_000.0)
    settings.WHOS_ONLINE = {"THROTTLE": 30}
    assert len(throttle.recent()) == 0


def test_concurrent_remembering_stays_bounded():
    memory = RecentVisitors(size=100)
    threads_count, per_thread = 8, 2000
    barrier = threading.Barrier(threads_count)
    errors: list[BaseException] = []

    def work(thread: int) -> None:
        try:
            barrier.wait()
            for index in range(per_thread):
                name = f"t{thread}:{index}"
                memory.remember(name, 1000.0)
                memory.seen_recently(name, 0.0)
        except BaseException as exc:  # pragma: no cover - only on failure
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(memory) == 100
    remembered = [
        f"t{n}:{index}"
        for n in range(threads_count)
        for index in range(per_thread)
        if memory.seen_recently(f"t{n}:{index}", 0.0)
    ]
    assert len(remembered) == 100


# --- properties ---------------------------------------------------------------------------------


properties = hypothesis_settings(
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

GENUINE = make_cookie(BINDING, NOW, THROTTLE)


def in_window_expiry() -> st.SearchStrategy[str]:
    return st.integers(min_value=int(NOW) - 5, max_value=int(NOW) + THROTTLE + 5).map(str)


def cookie_texts() -> st.SearchStrategy[str]:
    """Arbitrary text, and text shaped like the cookie so the MAC check is reached."""
    mutated = st.tuples(
        st.integers(min_value=0, max_value=len(GENUINE)),
        st.integers(min_value=0, max_value=3),
        st.text(max_size=3),
    ).map(lambda t: GENUINE[: t[0]] + t[2] + GENUINE[t[0] + t[1] :])
    return st.one_of(
        st.text(),
        st.builds("{}.{}".format, in_window_expiry(), st.text()),
        st.builds(
            "{}.{}".format,
            in_window_expiry(),
            st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
        ),
        mutated,
    )


@properties
@given(cookie_texts(), st.text(max_size=80))
def test_is_fresh_never_raises_and_accepts_only_issued_cookies(value, other_binding):
    for bound in (BINDING, other_binding):
        if is_fresh(value, bound, NOW, THROTTLE):
            expiry = int(value.partition(".")[0])
            issued = make_cookie(bound, expiry - THROTTLE, THROTTLE)
            # Only the cookie this site issued for that binding and expiry, spelt as it was
            # issued (the arrival mark is outside the MAC by design).
            assert value.removesuffix(ARRIVED_SUFFIX) == issued


@properties
@given(
    session=st.text(max_size=64),
    address=st.text(max_size=64),
    now=st.floats(min_value=0, max_value=4_000_000_000),
    ttl=st.integers(min_value=1, max_value=86400),
)
def test_every_issued_cookie_round_trips(session, address, now, ttl):
    bound = binding(session, address)
    value = make_cookie(bound, now, ttl)
    assert len(value) <= MAX_COOKIE_LENGTH
    assert is_fresh(value, bound, now, ttl) is True
    assert is_fresh(value, bound, int(now) + ttl, ttl) is False


def test_forged_long_session_cookies_do_not_grow_the_mac_cache():
    """Each made-up 8 kB session cookie is a new binding to check a cookie against: checking it
    costs a hash, but keeping it would cost its 8 kB for as long as the cache holds it."""
    import tracemalloc

    now = 1_800_000_000
    forged = f"{now + 60}.{'A' * 22}"
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for n in range(2000):
            # Made per request, as the middleware does; only a cache would keep it alive.
            binding = throttle.binding(f"{n:06d}" + "s" * 8192, "192.0.2.1")
            assert throttle.fresh_expiry(forged, binding, now, 120) is None
        grown = tracemalloc.take_snapshot().compare_to(before, "filename")
    finally:
        tracemalloc.stop()
    assert sum(stat.size_diff for stat in grown) < 1_000_000  # 16 MB if they were kept


def test_the_mac_of_a_short_binding_is_remembered():
    conf.reset()
    binding = throttle.binding("k" * 32, "2001:db8::1")
    cookie = throttle.make_cookie(binding, 1_800_000_000, 120)
    assert throttle.fresh_expiry(cookie, binding, 1_800_000_000, 120) == 1_800_000_120
    assert throttle._remembered_mac.cache_info().currsize == 1


def test_a_cookie_read_again_is_neither_parsed_nor_hashed_again_but_still_expires():
    conf.reset()
    binding = throttle.binding("k" * 32, "192.0.2.1")
    cookie = throttle.make_cookie(binding, 1_800_000_000, 120, room="t1", epoch="abc")
    first = throttle.read_cookie(cookie, binding, 1_800_000_010, 120, 600)
    again = throttle.read_cookie(cookie, binding, 1_800_000_020, 120, 600)

    assert first is not None
    assert again == first
    assert throttle._remembered_genuine.cache_info().hits == 1
    assert throttle.read_cookie(cookie, binding, 1_800_000_000 + 601, 120, 600) is None
    assert (
        throttle.read_cookie(
            cookie, throttle.binding("k" * 32, "192.0.2.2"), 1_800_000_010, 120, 600
        )
        is None
    )


SESSION = "s" * 32
CLIENT = "203.0.113.7"


def sent(cookie: str, *, forwarded: str = CLIENT, session: str = SESSION) -> RequestState:
    """The state of a request that came through one proxy with ``cookie`` and ``session``."""
    request = RequestFactory().get("/", HTTP_X_FORWARDED_FOR=forwarded, REMOTE_ADDR="10.0.0.1")
    request.COOKIES.update(
        {throttle.COOKIE_NAME: cookie, django_settings.SESSION_COOKIE_NAME: session}
    )
    return RequestState(request)


def test_what_a_browser_sends_is_looked_up_once_and_stays_bound_to_it(settings):
    configure(settings, TRUSTED_PROXY_COUNT=1)
    config = conf.get_config()
    cookie = make_cookie(binding(SESSION, CLIENT), NOW, THROTTLE, room="t1", epoch="abc")
    first = sent(cookie).sent_cookie(config, NOW)
    later = sent(cookie)
    again = later.sent_cookie(config, NOW + 60)

    assert first is not None
    assert again == first
    assert state._remembered_client.cache_info().hits == 1
    assert later.address(config) == CLIENT  # worked out with it
    # Remembered by what was sent: another address or session, or a later time, is checked.
    assert sent(cookie, forwarded="203.0.113.8").sent_cookie(config, NOW) is None
    assert sent(cookie, session="t" * 32).sent_cookie(config, NOW) is None
    assert sent(cookie).sent_cookie(config, NOW + config.window + 1) is None


@pytest.mark.parametrize("proxies", [0, 1])
def test_long_address_headers_are_read_but_not_remembered(settings, proxies):
    """A proxy may pass on what a client wrote as ``REMOTE_ADDR`` as well."""
    configure(settings, TRUSTED_PROXY_COUNT=proxies)
    config = conf.get_config()
    cookie = make_cookie(binding(SESSION, CLIENT), NOW, THROTTLE)
    padded = "198.51.100.1, " * 600 + CLIENT
    request = sent(cookie, forwarded=padded).request
    if not proxies:
        request.META["REMOTE_ADDR"] = f"{CLIENT}{' ' * 600}"

    assert RequestState(request).sent_cookie(config, NOW) is not None
    assert state._remembered_client.cache_info().currsize == 0


def test_a_remembered_cookie_is_refused_once_the_secret_key_changes(settings):
    configure(settings, TRUSTED_PROXY_COUNT=1)
    cookie = make_cookie(binding(SESSION, CLIENT), NOW, THROTTLE)
    assert sent(cookie).sent_cookie(conf.get_config(), NOW) is not None

    settings.SECRET_KEY = "another secret key, rotated"

    assert sent(cookie).sent_cookie(conf.get_config(), NOW) is None


def test_a_check_that_began_under_the_old_secret_key_is_not_found_under_the_new_one(
    settings, monkeypatch
):
    """Another thread changes the settings while a check is under way: the memory is cleared
    before the check stores what it found."""
    configure(settings, TRUSTED_PROXY_COUNT=1)
    cookie = make_cookie(binding(SESSION, CLIENT), NOW, THROTTLE)
    checked = throttle.genuine

    def racing(value: str, bound: str, key: bytes) -> throttle.ThrottleCookie | None:
        found = checked(value, bound, key)
        settings.SECRET_KEY = "another secret key, rotated"
        return found

    monkeypatch.setattr(throttle, "genuine", racing)
    assert sent(cookie).sent_cookie(conf.get_config(), NOW) is not None
    monkeypatch.setattr(throttle, "genuine", checked)

    assert sent(cookie).sent_cookie(conf.get_config(), NOW) is None


class RewritesRemoteAddr:
    """A middleware after whos_online's that puts another address in ``REMOTE_ADDR``."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        request.META["REMOTE_ADDR"] = "198.51.100.9"
        return self.get_response(request)


def test_the_cookie_is_bound_to_the_address_the_request_came_with(backend, r, settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.RewritesRemoteAddr"]
    client = Client(REMOTE_ADDR="192.0.2.1")

    assert throttle.COOKIE_NAME in client.get("/plain/").cookies
    assert throttle.COOKIE_NAME not in client.get("/plain/").cookies  # throttled
    assert len(members(r, "guests")) == 1


@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize("room", ["", "t1", throttle.UNKNOWN_ROOM])
def test_the_cookie_is_handed_out_as_django_s_set_cookie_writes_it(secure, room):
    now = NOW + 0.5
    value = make_cookie(BINDING, now, THROTTLE, arrived=True, room=room, epoch="abc")
    ours, django = HttpResponse(), HttpResponse()
    ours.cookies[throttle.COOKIE_NAME] = requests.cookie_of(
        ours.cookies, value, 600, secure=secure, now=now
    )
    with mock.patch("time.time", return_value=now):
        django.set_cookie(
            throttle.COOKIE_NAME, value, max_age=600, httponly=True, samesite="Lax", secure=secure
        )

    assert ours.cookies.output() == django.cookies.output()


def test_cookies_handed_out_in_one_second_are_each_their_own():
    first, second = HttpResponse(), HttpResponse()
    for response, value in [(first, "1.a"), (second, "2.b")]:
        response.cookies[throttle.COOKIE_NAME] = requests.cookie_of(
            response.cookies, value, 600, secure=False, now=NOW
        )
    second.cookies[throttle.COOKIE_NAME]["path"] = "/elsewhere/"

    assert first.cookies[throttle.COOKIE_NAME].value == "1.a"
    assert first.cookies[throttle.COOKIE_NAME]["path"] == "/"
    assert second.cookies[throttle.COOKIE_NAME].value == "2.b"


def test_an_entry_from_before_the_latest_failure_no_longer_counts():
    memory = RecentVisitors()
    memory.remember("guests:abc", 1000.0, generation=3)
    assert memory.seen_recently("guests:abc", 900.0, generation=3) is True
    assert memory.seen_recently("guests:abc", 900.0, generation=4) is False
    memory.remember("guests:abc", 1000.0, generation=4)
    assert memory.seen_recently("guests:abc", 900.0, generation=4) is True
