"""Breaking a real redis-server that still answers: full, or demoted to a read-only replica.

Both leave reads working and make every write fail, the way a production Redis fails when its
``maxmemory`` is reached or after a failover has demoted it. Plain functions on a redis-py client,
raising ``RuntimeError`` when the server does not end up refusing writes, so that a benchmark can
use them as well as a test.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:
    from tests.redis_server import RedisServer

#: The size of each value written to fill the memory.
FILL_VALUE_SIZE = 65536
#: Far more writes of FILL_VALUE_SIZE than the 2 MB of room that fill_until_oom leaves.
MAX_FILL_WRITES = 1000
#: How long a replica may take to sync with its primary.
SYNC_TIMEOUT = 10.0


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def fill_until_oom(client: redis.Redis) -> int:
    """Set ``maxmemory`` with ``noeviction`` and fill the server until writes get ``OOM``.

    Returns how many values were stored.
    """
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", used_memory(client) + 2**21)
    filled = 0
    try:
        while filled < MAX_FILL_WRITES:
            client.set(f"fill:{filled}", b"x" * FILL_VALUE_SIZE)
            filled += 1
    except redis.exceptions.OutOfMemoryError:
        pass
    else:
        raise RuntimeError(f"Redis took {filled} writes of {FILL_VALUE_SIZE} bytes without OOM")
    if filled == 0:
        raise RuntimeError("Redis refused the first write: it was full before")
    # The last write failed partly on its own 64 KB argument; lower the limit below what is
    # stored, so that small writes fail too and freed client buffers cannot undo the fault.
    client.config_set("maxmemory", used_memory(client) - 2**19)
    try:
        client.set("probe", "1")
    except redis.exceptions.OutOfMemoryError:
        return filled
    raise RuntimeError("Redis still accepts small writes")


def demote(client: redis.Redis, primary: RedisServer) -> None:
    """Make ``client``'s server a read-only replica of ``primary``, once it has synced.

    The replica's data is replaced by the primary's, as in a failover.
    """
    with redis.Redis.from_url(primary.url, socket_timeout=5) as target:
        # Redis 7+ syncs replicas diskless, after waiting 5 s for more of them by default.
        target.config_set("repl-diskless-sync-delay", 0)
    client.config_set("replica-read-only", "yes")
    client.replicaof("127.0.0.1", primary.port)
    deadline = time.monotonic() + SYNC_TIMEOUT
    while client.info("replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not sync in time")
        time.sleep(0.01)
    try:
        client.set("probe", "1")
    except redis.exceptions.ReadOnlyError:
        return
    raise RuntimeError("the replica accepts writes")
