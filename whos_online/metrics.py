"""Who is online, as Prometheus metrics: a collector to register with a site's registry.

Needs ``prometheus_client`` (docs/admin-and-metrics.md). Each scrape reads Redis once; one that
cannot reports ``whos_online_redis_up 0`` without the other metrics, rather than zeros that would
look like an empty site on a graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

try:
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as error:  # pragma: no cover - depends on what is installed
    msg = (
        "whos_online.metrics needs prometheus_client: "
        'pip install "whos-online[prometheus]" (or prometheus-client).'
    )
    raise ImportError(msg) from error

from whos_online.reading import snapshots

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prometheus_client.metrics_core import Metric


class OnlineCollector(Collector):
    """Users, guests and bots online, the all-time peak and today's unique visitors."""

    def collect(self) -> Iterator[Metric]:
        found = snapshots.read(0)
        yield GaugeMetricFamily(
            "whos_online_redis_up",
            "1 if whos_online could read Redis for this scrape, else 0.",
            value=0 if found is None else 1,
        )
        if found is None:
            return
        counts = found.counts
        online = GaugeMetricFamily(
            "whos_online_online",
            "People online now, by kind (users include those hidden from the list).",
            labels=["kind"],
        )
        for kind in ("users", "guests", "bots"):
            online.add_metric([kind], getattr(counts, kind))
        yield online
        peak = found.peak
        yield GaugeMetricFamily(
            "whos_online_peak_people",
            "The most people (users and guests) ever online at once.",
            value=peak.people,
        )
        if peak.when is not None:
            yield GaugeMetricFamily(
                "whos_online_peak_time_seconds",
                "When the peak was reached, as a Unix time.",
                value=peak.when.timestamp(),
            )
        yield GaugeMetricFamily(
            "whos_online_unique_visitors_today",
            "Distinct users and guests seen on the current UTC day (a HyperLogLog estimate).",
            value=found.visitors,
        )
