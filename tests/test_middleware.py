from __future__ import annotations

import inspect
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, cast

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction
from django.conf import settings as django_settings
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.test import AsyncRequestFactory, Client, RequestFactory
from django.utils.functional import empty
from redis.connection import Connection

import whos_online
from tests.support.helpers import (
    GOOGLEBOT,
    GUEST_IP,
    configure,
    guest,
    keyspace_text,
    log_in_quietly,
    members,
    text,
    valid_cookie,
)
from tests.support.redis_server import free_port
from whos_online.flushing import flusher as flushing
from whos_online.middleware import WhosOnlineMiddleware
from whos_online.recording import throttle

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser
    from django.http.response import HttpResponseBase

COOKIE = throttle.COOKIE_NAME


def hide_alice(user: AbstractUser) -> bool:
    return user.get_username() == "alice"


def shouted_name(user: AbstractUser) -> str:
    return f"{user.get_username().upper()}!"


def user_was_loaded(request: HttpRequest) -> bool:
    return cast("Any", request.user)._wrapped is not empty


# Throttling


@pytest.mark.parametrize("throttle_setting", [None, 30])
def test_first_request_is_recorded_and_sets_the_cookie(r, client, settings, throttle_setting):
    if throttle_setting is not None:
        configure(settings, THROTTLE=throttle_setting)
    response = client.get("/plain/")
    assert response.status_code == 200
    assert members(r, "guests") == [guest(GUEST_IP)]
    cookie = response.cookies[COOKIE]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"
    # Kept as long as the visit counts (WINDOW), sparing writes for THROTTLE seconds.
    assert cookie["max-age"] == 600
    assert cookie["secure"] == ""
    assert throttle.is_fresh(
        cookie.value, throttle.binding("", GUEST_IP), time.time(), throttle_setting or 120
    )


def test_cookie_is_secure_on_https(backend, client):
    response = client.get("/plain/", secure=True)
    assert response.cookies[COOKIE]["secure"] is True


def test_throttled_guest_request_touches_neither_redis_nor_the_database(
    r, client, redis_calls, django_assert_num_queries, db
):
    client.get("/plain/")
    score = r.zscore("{whos_online}:guests", guest(GUEST_IP))
    redis_calls.clear()
    with django_assert_num_queries(0):
        response = client.get("/plain/")
    assert response.status_code == 200
    assert redis_calls.trips == []
    assert COOKIE not in response.cookies
    assert r.zscore("{whos_online}:guests", guest(GUEST_IP)) == score


def test_throttled_user_request_loads_neither_the_session_nor_the_user(
    r, client, alice, redis_calls, django_assert_num_queries
):
    log_in_quietly(client, alice)
    first = client.get("/plain/")
    assert first.wsgi_request.session.accessed is True
    assert user_was_loaded(first.wsgi_request)
    assert members(r, "users") == [str(alice.pk)]
    assert COOKIE in first.cookies
    redis_calls.clear()
    with django_assert_num_queries(0):
        second = client.get("/plain/")
    assert second.status_code == 200
    assert redis_calls.trips == []
    assert second.wsgi_request.session.accessed is False
    assert not user_was_loaded(second.wsgi_request)


def test_throttle_zero_records_every_request(r, client, settings, redis_calls):
    configure(settings, THROTTLE=0)
    responses = [client.get("/plain/") for _ in range(3)]
    assert redis_calls.trips == [["EVALSHA"]] * 3
    # The cookie spares no write; it tells the tags that its viewer is online already.
    assert all(COOKIE in response.cookies for response in responses)
    assert not throttle.is_fresh(
        responses[-1].cookies[COOKIE].value, throttle.binding("", GUEST_IP), time.time(), 0
    )
    assert members(r, "guests") == [guest(GUEST_IP)]


def test_valid_cookie_from_elsewhere_is_honoured(r, client, redis_calls):
    client.cookies[COOKIE] = valid_cookie()
    response = client.get("/plain/")
    assert redis_calls.trips == []
    assert r.dbsize() == 0
    assert COOKIE not in response.cookies


def _forged() -> str:
    return f"{int(time.time()) + 60}.{'A' * 22}"


def _tampered_expiry() -> str:
    expiry, _, mac = valid_cookie().partition(".")
    return f"{int(expiry) - 1}.{mac}"


def _other_address() -> str:
    return valid_cookie(address="198.51.100.99")


def _other_session() -> str:
    return valid_cookie(session_key="someoneelsessessionkey0123456789")


def _expired() -> str:
    binding = throttle.binding("", GUEST_IP)
    return throttle.make_cookie(binding, time.time() - 121, 120)


def _beyond_throttle() -> str:
    # Genuine MAC, but an expiry further away than THROTTLE allows.
    binding = throttle.binding("", GUEST_IP)
    return throttle.make_cookie(binding, time.time(), 3600)


def _oversized() -> str:
    return valid_cookie() + "A" * 4000


@pytest.mark.parametrize(
    "make_value",
    [
        _forged,
        _tampered_expiry,
        _other_address,
        _other_session,
        _expired,
        _beyond_throttle,
        _oversized,
        lambda: "garbage",
        lambda: "12345",
        lambda: ".",
        lambda: "-5.abc",
    ],
    ids=[
        "forged",
        "tampered-expiry",
        "other-address",
        "other-session",
        "expired",
        "beyond-throttle",
        "oversized",
        "garbage",
        "no-mac",
        "dot",
        "negative",
    ],
)
def test_bad_cookie_counts_as_absent(r, client, make_value):
    client.cookies[COOKIE] = make_value()
    response = client.get("/plain/")
    assert response.status_code == 200
    assert members(r, "guests") == [guest(GUEST_IP)]
    assert throttle.is_fresh(
        response.cookies[COOKIE].value, throttle.binding("", GUEST_IP), time.time(), 120
    )


def test_non_ascii_or_huge_cookie_header_counts_as_absent(r, client):
    unicode_digits = "whos_online=١٢٣٤٥٦٧٨٩٠.abc"
    # WSGI carries header bytes as latin-1 text.
    response = client.get("/plain/", HTTP_COOKIE=unicode_digits.encode().decode("latin-1"))
    assert response.status_code == 200
    assert members(r, "guests") == [guest(GUEST_IP)]
    assert COOKIE in response.cookies
    response = client.get(
        "/plain/", HTTP_COOKIE="whos_online=" + "9" * 100_000, REMOTE_ADDR="198.51.100.60"
    )
    assert response.status_code == 200
    assert members(r, "guests") == sorted([guest(GUEST_IP), guest("198.51.100.60")])


def test_static_path_is_not_recorded(r, client, redis_calls):
    response = client.get("/static/app.css")
    assert response.status_code == 200
    assert redis_calls.trips == []
    assert r.dbsize() == 0
    assert COOKIE not in response.cookies


def test_custom_ignore_paths_replace_the_defaults(r, client, settings):
    configure(settings, IGNORE_PATHS=[r"^/plain/$"])
    response = client.get("/plain/")
    assert COOKIE not in response.cookies
    assert r.dbsize() == 0
    response = client.get("/static/app.css")
    assert COOKIE in response.cookies
    assert members(r, "guests") == [guest(GUEST_IP)]


# One round trip per recorded request


def test_recorded_guest_request_is_one_round_trip(backend, client, redis_calls):
    client.get("/plain/", REMOTE_ADDR="198.51.100.1")
    redis_calls.clear()
    client.cookies.clear()
    client.get("/plain/")
    assert redis_calls.trips == [["EVALSHA"]]


def test_recorded_user_request_is_one_round_trip(r, client, alice, bob, redis_calls):
    warm_up = Client(REMOTE_ADDR="198.51.100.1")
    log_in_quietly(warm_up, bob)
    warm_up.get("/plain/")  # loads the script into a fresh server
    redis_calls.clear()
    log_in_quietly(client, alice)
    client.get("/plain/")
    assert redis_calls.trips == [["EVALSHA"]]
    assert members(r, "users") == sorted([str(alice.pk), str(bob.pk)])


# Login, logout and switch of user


def test_login_is_recorded_at_once_and_replaces_the_guest(r, client, alice, redis_calls):
    client.get("/plain/")
    assert members(r, "guests") == [guest(GUEST_IP)]
    response = client.get("/login/alice/")
    assert response.status_code == 200
    assert members(r, "users") == [str(alice.pk)]
    assert members(r, "guests") == []
    assert text(r.hget(f"{{whos_online}}:user:{alice.pk}", "name") or b"") == "alice"

    # The throttle cookie was bound to the guest's session, which login rotated.
    after = client.get("/plain/")
    assert user_was_loaded(after.wsgi_request)
    assert after.wsgi_request.user == alice
    session_key = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    assert throttle.is_fresh(
        after.cookies[COOKIE].value, throttle.binding(session_key, GUEST_IP), time.time(), 120
    )

    redis_calls.clear()
    throttled = client.get("/plain/")
    assert redis_calls.trips == []
    assert not user_was_loaded(throttled.wsgi_request)


def test_login_on_a_recorded_request_binds_the_cookie_to_the_new_session(
    r, client, alice, redis_calls
):
    response = client.get("/login/alice/")
    assert members(r, "users") == [str(alice.pk)]
    assert members(r, "guests") == []
    session_key = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    assert throttle.is_fresh(
        response.cookies[COOKIE].value, throttle.binding(session_key, GUEST_IP), time.time(), 120
    )
    redis_calls.clear()
    after = client.get("/plain/")
    assert redis_calls.trips == []
    assert not user_was_loaded(after.wsgi_request)


def test_logout_is_recorded_at_once(r, client, alice):
    client.get("/login/alice/")
    client.get("/plain/")
    assert members(r, "users") == [str(alice.pk)]
    response = client.get("/logout/")
    assert response.status_code == 200
    assert members(r, "users") == []
    assert r.hget(f"{{whos_online}}:user:{alice.pk}", "seen") is not None

    after = client.get("/plain/")
    assert not after.wsgi_request.user.is_authenticated
    assert members(r, "guests") == [guest(GUEST_IP)]
    assert COOKIE in after.cookies


def test_a_guest_who_logs_in_and_out_is_a_guest_again_at_once(r, client, alice, redis_calls):
    client.get("/plain/")
    client.get("/login/alice/")
    redis_calls.clear()

    response = client.get("/logout/")

    # Off the users and back among the guests in one step.
    assert redis_calls.trips == [["EVALSHA"]]
    assert whos_online.online_counts() == (0, 1, 0, 1)
    assert members(r, "guests") == [guest(GUEST_IP)]
    # The new cookie fits what the browser sends next: the next page costs nothing.
    assert COOKIE in response.cookies
    redis_calls.clear()
    client.get("/plain/")
    assert redis_calls.trips == []


def test_a_guest_who_logged_in_browsed_and_logged_out_is_a_guest_again(r, client, alice):
    client.get("/plain/")
    client.get("/login/alice/")
    client.get("/plain/")  # a new session key: a cookie bound to it
    client.get("/logout/")

    response = client.get("/plain/")

    assert COOKIE in response.cookies
    assert whos_online.online_counts() == (0, 1, 0, 1)


def test_logout_counts_the_guest_whom_another_process_remembers(r, client, alice):
    client.get("/plain/")
    client.get("/login/alice/")
    # Another worker process served the guest's visits and still remembers recording them.
    throttle.recent().remember(f"guests:{guest(GUEST_IP)}", time.time() + 120)

    client.get("/logout/")

    assert members(r, "users") == []
    assert members(r, "guests") == [guest(GUEST_IP)]


def test_another_browser_at_the_address_of_a_guest_who_logged_in_is_counted(r, client, alice):
    client.get("/plain/")
    client.get("/login/alice/")
    assert members(r, "guests") == []

    # Someone else in the same household, on their first visit.
    Client(REMOTE_ADDR=GUEST_IP).get("/plain/")

    assert members(r, "guests") == [guest(GUEST_IP)]


def test_logout_without_guest_tracking_only_removes_the_user(r, client, settings, alice):
    configure(settings, TRACK_GUESTS=False)
    client.get("/login/alice/")

    client.get("/logout/")

    assert members(r, "users") == []
    assert members(r, "guests") == []


def test_login_of_a_bot_like_client_takes_it_off_the_bots(r, client, alice):
    client.get("/plain/", HTTP_USER_AGENT=GOOGLEBOT)
    assert members(r, "bots") == [guest(GUEST_IP)]

    client.get("/login/alice/", HTTP_USER_AGENT=GOOGLEBOT)

    assert members(r, "bots") == []
    assert members(r, "users") == [str(alice.pk)]
    # Forgotten in this process too: another bot at the address is recorded again at once.
    Client(REMOTE_ADDR=GUEST_IP).get("/plain/", HTTP_USER_AGENT=GOOGLEBOT)
    assert members(r, "bots") == [guest(GUEST_IP)]


def test_logout_of_a_bot_like_client_returns_it_to_the_bots(r, client, alice):
    client.get("/login/alice/", HTTP_USER_AGENT=GOOGLEBOT)

    client.get("/logout/", HTTP_USER_AGENT=GOOGLEBOT)

    assert members(r, "users") == []
    assert members(r, "bots") == [guest(GUEST_IP)]


def test_switching_user_lists_the_new_user_at_once(r, client, alice, bob):
    client.get("/login/alice/")
    client.get("/plain/")
    alice_score = r.zscore("{whos_online}:users", str(alice.pk))
    response = client.get("/login/bob/")
    assert response.status_code == 200
    # Django sends no user_logged_out when a login replaces another user's session: alice may
    # still be online elsewhere, so she stays until her own logout or the end of her window.
    assert members(r, "users") == sorted([str(alice.pk), str(bob.pk)])
    assert r.zscore("{whos_online}:users", str(alice.pk)) == alice_score

    after = client.get("/plain/")
    assert after.wsgi_request.user == bob
    assert COOKIE in after.cookies

    client.get("/logout/")
    assert members(r, "users") == [str(alice.pk)]
    assert members(r, "guests") == [guest(GUEST_IP)]
    assert whos_online.prune(now=time.time() + 601) == 2
    assert members(r, "users") == []


# Identity rules


def test_spoofed_forwarded_for_is_ignored_without_trusted_proxies(r, client):
    client.get("/plain/", HTTP_X_FORWARDED_FOR="198.51.100.50")
    assert members(r, "guests") == [guest(GUEST_IP)]


def test_one_trusted_proxy_uses_the_rightmost_forwarded_entry(r, client, settings):
    configure(settings, TRUSTED_PROXY_COUNT=1)
    client.get("/plain/", HTTP_X_FORWARDED_FOR="192.0.2.1, 198.51.100.50")
    assert members(r, "guests") == [guest("198.51.100.50")]


def test_client_port_in_forwarded_for_does_not_defeat_the_cookie(
    r, client, settings, alice, *, redis_calls, django_assert_num_queries
):
    # Some proxies (Azure's, for one) write "address:port"; the port changes per connection.
    configure(settings, TRUSTED_PROXY_COUNT=1)
    log_in_quietly(client, alice)
    client.get("/plain/", HTTP_X_FORWARDED_FOR="198.51.100.50:1111")
    assert members(r, "users") == [str(alice.pk)]
    redis_calls.clear()
    with django_assert_num_queries(0):
        second = client.get("/plain/", HTTP_X_FORWARDED_FOR="198.51.100.50:2222")
    assert redis_calls.trips == []
    assert not user_was_loaded(second.wsgi_request)


def test_huge_forwarded_for_is_read_from_the_right(r, client, settings):
    configure(settings, TRUSTED_PROXY_COUNT=1)
    response = client.get("/plain/", HTTP_X_FORWARDED_FOR="198.51.100.50," * 1000 + "192.0.2.9")
    assert response.status_code == 200
    assert members(r, "guests") == [guest("192.0.2.9")]


def test_an_empty_last_entry_records_nobody_rather_than_the_proxy(r, client, settings):
    configure(settings, TRUSTED_PROXY_COUNT=1)
    response = client.get("/plain/", HTTP_X_FORWARDED_FOR="198.51.100.50," * 1000)
    assert response.status_code == 200
    assert members(r, "guests") == []


def test_ipv4_mapped_ipv6_is_the_ipv4_guest(r, client):
    client.get("/plain/", REMOTE_ADDR="::ffff:203.0.113.7")
    assert members(r, "guests") == [guest(GUEST_IP)]


def test_ipv6_client_is_recorded_by_its_network(r, client, settings):
    configure(settings, GUEST_IDENTITY="ip")
    client.get("/plain/", REMOTE_ADDR="2001:DB8::1")
    assert members(r, "guests") == ["2001:db8::/64"]


def test_ipv6_client_is_recorded_by_its_whole_address_with_a_prefix_of_128(r, client, settings):
    configure(settings, GUEST_IDENTITY="ip", GUEST_IPV6_PREFIX=128)
    client.get("/plain/", REMOTE_ADDR="2001:DB8::1")
    assert members(r, "guests") == ["2001:db8::1"]


def test_addresses_rotating_inside_one_network_are_one_guest(r, settings, mid_utc_day):
    """A device's privacy addresses, or a client making up one per request inside its /64,
    count once: in the guests online, the peak and today's unique visitors."""
    for host in range(1, 301):
        Client(REMOTE_ADDR=f"2001:db8:0:7:{host:x}:{host:x}::1").get("/plain/")
    Client(REMOTE_ADDR="2001:db8:0:8::1").get("/plain/")  # the next network is someone else

    assert sorted(members(r, "guests")) == sorted(
        [guest("2001:db8:0:7::"), guest("2001:db8:0:8::")]
    )
    assert whos_online.peak().people == 2
    assert whos_online.unique_visitors() == 2


def test_the_prefix_is_configurable(r, settings):
    configure(settings, GUEST_IPV6_PREFIX=48)
    Client(REMOTE_ADDR="2001:db8:1:7::1").get("/plain/")
    Client(REMOTE_ADDR="2001:db8:1:8::1").get("/plain/")
    assert members(r, "guests") == [guest("2001:db8:1::")]


def test_ipv6_client_is_hashed_by_default(r, client):
    client.get("/plain/", REMOTE_ADDR="2001:db8::1")
    assert members(r, "guests") == [guest("2001:db8::1")]


@pytest.mark.parametrize("address", ["", "garbage", "999.1.1.1"])
def test_invalid_remote_addr_records_nothing(r, client, address):
    response = client.get("/plain/", REMOTE_ADDR=address)
    assert response.status_code == 200
    assert r.dbsize() == 0


def test_bot_is_recorded_apart_from_guests(r, client):
    client.get("/plain/", HTTP_USER_AGENT=GOOGLEBOT)
    assert members(r, "bots") == [guest(GUEST_IP)]
    assert members(r, "guests") == []


def test_track_guests_off_still_records_users(r, client, settings, alice):
    configure(settings, TRACK_GUESTS=False)
    client.get("/plain/")
    Client(REMOTE_ADDR="198.51.100.3").get("/plain/", HTTP_USER_AGENT=GOOGLEBOT)
    assert r.dbsize() == 0
    log_in_quietly(client, alice)
    client.cookies.pop(COOKIE, None)
    client.get("/plain/")
    assert members(r, "users") == [str(alice.pk)]
    assert members(r, "guests") == []
    assert members(r, "bots") == []


def _visit_everything(client: Client, user: AbstractUser) -> None:
    client.get("/plain/")
    Client(REMOTE_ADDR=GUEST_IP).get("/plain/", HTTP_USER_AGENT=GOOGLEBOT)
    log_in_quietly(client, user)
    client.cookies.pop(COOKIE, None)
    client.get("/")


def test_guest_identity_ip_stores_the_address(r, client, settings, alice):
    configure(settings, GUEST_IDENTITY="ip")
    _visit_everything(client, alice)
    assert members(r, "guests") == [GUEST_IP]
    assert members(r, "bots") == [GUEST_IP]
    assert GUEST_IP in keyspace_text(r)


def test_default_identity_stores_no_address_anywhere(r, client, alice):
    _visit_everything(client, alice)
    assert members(r, "guests") == [guest(GUEST_IP)]
    assert members(r, "bots") == [guest(GUEST_IP)]
    assert members(r, "users") == [str(alice.pk)]
    assert GUEST_IP not in keyspace_text(r)


# Clients that drop cookies


@pytest.mark.parametrize(
    ("agent", "kind"), [("Mozilla/5.0", "guests"), (GOOGLEBOT, "bots")], ids=["guest", "bot"]
)
def test_cookieless_client_costs_one_write(r, redis_calls, agent, kind):
    for _ in range(100):
        response = Client(REMOTE_ADDR=GUEST_IP).get("/plain/", HTTP_USER_AGENT=agent)
        assert response.status_code == 200
    assert redis_calls.trips == [["EVALSHA"]]
    assert members(r, kind) == [guest(GUEST_IP)]

    assert whos_online.prune(now=time.time() + 10**6) == 1
    assert members(r, kind) == []
    redis_calls.clear()
    Client(REMOTE_ADDR=GUEST_IP).get("/plain/", HTTP_USER_AGENT=agent)
    assert redis_calls.trips == [["EVALSHA"]]
    assert members(r, kind) == [guest(GUEST_IP)]


def test_cookieless_user_costs_one_write_until_forgotten(r, client, alice, bob, redis_calls):
    whos_online.record_user(bob)  # loads the script into a fresh server
    redis_calls.clear()
    log_in_quietly(client, alice)
    for _ in range(20):
        client.get("/plain/")
        client.cookies.pop(COOKIE)
    assert redis_calls.commands.count("EVALSHA") == 1
    assert members(r, "users") == sorted([str(alice.pk), str(bob.pk)])

    assert whos_online.forget_user(alice) is True  # itself a script: out of her room too
    assert members(r, "users") == [str(bob.pk)]
    redis_calls.clear()
    client.get("/plain/")
    assert redis_calls.commands.count("EVALSHA") == 1
    assert members(r, "users") == sorted([str(alice.pk), str(bob.pk)])


# Hidden users and display names


def test_hidden_user_is_counted_not_listed(r, client, settings, alice, bob):
    configure(settings, HIDE_USER="tests.test_middleware.hide_alice")
    log_in_quietly(client, alice)
    client.get("/plain/")
    other = Client(REMOTE_ADDR="198.51.100.2")
    log_in_quietly(other, bob)
    other.get("/plain/")
    assert members(r, "hidden") == [str(alice.pk)]
    assert members(r, "users") == [str(bob.pk)]
    assert whos_online.online_counts() == (2, 0, 0, 2)
    assert [user.name for user in whos_online.online_users()] == ["bob"]


def test_display_name_callable_names_the_user(r, client, settings, alice):
    configure(settings, DISPLAY_NAME="tests.test_middleware.shouted_name")
    log_in_quietly(client, alice)
    client.get("/plain/")
    assert text(r.hget(f"{{whos_online}}:user:{alice.pk}", "name") or b"") == "ALICE!"
    assert [user.name for user in whos_online.online_users()] == ["ALICE!"]


# Async and sync stacks


def _async_request(address: str) -> tuple[Any, HttpRequest]:
    async def get_response(request: HttpRequest) -> HttpResponse:
        return HttpResponse("async")

    middleware = WhosOnlineMiddleware(get_response)
    assert iscoroutinefunction(middleware)
    request = AsyncRequestFactory().get("/plain/")
    request.META["REMOTE_ADDR"] = address
    request.user = AnonymousUser()
    return middleware, request


def _answer(middleware: Any, request: HttpRequest) -> HttpResponseBase:
    async def run() -> HttpResponseBase:
        result = middleware(request)
        assert inspect.isawaitable(result)
        return cast("HttpResponseBase", await result)

    return async_to_sync(run)()


def test_async_middleware_queues_the_visit_and_never_waits_on_redis(r, settings, redis_calls):
    """Under ASGI with FLUSH_INTERVAL, a recorded request only queues its visit: the event
    loop makes no Redis call for it, and the flusher writes it."""
    configure(settings, FLUSH_INTERVAL=10)
    middleware, request = _async_request("198.51.100.20")
    redis_calls.clear()

    response = _answer(middleware, request)

    assert response.status_code == 200
    assert COOKIE in response.cookies
    assert redis_calls.trips == []
    assert whos_online.flush() is True
    assert members(r, "guests") == [guest("198.51.100.20")]


def test_async_middleware_without_an_interval_writes_in_a_thread_of_its_own(r, monkeypatch):
    """With FLUSH_INTERVAL 0, the request writes its visit before it answers, in a worker
    thread (not the event loop's), which a client that hangs up cannot cut off."""
    threads: dict[str, int] = {}
    original = flushing.current().flush

    def spy() -> frozenset[str]:
        threads["write"] = threading.get_ident()
        return original()

    monkeypatch.setattr(flushing.current(), "flush", spy)
    middleware, request = _async_request("198.51.100.20")

    async def run() -> HttpResponseBase:
        threads["loop"] = threading.get_ident()
        result = middleware(request)
        assert inspect.isawaitable(result)
        return cast("HttpResponseBase", await result)

    response = async_to_sync(run)()
    assert response.status_code == 200
    assert COOKIE in response.cookies
    assert members(r, "guests") == [guest("198.51.100.20")]
    assert threads["write"] != threads["loop"]


def test_async_client_end_to_end(r, async_client, monkeypatch):
    calls: list[str] = []
    original = WhosOnlineMiddleware.__acall__

    async def spy(self: WhosOnlineMiddleware, request: HttpRequest) -> HttpResponseBase:
        calls.append(request.path)
        return await original(self, request)

    monkeypatch.setattr(WhosOnlineMiddleware, "__acall__", spy)
    response = async_to_sync(async_client.get)("/async/")
    assert response.status_code == 200
    assert response.content == b"async"
    assert calls == ["/async/"]
    assert members(r, "guests") == [guest("127.0.0.1")]
    assert COOKIE in response.cookies


def test_async_client_records_an_authenticated_user(r, async_client, alice):
    log_in_quietly(async_client, alice)
    response = async_to_sync(async_client.get)("/async/")
    assert response.status_code == 200
    assert members(r, "users") == [str(alice.pk)]
    session_key = async_client.cookies[django_settings.SESSION_COOKIE_NAME].value
    assert throttle.is_fresh(
        response.cookies[COOKIE].value, throttle.binding(session_key, "127.0.0.1"), time.time(), 120
    )


def test_sync_middleware_is_not_a_coroutine_function(r):
    def get_response(request: HttpRequest) -> HttpResponse:
        return HttpResponse("sync")

    middleware = WhosOnlineMiddleware(get_response)
    assert not iscoroutinefunction(middleware)
    request = RequestFactory().get("/plain/", REMOTE_ADDR="198.51.100.21")
    request.user = AnonymousUser()
    response = middleware(request)
    assert isinstance(response, HttpResponse)
    assert COOKIE in response.cookies
    assert members(r, "guests") == [guest("198.51.100.21")]


# Redis down


def test_redis_down_fails_open_and_backs_off(client, settings, monkeypatch, caplog):
    settings.WHOS_ONLINE = {
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "FAILURE_BACKOFF": 3600,
        "FLUSH_INTERVAL": 0,  # each request writes its visit: the first learns Redis is down
    }
    attempts: list[int] = []
    original: Any = Connection._connect

    def counting_connect(self: Connection) -> Any:
        attempts.append(1)
        return original(self)

    monkeypatch.setattr(Connection, "_connect", counting_connect)
    caplog.set_level(logging.INFO, logger="whos_online")

    first = client.get("/plain/")
    assert first.status_code == 200
    assert COOKIE not in first.cookies
    assert len(attempts) == 1

    second = client.get("/plain/")
    page = client.get("/")
    assert second.status_code == 200
    assert page.status_code == 200
    assert b"<main>page</main>" in page.content
    assert COOKIE not in second.cookies
    assert COOKIE not in page.cookies
    assert len(attempts) == 1
    warnings = [
        record
        for record in caplog.records
        if record.name == "whos_online" and record.levelno == logging.WARNING
    ]
    assert len(warnings) == 1


def test_one_warning_per_outage_even_without_backoff(client, settings, caplog):
    settings.WHOS_ONLINE = {
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "FAILURE_BACKOFF": 0,
        "FLUSH_INTERVAL": 0,
    }
    caplog.set_level(logging.INFO, logger="whos_online")
    responses = [client.get("/plain/") for _ in range(3)]
    assert [response.status_code for response in responses] == [200, 200, 200]
    assert [COOKIE in response.cookies for response in responses] == [False, False, False]
    warnings = [
        record
        for record in caplog.records
        if record.name == "whos_online" and record.levelno == logging.WARNING
    ]
    assert len(warnings) == 1
