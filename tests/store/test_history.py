"""What every recorded visit writes besides presence: the online counters, the all-time peak
and the day's unique visitors (``lua/record.lua``), and how the template tag shows them."""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from datetime import date, datetime, timedelta, timezone
from io import StringIO
from types import SimpleNamespace
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.support.helpers import configure, render, run_threads, widget_text
from whos_online import api, apps
from whos_online.api import Peak
from whos_online.backend.clients import admin_client
from whos_online.config.settings import get_config
from whos_online.flushing import batches
from whos_online.reading import snapshots
from whos_online.recording import guests
from whos_online.store import items, record

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis

    from tests.support.helpers import RedisCalls

#: 2100-01-04 00:00 UTC, the start of a slice at every default precision (a multiple of 432000 s).
#: Far off, so that the visitor keys it writes, which expire LAST_SEEN_DAYS after their day, live.
T0 = 4_102_704_000
DAY = 86400
DEFAULT_PRECISIONS = (1, 5, 60, 300, 3600, 18000, 86400)
KINDS = ("users", "guests", "bots")
#: Frozen "now" of the API for the tests that read today's figures: 2100-01-04 10:00:30 UTC.
NOW = T0 + 10 * 3600 + 30
TODAY = date(2100, 1, 4)
TAG = "{% load whos_online %}{% whos_online %}"


def ip(number: int) -> str:
    return f"10.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"


def online(kind: str, precision: int) -> list[tuple[int, int]]:
    return api.get_counter(f"online:{kind}", precision)


def utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc)


@pytest.fixture
def clock(monkeypatch) -> float:
    """Freeze the API's clock at NOW: "online now" and "today" are then those of NOW."""
    monkeypatch.setattr(api, "time", SimpleNamespace(time=lambda: NOW))
    monkeypatch.setattr(
        snapshots, "time", SimpleNamespace(time=lambda: NOW, monotonic=time.monotonic)
    )
    return NOW


# --- online counters ----------------------------------------------------------------------------


def test_every_visit_samples_each_kind_at_every_precision(backend, r, hiding_bob, alice, bob):
    visits: list[Callable[[], bool]] = [
        lambda: api.record_user(alice, now=T0),
        lambda: api.record_user(bob, now=T0 + 1),  # hidden: counted with the users
        lambda: api.record_guest("192.0.2.1", now=T0 + 2),
        lambda: api.record_guest("192.0.2.2", now=T0 + 3),
        lambda: api.record_guest("192.0.2.3", bot=True, now=T0 + 4),
    ]
    for visit in visits:
        assert visit() is True

    # A visit samples all three counts, zeros included.
    assert online("users", 1) == [(T0, 1), (T0 + 1, 2), (T0 + 2, 2), (T0 + 3, 2), (T0 + 4, 2)]
    assert online("guests", 1) == [(T0, 0), (T0 + 1, 0), (T0 + 2, 1), (T0 + 3, 2), (T0 + 4, 2)]
    assert online("bots", 1) == [(T0, 0), (T0 + 1, 0), (T0 + 2, 0), (T0 + 3, 0), (T0 + 4, 1)]
    for precision in DEFAULT_PRECISIONS[1:]:
        assert online("users", precision) == [(T0, 2)], precision
        assert online("guests", precision) == [(T0, 2)], precision
        assert online("bots", precision) == [(T0, 1)], precision
    # Each counter HASH is named in the known set, which the cleaning walks.
    assert sorted(m.decode() for m in r.zrange("{whos_online}:counters", 0, -1)) == sorted(
        f"{precision}:online:{kind}" for precision in DEFAULT_PRECISIONS for kind in KINDS
    )


def test_a_slice_keeps_the_largest_count_seen_in_it(backend, alice, bob, monkeypatch):
    api.record_user(alice, now=T0)
    api.record_user(bob, now=T0 + 1)
    with monkeypatch.context() as clock:
        clock.setattr(time, "time", lambda: T0 + 1.5)
        apps.remove_logout(None, None, bob)
    api.record_user(alice, now=T0 + 2)  # one user now, in the 5-second slice that saw two
    api.record_user(alice, now=T0 + 5)  # a new slice starts at the current count

    assert online("users", 1) == [(T0, 1), (T0 + 1, 2), (T0 + 2, 1), (T0 + 5, 1)]
    assert online("users", 5) == [(T0, 2), (T0 + 5, 1)]
    for precision in DEFAULT_PRECISIONS[2:]:
        assert online("users", precision) == [(T0, 2)], precision


def test_members_past_the_window_are_not_counted(backend):
    api.record_guest("192.0.2.1", now=T0)
    api.record_guest("192.0.2.2", now=T0 + 1)
    # WINDOW is 600: the first guest has left, the second is on the edge and still counts.
    api.record_guest("192.0.2.3", now=T0 + 601)
    api.record_guest("192.0.2.3", now=T0 + 700)  # now the second has left too

    assert online("guests", 1) == [(T0, 1), (T0 + 1, 2), (T0 + 601, 2), (T0 + 700, 1)]
    assert online("guests", 60) == [(T0, 2), (T0 + 600, 2), (T0 + 660, 1)]
    assert online("guests", 300) == [(T0, 2), (T0 + 600, 2)]
    assert online("guests", 3600) == [(T0, 2)]


@pytest.mark.parametrize(
    ("precisions", "expected"),
    [
        (DEFAULT_PRECISIONS, (True, True, True, True, True, False, True)),
        ((5, 7, 60), (False, False, True)),
        ((2, 6, 9, 18), (False, False, True, True)),
        ((60,), (True,)),
    ],
)
def test_early_stop_only_where_every_coarser_precision_is_a_multiple(precisions, expected):
    assert record._may_stop(precisions) == expected


def test_a_coarser_slice_that_is_no_multiple_is_written_despite_a_full_finer_one(backend, alice):
    # The 18000-second slice from T0 + 72000 runs over midnight into the next day's slice.
    api.record_user(alice, now=T0 + DAY - 1)
    api.record_user(alice, now=T0 + DAY + 1)

    assert online("users", 18000) == [(T0 + 72000, 1)]
    assert online("users", 86400) == [(T0, 1), (T0 + DAY, 1)]


def test_a_coarser_slice_after_a_precision_that_divides_nothing(backend, settings, alice):
    configure(settings, COUNTER_PRECISIONS=[5, 7, 60])
    # T0 - 1 and T0 share a 7-second slice (T0 % 7 == 3) but not a 60-second one.
    api.record_user(alice, now=T0 - 1)
    api.record_user(alice, now=T0)

    assert online("users", 5) == [(T0 - 5, 1), (T0, 1)]
    assert online("users", 7) == [(T0 - 3, 1)]
    assert online("users", 60) == [(T0 - 60, 1), (T0, 1)]


def properties(backend: str) -> hypothesis_settings:
    # fakeredis runs the same script about three times slower: fewer examples there keep the
    # file fast, and the real server gets the full run.
    return hypothesis_settings(
        database=None,
        deadline=None,
        max_examples=40 if backend == "real" else 20,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


#: Who visits in the property test: (kind, name); a bot may share a guest's address.
VISITORS = (
    ("users", "alice"),
    ("users", "bob"),
    *(("guests", f"192.0.2.{n}") for n in range(1, 5)),
    ("bots", "192.0.2.1"),
    ("bots", "192.0.2.9"),
)


class Model:
    """The naive reading of the contract: every visit writes max(slice, count) at every
    precision, counting whoever was seen within WINDOW (guests rotate at midnight UTC). A
    visit older than one recorded already leaves the person seen at the newer time."""

    def __init__(self, precisions: tuple[int, ...], window: int) -> None:
        self.precisions = precisions
        self.window = window
        self.seen: dict[str, dict[tuple[str, int], float]] = {kind: {} for kind in KINDS}
        self.slices: defaultdict[tuple[str, int], dict[int, int]] = defaultdict(dict)
        self.peak = Peak(0, None)

    def visit(self, kind: str, name: str, now: float) -> None:
        day = 0 if kind == "users" else int(now // DAY)
        self.seen[kind][name, day] = max(self.seen[kind].get((name, day), now), now)
        counts = {
            each: sum(score >= now - self.window for score in members.values())
            for each, members in self.seen.items()
        }
        people = counts["users"] + counts["guests"]
        if people > self.peak.people:
            self.peak = Peak(people, utc(now))
        for each, count in counts.items():
            for precision in self.precisions:
                slices = self.slices[each, precision]
                start = int(now // precision) * precision
                slices[start] = max(slices.get(start, 0), count)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[tuple[str, str]], list[float]]:
    """Visits near a base time, at a random spacing (some a divisor of WINDOW, so that members
    sit exactly on its edge), in time order or not."""
    shift = draw(st.integers(min_value=-30, max_value=30)) / 2
    step = draw(st.sampled_from([0.5, 1, 3, 5, 20, 30, 450]))
    visits = draw(
        st.lists(
            st.tuples(st.sampled_from(VISITORS), st.integers(min_value=-12, max_value=12)),
            min_size=1,
            max_size=8,
        )
    )
    offsets = [shift + offset * step for _, offset in visits]
    if draw(st.booleans()):
        offsets.sort()
    return [who for who, _ in visits], offsets


@pytest.mark.parametrize(
    ("precisions", "base"),
    [
        # Midnight: the 18000-second slice around it spans two days.
        (DEFAULT_PRECISIONS, T0 + DAY),
        ((5, 7, 60), T0),
    ],
    ids=["default", "5-7-60"],
)
def test_online_counters_match_a_model_writing_every_precision(
    backend, settings, alice, bob, *, precisions, base
):
    window = 60
    configure(
        settings,
        COUNTER_PRECISIONS=list(precisions),
        WINDOW=window,
        THROTTLE=0,
        HIDE_USER="tests.support.helpers.hide_bob",
    )
    users = {"alice": alice, "bob": bob}
    client = admin_client()

    @properties(backend)
    @given(scenarios())
    def check(scenario: tuple[list[tuple[str, str]], list[float]]) -> None:
        client.flushdb()
        model = Model(precisions, window)
        for (kind, name), offset in zip(*scenario, strict=True):
            now = base + offset
            if kind == "users":
                assert api.record_user(users[name], now=now) is True
            else:
                assert api.record_guest(name, bot=kind == "bots", now=now) is True
            model.visit(kind, name, now)

        # Read back in one round trip: fakeredis makes each call cost more than a visit.
        pipe = client.pipeline(transaction=False)
        for kind in KINDS:
            for precision in precisions:
                pipe.hgetall(f"{{whos_online}}:counter:{precision}:online:{kind}")
        stored = iter(pipe.execute())
        for kind in KINDS:
            for precision in precisions:
                found = sorted((int(start), int(count)) for start, count in next(stored).items())
                assert found == sorted(model.slices[kind, precision].items()), (kind, precision)
        assert api.peak() == model.peak

    check()


# --- one round trip -----------------------------------------------------------------------------


@pytest.mark.parametrize("count_hits", [False, True], ids=["hits-off", "hits-buffered"])
def test_a_recorded_visit_is_one_round_trip(
    backend, settings, redis_calls: RedisCalls, alice, bob, *, count_hits
):
    configure(settings, COUNT_HITS=count_hits, HIDE_USER="tests.support.helpers.hide_bob")
    visits: dict[str, Callable[[], bool]] = {
        "guest": lambda: api.record_guest("192.0.2.1", now=T0),
        "bot": lambda: api.record_guest("192.0.2.2", bot=True, now=T0),
        "user": lambda: api.record_user(alice, now=T0),
        "hidden user": lambda: api.record_user(bob, now=T0),
    }
    for who, visit in visits.items():
        if count_hits:
            batches.buffer().add(T0 - 1)
            batches.buffer().add(T0, count=2)
        redis_calls.clear()

        assert visit() is True

        assert redis_calls.trips == [["EVALSHA"]], who
        assert batches.buffer().total() == 0

    assert online("guests", 60) == [(T0, 1)]
    assert online("bots", 60) == [(T0, 1)]
    assert online("users", 60) == [(T0, 2)]
    assert api.get_counter("hits", 60) == ([(T0 - 60, 4), (T0, 8)] if count_hits else [])


def test_a_request_through_the_middleware_is_one_round_trip(
    backend, settings, client, redis_calls: RedisCalls
):
    configure(settings, COUNT_HITS=True)
    batches.buffer().add(T0)
    redis_calls.clear()

    client.get("/plain/")

    assert redis_calls.trips == [["EVALSHA"]]
    assert [count for _, count in online("guests", 86400)] == [1]
    assert sum(count for _, count in api.get_counter("hits", 86400)) == 2
    assert api.peak().people == 1


# --- peak ---------------------------------------------------------------------------------------


def test_peak_rises_with_people_online_and_never_falls(backend, r, alice):
    assert api.peak() == (0, None)
    assert api.peak().when is None

    api.record_guest("192.0.2.1", now=T0 + 0.25)
    assert api.peak() == (1, utc(T0 + 0.25))

    api.record_user(alice, now=T0 + 1.5)
    api.record_guest("192.0.2.2", now=T0 + 2.125)
    assert api.peak() == (3, utc(T0 + 2.125))
    when = api.peak().when
    assert when is not None
    assert when.tzinfo is timezone.utc

    # People leave: by logging out, and by the window passing.
    apps.remove_logout(None, None, alice)
    api.record_guest("192.0.2.2", now=T0 + 601)
    assert api.peak() == (3, utc(T0 + 2.125))

    # Equalling the peak keeps the time it was first reached.
    api.record_guest("192.0.2.3", now=T0 + 602)
    api.record_guest("192.0.2.4", now=T0 + 603)
    assert api.peak() == (3, utc(T0 + 2.125))

    api.record_guest("192.0.2.5", now=T0 + 604)
    assert api.peak() == (4, utc(T0 + 604))
    assert isinstance(api.peak(), Peak)
    assert r.hgetall("{whos_online}:peak") == {b"count": b"4", b"at": f"{T0 + 604}.000".encode()}


def test_bots_do_not_count_towards_the_peak(backend):
    for number in range(1, 4):
        api.record_guest(f"192.0.2.{number}", bot=True, now=T0 + number)
    assert api.peak() == (0, None)

    api.record_guest("192.0.2.1", now=T0 + 10)
    assert api.peak() == (1, utc(T0 + 10))


def test_hidden_users_count_towards_the_peak(backend, hiding_bob, alice, bob):
    api.record_user(bob, now=T0)
    assert api.peak() == (1, utc(T0))

    api.record_user(alice, now=T0 + 1)
    assert api.peak() == (2, utc(T0 + 1))


def test_peak_is_raised_atomically_by_concurrent_writers(backend):
    if backend == "fake":
        pytest.skip("needs a real server: fakeredis runs scripts in the calling thread")
    threads_count, per_thread = 8, 20

    def visit(thread: int) -> None:
        for index in range(per_thread):
            assert api.record_guest(ip(thread * 256 + index), now=T0 + 5) is True

    # Re-raises the first failure of any thread, the assertion above included.
    run_threads([functools.partial(visit, n) for n in range(threads_count)])
    total = threads_count * per_thread
    assert api.peak() == (total, utc(T0 + 5))
    assert online("guests", 1) == [(T0 + 5, total)]


def reset_peak(*args: str) -> str:
    out = StringIO()
    call_command("whos_online_cleanup", "--reset-peak", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_cleanup_command_resets_the_peak(backend, r):
    for number in range(1, 4):
        api.record_guest(f"192.0.2.{number}", now=T0 + 10 * 3600 + number)
    counters_before = r.hgetall("{whos_online}:counter:1:online:guests")
    was = "was 3 on 2100-01-04 10:00 UTC"

    assert reset_peak("--dry-run") == f"Would reset the peak of people online ({was}).\n"
    assert api.peak() == (3, utc(T0 + 10 * 3600 + 3))

    assert reset_peak() == f"Reset the peak of people online ({was}).\n"
    assert api.peak() == (0, None)
    assert r.exists("{whos_online}:peak") == 0
    # Nothing else is touched.
    assert r.zcard("{whos_online}:guests") == 3
    assert r.hgetall("{whos_online}:counter:1:online:guests") == counters_before

    assert reset_peak() == "Reset the peak of people online (was none recorded).\n"
    assert reset_peak("--dry-run") == (
        "Would reset the peak of people online (was none recorded).\n"
    )

    # The next visit starts a new peak from whoever is online.
    api.record_guest("192.0.2.9", now=T0 + 10 * 3600 + 60)
    assert api.peak() == (4, utc(T0 + 10 * 3600 + 60))


def test_history_reads_fail_open_while_redis_is_down(redis_down):
    assert api.record_guest("192.0.2.1", now=T0) is False
    assert api.peak() == (0, None)
    assert api.unique_visitors() == 0
    assert api.unique_visitors(TODAY) == 0
    assert online("guests", 60) == []


# --- unique visitors ----------------------------------------------------------------------------


def test_unique_visitors_counts_distinct_users_and_guests_not_bots(
    backend, clock, hiding_bob, alice, bob
):
    assert api.unique_visitors() == 0
    for _ in range(2):  # repeat visits count once
        api.record_user(alice, now=NOW - 30)
        api.record_user(bob, now=NOW - 20)  # hidden users are visitors too
        for number in range(1, 4):
            api.record_guest(f"192.0.2.{number}", now=NOW - number)
        api.record_guest("192.0.2.1", bot=True, now=NOW)  # a guest's address, as a bot
        api.record_guest("192.0.2.200", bot=True, now=NOW)

    assert api.unique_visitors() == 5
    assert api.unique_visitors(TODAY) == 5
    assert api.online_counts() == api.OnlineCounts(users=2, guests=3, bots=2, total=5)


def test_unique_visitors_of_a_given_day(backend):
    for number in range(1, 4):
        api.record_guest(f"192.0.2.{number}", now=T0 + 3600 * number)
    api.record_guest("192.0.2.1", now=T0 + DAY + 10)

    assert api.unique_visitors(TODAY) == 3
    assert api.unique_visitors(TODAY + timedelta(days=1)) == 1
    assert api.unique_visitors(TODAY - timedelta(days=1)) == 0
    assert api.unique_visitors(utc(T0 + DAY - 1)) == 3
    # An aware datetime picks its UTC day: 08:00 in Auckland (UTC+13) is 19:00 UTC the day before.
    auckland = datetime(2100, 1, 5, 8, 0, tzinfo=ZoneInfo("Pacific/Auckland"))
    assert api.unique_visitors(auckland) == 3
    assert api.unique_visitors(auckland + timedelta(hours=5)) == 1


def test_visits_either_side_of_midnight_fall_in_different_days(backend, r, alice):
    api.record_user(alice, now=T0 + DAY - 0.001)
    api.record_guest("192.0.2.1", now=T0 + DAY - 0.001)
    api.record_user(alice, now=T0 + DAY)
    api.record_guest("192.0.2.1", now=T0 + DAY)

    assert api.unique_visitors(TODAY) == 2
    assert api.unique_visitors(date(2100, 1, 5)) == 2
    assert sorted(r.keys("{whos_online}:visitors:*")) == [
        b"{whos_online}:visitors:2100-01-04",
        b"{whos_online}:visitors:2100-01-05",
    ]


@pytest.mark.parametrize("days", [90, 2])
def test_visitors_key_lives_until_the_end_of_the_day_plus_last_seen_days(
    backend, settings, r, days
):
    if days != 90:
        configure(settings, LAST_SEEN_DAYS=days)
    api.record_guest("192.0.2.1", now=NOW)
    api.record_guest("192.0.2.2", now=NOW + 60)

    expires_at = (T0 + DAY + days * DAY) * 1000
    before = time.time() * 1000
    ttl = r.pttl("{whos_online}:visitors:2100-01-04")
    after = time.time() * 1000
    assert expires_at - after - 1 <= ttl <= expires_at - before + 1


def pfadd_changes(r: redis.Redis, key: str, element: str) -> bool:
    """Whether adding ``element`` to a copy of the HyperLogLog ``key`` changes it."""
    # DUMP and RESTORE rather than COPY: fakeredis's COPY shares the value with the original.
    scratch = key + ":scratch"
    dumped = r.dump(key)
    assert isinstance(dumped, bytes)
    r.restore(scratch, 0, dumped, replace=True)
    try:
        return bool(r.pfadd(scratch, element))
    finally:
        r.delete(scratch)


@pytest.mark.parametrize("guest_identity", ["hashed-ip", "ip"])
def test_visitors_hold_keyed_hashes_not_addresses_or_user_ids(
    backend, settings, r, alice, guest_identity
):
    configure(settings, GUEST_IDENTITY=guest_identity)
    address = "192.0.2.77"
    api.record_guest(address, now=NOW)
    api.record_user(alice, now=NOW)
    key = "{whos_online}:visitors:2100-01-04"
    member = guests.guest_id(address, get_config(), NOW)
    assert (member == address) is (guest_identity == "ip")

    if backend == "real":
        value = r.get(key)
        assert isinstance(value, bytes)
        assert value.startswith(b"HYLL")
        assert address.encode() not in value
    raws = (address, f"g:{address}", member, f"g:{member}", str(alice.pk), f"u:{alice.pk}")
    for raw in dict.fromkeys(raws):
        assert pfadd_changes(r, key, raw) is True, raw
    # What was added: the day's keyed hashes of the namespaced identities.
    assert pfadd_changes(r, key, guests.daily_id(f"g:{member}", NOW)) is False
    assert pfadd_changes(r, key, guests.daily_id(f"u:{alice.pk}", NOW)) is False


def test_unique_visitors_estimate_is_close_on_a_real_server(backend, settings):
    if backend == "fake":
        pytest.skip("fakeredis counts a HyperLogLog exactly")
    configure(settings, COUNTER_PRECISIONS=[86400])
    config = get_config()
    total = 2000
    visits = []
    for number in range(total):
        member = guests.guest_id(ip(number), config, NOW)
        daily_id = guests.daily_id(f"g:{member}", NOW)
        visits.append(
            items.Visit(unhidden_kind="guests", member=member, seen_at=NOW, daily_id=daily_id)
        )
    record.record(admin_client(), config, visits)

    estimate = api.unique_visitors(TODAY)
    assert abs(estimate - total) <= total * 0.02, estimate
    assert api.peak() == (total, utc(NOW))


# --- template tag -------------------------------------------------------------------------------


def test_tag_shows_the_peak_by_default(backend, settings, clock):
    api.record_guest("192.0.2.1", now=T0 + 3 * 3600)
    api.record_guest("192.0.2.2", now=T0 + 3 * 3600 + 1)  # 03:00 UTC, gone by NOW

    # The day is that of the current time zone, in DATE_FORMAT.
    for time_zone, day in [
        ("UTC", "Jan. 4, 2100"),
        ("America/Chicago", "Jan. 3, 2100"),
        ("Asia/Tokyo", "Jan. 4, 2100"),
    ]:
        settings.TIME_ZONE = time_zone

        markup = render(TAG)

        assert widget_text(markup, peak=True) == (
            f"Who's online: nobody Most people ever online was 2 on {day}"
        ), time_zone
        assert '<div class="whos-online-peak" data-peak="2">' in markup


def test_tag_leaves_out_the_peak_when_asked(backend, clock):
    api.record_guest("192.0.2.1", now=NOW)

    markup = render("{% load whos_online %}{% whos_online peak=False %}")

    assert widget_text(markup, peak=True) == "Who's online: 1 guest"
    assert "whos-online-peak" not in markup


def test_tag_says_nothing_of_a_peak_not_recorded(backend, clock):
    assert "whos-online-peak" not in render(TAG)

    api.record_guest("192.0.2.1", bot=True, now=NOW)
    api.record_guest("192.0.2.2", bot=True, now=NOW)
    markup = render(TAG)

    assert widget_text(markup, peak=True) == "Who's online: 2 bots"
    assert "whos-online-peak" not in markup


@pytest.mark.parametrize(
    ("guest_count", "line"), [(1, "1 unique visitor today"), (3, "3 unique visitors today")]
)
def test_tag_shows_todays_unique_visitors_when_asked(backend, clock, guest_count, line):
    api.record_guest("192.0.2.200", bot=True, now=NOW)
    for number in range(guest_count):
        api.record_guest(f"192.0.2.{number + 1}", now=NOW - DAY)  # yesterday's do not count
        api.record_guest(f"192.0.2.{number + 1}", now=NOW)

    markup = render("{% load whos_online %}{% whos_online visitors=True peak=False %}")
    plain = render("{% load whos_online %}{% whos_online peak=False %}")

    guests_text = "1 guest" if guest_count == 1 else f"{guest_count} guests"
    assert widget_text(markup) == f"Who's online: {guests_text} and 1 bot {line}"
    assert f'data-visitors="{guest_count}"' in markup
    assert "unique" not in plain


def test_tag_with_peak_and_visitors_is_one_round_trip(backend, clock, redis_calls: RedisCalls):
    api.record_guest("192.0.2.1", now=NOW - 10)
    api.record_guest("192.0.2.2", now=NOW)
    redis_calls.clear()

    markup = render("{% load whos_online %}{% whos_online visitors=True %}")

    assert redis_calls.trips == [["EVALSHA"]]
    assert widget_text(markup, peak=True) == (
        "Who's online: 2 guests 2 unique visitors today Most people ever online was 2 on "
        "Jan. 4, 2100"
    )
