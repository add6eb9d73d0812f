"""The Prometheus collector, ``whos_online.metrics.OnlineCollector``."""

from __future__ import annotations

import importlib
import sys
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import whos_online
from whos_online.metrics import OnlineCollector

# Their counts of unique visitors today must not straddle a UTC midnight.
pytestmark = pytest.mark.usefixtures("mid_utc_day")


def scrape() -> dict[str, float]:
    """One scrape of a registry holding only the collector, as {sample with labels: value}."""
    registry = CollectorRegistry()
    registry.register(OnlineCollector())
    samples = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_a_scrape_reports_who_is_online_the_peak_and_todays_visitors(backend, alice):
    now = time.time()
    whos_online.record_user(alice, now=now)
    whos_online.record_guest("198.51.100.1", now=now)
    whos_online.record_guest("198.51.100.2", now=now)
    whos_online.record_guest("198.51.100.3", bot=True, now=now)

    samples = scrape()

    assert samples == {
        "whos_online_redis_up": 1.0,
        'whos_online_online{kind="users"}': 1.0,
        'whos_online_online{kind="guests"}': 2.0,
        'whos_online_online{kind="bots"}': 1.0,
        "whos_online_peak_people": 3.0,
        "whos_online_peak_time_seconds": pytest.approx(now, abs=1),
        "whos_online_unique_visitors_today": 3.0,
    }


def test_an_empty_site_has_no_peak_time(backend):
    samples = scrape()
    assert samples["whos_online_peak_people"] == 0
    assert "whos_online_peak_time_seconds" not in samples


def test_a_scrape_reads_redis_once(backend, alice, redis_calls):
    whos_online.record_user(alice)
    redis_calls.clear()
    scrape()
    assert len(redis_calls.trips) == 1


def test_redis_down_is_reported_and_no_numbers_are_made_up(redis_down):
    assert scrape() == {"whos_online_redis_up": 0.0}


def test_without_prometheus_client_the_import_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setitem(sys.modules, "prometheus_client.core", None)
    monkeypatch.setitem(sys.modules, "prometheus_client.registry", None)
    monkeypatch.delitem(sys.modules, "whos_online.metrics")
    with pytest.raises(ImportError, match=r'pip install "whos-online\[prometheus\]"'):
        importlib.import_module("whos_online.metrics")
