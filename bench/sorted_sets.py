"""Filling the sorted sets of people online directly, with up to millions of members."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable

    import redis

#: Members per ZADD: millions in one command would block Redis, and be built whole in memory.
BATCH: Final = 10_000


def fill(client: redis.Redis, key: str, scored: Iterable[tuple[str, float]]) -> None:
    """ZADD the (member, score) pairs of ``scored`` to ``key``, BATCH at a time, in order."""
    pairs = iter(scored)
    while batch := dict(itertools.islice(pairs, BATCH)):
        client.zadd(key, batch)
