"""The site-wide figures kept beside the people online: the all-time peak and the day's visitors.

With one shard a visit keeps them itself (``visits``); with several, no shard sees the whole site,
and the cleanup command samples the counts it read from every shard (``sample``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from whos_online.backend import keyspace
from whos_online.store import lua, scripts
from whos_online.store.keys import peak_key, score, visitors_key
from whos_online.store.record import recording_of

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import date

    from redis.client import Pipeline
    from redis.cluster import ClusterPipeline

    from whos_online.backend.connection import Client
    from whos_online.config.settings import Config
    from whos_online.store.results import Snapshot


def sample(client: Client, config: Config, snapshot: Snapshot, *, now: float) -> None:
    """Raise the peak and sample the online counters from ``snapshot``, counted over every
    shard (the cleanup command does so when a visit cannot: with several shards)."""
    fixed = recording_of(config)
    users = snapshot.visible + snapshot.hidden
    scripts.call(
        client,
        lua.SAMPLE,
        list(fixed.site_keys[:2]),
        args=[
            score(now),
            fixed.counter_prefix,
            fixed.precisions,
            fixed.may_stop,
            int(now),
            users,
            snapshot.guests,
            snapshot.bots,
        ],
    )


def read_peak(client: Client, config: Config) -> tuple[int, float | None]:
    count, at = client.hmget(peak_key(config), ["count", "at"])
    return _peak(count, at)


def ask_peak(
    pipe: Pipeline | ClusterPipeline, config: Config
) -> Callable[[list[Any]], tuple[int, float | None]]:
    """``read_peak``'s command, queued on ``pipe``; returns what makes its answer of the reply
    (the API sends it in the round trip that writes the process's queue)."""
    pipe.hmget(peak_key(config), ["count", "at"])
    return lambda replies: _peak(*replies[0])


def _peak(count: Any, at: Any) -> tuple[int, float | None]:
    return int(count or 0), (float(at) if at is not None else None)


def reset_peak(client: Client, config: Config) -> None:
    client.delete(peak_key(config))


def unique_visitors(client: Client, config: Config, day: date) -> int:
    """The day's visitors: the shards' HyperLogLogs hold different people, so their estimates
    add up. One PFCOUNT per shard (redis-py keeps PFCOUNT out of cluster pipelines)."""
    return sum(int(client.pfcount(visitors_key(shard, day))) for shard in keyspace.layout(config))


def ask_unique_visitors(
    pipe: Pipeline | ClusterPipeline, config: Config, day: date
) -> Callable[[list[Any]], int]:
    """``unique_visitors``' commands, queued on the pipeline of one Redis (a cluster's refuses
    PFCOUNT); returns what makes its answer of their replies."""
    for shard in keyspace.layout(config):
        pipe.pfcount(visitors_key(shard, day))
    return lambda replies: sum(int(count) for count in replies)
