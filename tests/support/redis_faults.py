"""Breaking a real redis-server that still answers: full, demoted to a read-only replica, or
unable to write its snapshots.

Each leaves reads working and makes every write fail, the way a production Redis fails when its
``maxmemory`` is reached, after a failover has demoted it, or when its disk fails. Plain
functions on a redis-py client, raising ``RuntimeError`` when the server does not end up refusing
writes, so that a benchmark can use them as well as a test.
"""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:
    from tests.support.redis_server import RedisServer

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


def fail_snapshots(client: redis.Redis, directory: str) -> None:
    """Make the server refuse writes with ``MISCONF``, as when its disk fails.

    Snapshots are turned on, with ``stop-writes-on-bgsave-error``, and the server's working
    ``directory`` is removed under it, so that a snapshot cannot be written, even by root.
    """
    client.config_set("stop-writes-on-bgsave-error", "yes")
    client.config_set("save", "3600 1")
    shutil.rmtree(directory, ignore_errors=True)  # gone already if this is a second fault
    client.bgsave()
    deadline = time.monotonic() + SYNC_TIMEOUT
    while client.info("persistence").get("rdb_last_bgsave_status") != "err":
        if time.monotonic() > deadline:
            raise RuntimeError("the snapshot did not fail")
        time.sleep(0.01)
    try:
        client.set("probe", "1")
    except redis.exceptions.ResponseError as error:
        if str(error).startswith("MISCONF"):
            return
        raise
    raise RuntimeError("Redis still accepts writes")


def allow_writes_without_snapshots(client: redis.Redis) -> None:
    """Undo ``fail_snapshots`` as an operator would: stop snapshotting."""
    client.config_set("save", "")
