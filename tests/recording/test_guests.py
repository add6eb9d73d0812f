from __future__ import annotations

import ipaddress
import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pytest
from django.test import RequestFactory
from hypothesis import HealthCheck, assume, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from whos_online.backend.keyspace import utc_day
from whos_online.config.settings import get_config
from whos_online.recording.guests import (
    MAX_ADDRESS_LENGTH,
    client_ip,
    forwarded_candidate,
    guest_id,
    guest_network,
    is_bot,
    normalize_ip,
    session_key,
)

if TYPE_CHECKING:
    from django.http import HttpRequest

REMOTE = "198.51.100.10"
CLIENT = "203.0.113.7"
#: 2027-03-03 12:00:00 UTC.
NOON = datetime(2027, 3, 3, 12, tzinfo=timezone.utc).timestamp()
#: 2027-03-04 00:00:00 UTC.
MIDNIGHT = datetime(2027, 3, 4, tzinfo=timezone.utc).timestamp()
PSEUDONYM = re.compile(r"^[A-Za-z0-9_-]{12}$")


def make_request(
    forwarded: str | None = None, remote: str | None = REMOTE, **meta: Any
) -> HttpRequest:
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    request = RequestFactory().get("/", **meta)
    if remote is None:
        del request.META["REMOTE_ADDR"]
    else:
        request.META["REMOTE_ADDR"] = remote
    return request


# --- forwarded_candidate / client_ip ------------------------------------------------------------


@pytest.mark.parametrize("forwarded", [None, "", CLIENT, f"6.6.6.6, {CLIENT}", "garbage"])
def test_no_trusted_proxy_uses_remote_addr_only(forwarded):
    assert forwarded_candidate(make_request(forwarded), 0) == REMOTE


def test_spoofed_forwarded_for_does_nothing_without_proxies(settings):
    settings.WHOS_ONLINE = {"TRUSTED_PROXY_COUNT": 0}
    honest = client_ip(make_request(), get_config())
    spoofed = client_ip(make_request("6.6.6.6"), get_config())
    assert honest == spoofed == REMOTE


def test_one_proxy_takes_the_rightmost_entry():
    # The client forged "6.6.6.6"; the trusted proxy appended the address it really saw.
    request = make_request(f"6.6.6.6, {CLIENT}", remote="10.0.0.1")
    assert forwarded_candidate(request, 1) == CLIENT


def test_one_proxy_single_entry():
    assert forwarded_candidate(make_request(CLIENT, remote="10.0.0.1"), 1) == CLIENT


def test_two_proxies_take_the_second_entry_from_the_right():
    request = make_request(f"6.6.6.6, {CLIENT}, 10.0.0.2", remote="10.0.0.1")
    assert forwarded_candidate(request, 2) == CLIENT


def test_n_proxies_take_the_nth_entry_from_the_right():
    request = make_request("1.1.1.1, 2.2.2.2, 3.3.3.3, 4.4.4.4", remote="10.0.0.1")
    assert forwarded_candidate(request, 1) == "4.4.4.4"
    assert forwarded_candidate(request, 3) == "2.2.2.2"
    assert forwarded_candidate(request, 4) == "1.1.1.1"


@pytest.mark.parametrize(("forwarded", "proxies"), [(CLIENT, 2), (f"{CLIENT}, 10.0.0.2", 3)])
def test_fewer_entries_than_proxies_uses_remote_addr(forwarded, proxies):
    assert forwarded_candidate(make_request(forwarded), proxies) == REMOTE


@pytest.mark.parametrize("forwarded", [None, ""])
def test_missing_forwarded_for_with_proxies_uses_remote_addr(forwarded):
    assert forwarded_candidate(make_request(forwarded), 1) == REMOTE


def test_spaces_around_entries_are_stripped():
    request = make_request(f"  6.6.6.6 ,   {CLIENT}  ,10.0.0.2   ", remote="10.0.0.1")
    assert forwarded_candidate(request, 2) == CLIENT
    assert forwarded_candidate(request, 1) == "10.0.0.2"


def test_remote_addr_is_stripped():
    assert forwarded_candidate(make_request(remote=f" {REMOTE} "), 0) == REMOTE


@pytest.mark.parametrize("padding", ["x" * 5000, "6.6.6.6, " * 100_000, ","])
def test_a_padded_forwarded_for_of_any_length_still_names_the_client(padding):
    """Padding is whatever the client sent; the proxies' entries on the right still count."""
    request = make_request(f"{padding},{CLIENT}, 10.0.0.2", remote="10.0.0.1")
    assert forwarded_candidate(request, 2) == CLIENT
    assert forwarded_candidate(request, 1) == "10.0.0.2"


@pytest.mark.parametrize("forwarded", [f"{CLIENT}, ", f"{CLIENT},", f"{CLIENT},   ,10.0.0.2"])
def test_an_empty_entry_where_the_client_should_be_is_nobody_not_the_proxy(forwarded):
    proxies = 2 if forwarded.endswith("10.0.0.2") else 1
    request = make_request(forwarded, remote="10.0.0.1")
    assert forwarded_candidate(request, proxies) == ""
    assert normalize_ip(forwarded_candidate(request, proxies)) is None


def test_an_entry_too_long_to_be_an_address_is_nobody():
    entry = "1" * (MAX_ADDRESS_LENGTH + 1)
    assert forwarded_candidate(make_request(f"{CLIENT}, {entry}"), 1) == ""
    assert forwarded_candidate(make_request(f"{CLIENT}, {entry[:-1]}"), 1) == entry[:-1]


def test_missing_remote_addr_gives_no_client_ip():
    request = make_request(remote=None)
    assert forwarded_candidate(request, 0) == ""
    assert client_ip(request, get_config()) is None


@pytest.mark.parametrize(
    ("forwarded", "proxies", "expected"),
    [
        (f"6.6.6.6, {CLIENT}", 1, CLIENT),
        ("6.6.6.6, [2001:DB8::1]:443", 1, "2001:db8::1"),
        ("6.6.6.6, ::ffff:203.0.113.7", 1, CLIENT),
        (f"6.6.6.6, {CLIENT}:51234, 10.0.0.2", 2, CLIENT),
        ("6.6.6.6, unknown", 1, None),
        (CLIENT, 2, REMOTE),
    ],
)
def test_client_ip_uses_the_configured_proxy_count(settings, forwarded, proxies, expected):
    settings.WHOS_ONLINE = {"TRUSTED_PROXY_COUNT": proxies}
    assert client_ip(make_request(forwarded), get_config()) == expected


# --- normalize_ip -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("  203.0.113.7\t", "203.0.113.7"),
        ("0.0.0.0", "0.0.0.0"),
        ("255.255.255.255", "255.255.255.255"),
        ("::1", "::1"),
        ("2001:db8::1", "2001:db8::1"),
        ("2001:DB8::1", "2001:db8::1"),
        ("2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"),
        ("2001:db8:0:0:0:0:0:1", "2001:db8::1"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("::ffff:cb00:7107", "203.0.113.7"),
        ("0000:0000:0000:0000:0000:ffff:cb00:7107", "203.0.113.7"),
        ("1.2.3.4:5678", "1.2.3.4"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("[::ffff:203.0.113.7]:80", "203.0.113.7"),
        ("fe80::1%eth0", "fe80::1"),
        ("[fe80::1%eth0]:443", "fe80::1"),
    ],
)
def test_normalize_ip_valid(candidate, expected):
    assert normalize_ip(candidate) == expected


def test_ipv6_forms_of_one_address_are_one_text():
    forms = [
        "2001:db8::8a2e:370:7334",
        "2001:0DB8:0000:0000:0000:8A2E:0370:7334",
        "[2001:db8:0:0:0:8a2e:370:7334]:8443",
        "2001:db8::8a2e:370:7334%en0",
    ]
    assert {normalize_ip(form) for form in forms} == {"2001:db8::8a2e:370:7334"}


@pytest.mark.parametrize(
    "candidate",
    [
        "",
        "   ",
        "unknown",
        "not an ip",
        "1.2.3",
        "256.1.1.1",
        "1.2.3.4.5",
        "1.2.3.-4",
        "2001:db8:::1",
        "2001:db8::g",
        "[]:443",
        ":443",
        "%eth0",
        "1" * 65,
        "1.2.3.4" + " " * 60 + "x",
        "2001:db8::1" * 10,
        "\u0661.\u0662.\u0663.\u0664",  # Arabic-Indic digits
        "\uff11.\uff12.\uff13.\uff14",  # full-width digits
        "1.2.3.4\u200b",  # zero-width space
        "2001:db8::\uff41",
        "1.2.3.4\x00",
        "\u00e9",
    ],
)
def test_normalize_ip_rejects_garbage(candidate):
    assert normalize_ip(candidate) is None


# --- guest_id -----------------------------------------------------------------------------------


def test_hashed_guest_id_is_not_the_ip():
    config = get_config()
    assert config.guest_identity == "hashed-ip"
    member = guest_id(CLIENT, config, NOON)
    assert PSEUDONYM.match(member)
    assert CLIENT not in member
    for part in ("203", "113"):
        assert part not in member


def test_hashed_ipv6_guest_id_contains_no_part_of_it():
    member = guest_id("2001:db8::8a2e:370:7334", get_config(), NOON)
    assert PSEUDONYM.match(member)
    for part in ("2001", "db8", "8a2e", "7334"):
        assert part not in member.lower()


def test_different_ips_get_different_ids():
    config = get_config()
    assert guest_id(CLIENT, config, NOON) != guest_id("203.0.113.8", config, NOON)


def test_hashed_guest_id_is_stable_within_a_utc_day():
    config = get_config()
    start_of_day = MIDNIGHT - 86400
    ids = {
        guest_id(CLIENT, config, moment)
        for moment in (start_of_day, start_of_day + 1, NOON, MIDNIGHT - 1, MIDNIGHT - 0.001)
    }
    assert len(ids) == 1


def test_hashed_guest_id_changes_at_midnight_utc():
    config = get_config()
    before = guest_id(CLIENT, config, MIDNIGHT - 0.001)
    after = guest_id(CLIENT, config, MIDNIGHT)
    assert before != after
    assert guest_id(CLIENT, config, MIDNIGHT + 86399) == after
    assert guest_id(CLIENT, config, MIDNIGHT + 86400) not in {before, after}


def test_day_changes_at_midnight_utc():
    assert utc_day(MIDNIGHT - 0.001) == "2027-03-03"
    assert utc_day(MIDNIGHT) == "2027-03-04"


def test_hashed_guest_id_depends_on_secret_key(settings):
    first = guest_id(CLIENT, get_config(), NOON)
    settings.SECRET_KEY = "another-secret-key"
    second = guest_id(CLIENT, get_config(), NOON)
    assert first != second
    settings.SECRET_KEY = "whos-online-tests"
    assert guest_id(CLIENT, get_config(), NOON) == first


def test_ip_mode_returns_the_ip(settings):
    settings.WHOS_ONLINE = {"GUEST_IDENTITY": "ip"}
    config = get_config()
    assert guest_id(CLIENT, config, NOON) == CLIENT
    assert guest_id("2001:db8::1", config, MIDNIGHT) == "2001:db8::/64"


# --- is_bot -------------------------------------------------------------------------------------

BOTS = [
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Googlebot/2.1; "
    "+http://www.google.com/bot.html) Chrome/124.0.6367.155 Safari/537.36",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)",
    "DuckDuckBot/1.1; (+http://duckduckgo.com/duckduckbot.html)",
    "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
    "curl/8.0.1",
    "Wget/1.21.4",
    "python-requests/2.31.0",
    "Python-urllib/3.11",
    "Go-http-client/1.1",
]

BROWSERS = [
    # Chrome on Windows
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36",
    # Chrome on Android
    "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Mobile Safari/537.36",
    # Firefox on Linux
    "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
    # Safari on macOS
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.4 Safari/605.1.15",
    # Safari on iPhone
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
    # Edge on Windows
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.80",
]

#: People browsing inside a mobile app: browsers, not crawlers.
IN_APP_BROWSERS = [
    "Mozilla/5.0 (iPhone; CPU iPhone OS 16_6 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Mobile/15E148 [Pinterest/iOS]",
    "Mozilla/5.0 (Linux; Android 13; SM-S918B Build/TP1A.220624.014; wv) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Version/4.0 Chrome/120.0.6099.144 Mobile Safari/537.36 "
    "Telegram-Android/10.5.0 (Samsung SM-S918B; Android 13; SDK 33; HIGH)",
]


@pytest.mark.parametrize("agent", BOTS)
def test_default_regex_knows_common_crawlers(agent):
    assert is_bot(make_request(HTTP_USER_AGENT=agent), get_config()) is True


@pytest.mark.parametrize("agent", BROWSERS)
def test_default_regex_lets_browsers_through(agent):
    assert is_bot(make_request(HTTP_USER_AGENT=agent), get_config()) is False


@pytest.mark.parametrize("agent", IN_APP_BROWSERS)
def test_default_regex_lets_in_app_browsers_through(agent):
    assert is_bot(make_request(HTTP_USER_AGENT=agent), get_config()) is False


def test_missing_or_empty_user_agent_is_not_a_bot():
    config = get_config()
    assert is_bot(make_request(), config) is False
    assert is_bot(make_request(HTTP_USER_AGENT=""), config) is False


def test_bot_user_agents_none_disables_bots(settings):
    settings.WHOS_ONLINE = {"BOT_USER_AGENTS": None}
    config = get_config()
    for agent in BOTS:
        assert is_bot(make_request(HTTP_USER_AGENT=agent), config) is False


def test_custom_bot_regex_replaces_the_default(settings):
    settings.WHOS_ONLINE = {"BOT_USER_AGENTS": r"^InternalProbe/"}
    config = get_config()
    assert is_bot(make_request(HTTP_USER_AGENT="InternalProbe/2.0"), config) is True
    assert is_bot(make_request(HTTP_USER_AGENT=BOTS[0]), config) is False


# --- properties ---------------------------------------------------------------------------------


properties = hypothesis_settings(
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def address_texts() -> st.SearchStrategy[str]:
    """Text shaped like what proxies write, from real addresses, plus noise."""
    address = st.ip_addresses()
    shaped = st.one_of(
        address.map(str),
        address.map(lambda a: a.exploded),
        address.map(lambda a: str(a).upper()),
        st.builds("{}:{}".format, st.ip_addresses(v=4), st.integers(0, 65535)),
        st.builds("[{}]:{}".format, st.ip_addresses(v=6), st.integers(0, 65535)),
        st.ip_addresses(v=6).map(lambda a: f"{a}%eth0"),
        st.ip_addresses(v=4).map(lambda a: f"::ffff:{a}"),
    )
    return st.one_of(st.text(), shaped, shaped.map(lambda s: f" {s}\t"))


@properties
@given(address_texts())
def test_normalize_ip_never_raises_and_returns_a_canonical_address(candidate):
    result = normalize_ip(candidate)
    if result is not None:
        parsed = ipaddress.ip_address(result)
        assert str(parsed) == result
        assert normalize_ip(result) == result
        assert not (isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped)


@properties
@given(st.ip_addresses())
def test_normalize_ip_accepts_every_address(address):
    expected = address
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        expected = address.ipv4_mapped
    assert normalize_ip(str(address)) == str(expected)
    assert normalize_ip(address.exploded) == str(expected)


@properties
@given(
    forwarded=st.one_of(
        st.none(),
        st.text(),
        st.lists(address_texts(), max_size=25).map(", ".join),
    ),
    remote=st.one_of(st.none(), st.text(), address_texts()),
    proxies=st.integers(min_value=0, max_value=20),
)
def test_forwarded_candidate_never_raises(forwarded, remote, proxies):
    request = make_request(forwarded, remote=remote)
    candidate = forwarded_candidate(request, proxies)
    assert candidate == candidate.strip()
    if proxies == 0:
        assert candidate == (remote or "").strip()
    result = normalize_ip(candidate)
    assert result is None or str(ipaddress.ip_address(result)) == result


@pytest.mark.parametrize(
    ("address", "prefix", "network"),
    [
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::/64"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 48, "2001:db8:1::/48"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 127, "2001:db8:1:2:aaaa:bbbb:cccc:dddc/127"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 128, "2001:db8:1:2:aaaa:bbbb:cccc:dddd"),
        ("203.0.113.7", 64, "203.0.113.7"),
        ("not an address", 64, "not an address"),
    ],
)
def test_guest_network(address, prefix, network):
    assert guest_network(address, prefix) == network


def test_one_pseudonym_per_ipv6_network(settings):
    config = get_config()
    now = 1_800_000_000.0
    assert guest_id("2001:db8::1", config, now) == guest_id("2001:db8::ffff:1", config, now)
    assert guest_id("2001:db8::1", config, now) != guest_id("2001:db8:0:1::1", config, now)


@properties
@given(st.ip_addresses(v=6), st.integers(min_value=0, max_value=128))
def test_guest_network_is_what_ipaddress_makes_of_it(address, prefix):
    # The common forms are read without ipaddress (clients._ipv6_value): the same text.
    canonical = normalize_ip(str(address))
    assume(canonical is not None and ":" in canonical)
    expected = (
        canonical
        if prefix == 128
        else str(ipaddress.IPv6Network((canonical, prefix), strict=False))
    )
    assert guest_network(canonical, prefix) == expected
    assert guest_network(address.exploded.upper(), prefix) == (
        expected if prefix < 128 else address.exploded.upper()
    )


def test_the_session_cookie_is_read_under_the_name_the_settings_give_it_now(settings):
    request = RequestFactory().get("/")
    request.COOKIES = {"sessionid": "by-the-default-name", "site_session": "by-the-site-s-name"}
    assert session_key(request) == "by-the-default-name"

    settings.SESSION_COOKIE_NAME = "site_session"

    assert session_key(request) == "by-the-site-s-name"
