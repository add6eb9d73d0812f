"""When a recorded visit samples the online counts (one shard): whenever its visitor was not
online, and on this process's first visit of each second; a visitor online already otherwise runs
no count."""

from __future__ import annotations

import whos_online
from tests.support.helpers import text

NOW = 1_900_000_000.0
SLICE = "{whos_online}:counter:1:online:users"


def sample_at(r, second: float) -> int | None:
    value = r.hget(SLICE, str(int(second)))
    return None if value is None else int(text(value))


def test_a_visit_that_adds_nobody_within_a_sampled_second_runs_no_count(r, alice, bob):
    whos_online.record_user(alice, now=NOW)
    assert sample_at(r, NOW) == 1
    r.hset(SLICE, str(int(NOW)), 0)  # so that a sample would show

    whos_online.record_user(alice, now=NOW + 0.5)  # online already, same second
    assert sample_at(r, NOW) == 0

    whos_online.record_user(bob, now=NOW + 0.6)  # joins the set: counted at once
    assert sample_at(r, NOW) == 2
    assert whos_online.peak().people == 2


def test_the_first_visit_of_a_second_samples_whoever_it_is(r, alice):
    whos_online.record_user(alice, now=NOW)
    whos_online.record_user(alice, now=NOW + 1)
    whos_online.record_user(alice, now=NOW + 2.5)
    assert [count for _, count in whos_online.get_counter("online:users", 1)] == [1, 1, 1]


def test_the_peak_follows_every_arrival_within_one_second(r, db):
    for number in range(5):
        whos_online.record_guest(f"198.51.100.{number}", now=NOW + number / 10)
    assert whos_online.peak().people == 5
    assert [count for _, count in whos_online.get_counter("online:guests", 1)] == [5]


def test_someone_stale_coming_back_is_counted_at_once(r, alice, bob):
    whos_online.record_user(alice, now=NOW - 700)  # stale, not pruned
    whos_online.record_user(bob, now=NOW)
    whos_online.record_user(alice, now=NOW + 0.5)  # back within a sampled second
    assert sample_at(r, NOW) == 2
    assert whos_online.peak().people == 2
