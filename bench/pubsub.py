"""How many processes one Redis's pub/sub serves: what a change's PUBLISH costs Redis for each
process subscribed, on one redis-server and across a 3-master cluster.

Every process of the site subscribes to the changes' channel (one subscription per event loop)
and publishes at most one message a second (``PUBLISH_EVERY``): P busy processes make Redis
deliver up to P messages a second to P subscribers, P² deliveries. The benchmark holds
``subscribers`` connections subscribed on raw asyncio sockets (each read as it comes), publishes
``messages`` messages of a flush's size from one client, and reads redis-server's CPU per
PUBLISH; a line through the counts gives the cost of one delivery and of a PUBLISH itself, and
so the processes one Redis serves within a share of one core. On a 3-master cluster (classic
pub/sub, as whos_online subscribes) the subscribers are on the first master, the messages
published on the second, and every master's CPU is read: the cluster bus carries each message
to every node. With Redis 7 or newer, the same with sharded pub/sub (``SSUBSCRIBE`` and
``SPUBLISH`` on the master of the channel's slot), which keeps a message within its shard.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from bench.harness import servers
from bench.harness.report import Section, table
from tests.support.topologies import ClusterServers

if TYPE_CHECKING:
    import redis

CHANNEL: Final = "{bench}:changes"
#: A message as a flush publishes it: a few rooms and the site.
MESSAGE: Final = json.dumps({"rooms": ["topic:1042", "topic:77", "forum:3"], "site": True})
#: The commands that subscribe and publish, classic or sharded (Redis 7).
CLASSIC: Final = ("SUBSCRIBE", "PUBLISH")
SHARDED: Final = ("SSUBSCRIBE", "SPUBLISH")


def delivery(subscribe: str) -> str:
    """What a subscriber reads of each message (RESP: its kind, the channel, the message)."""
    kind = "smessage" if subscribe == "SSUBSCRIBE" else "message"
    return (
        f"*3\r\n${len(kind)}\r\n{kind}\r\n${len(CHANNEL)}\r\n{CHANNEL}\r\n"
        f"${len(MESSAGE)}\r\n{MESSAGE}\r\n"
    )


#: Share of one core that Redis may spend on pub/sub in the capacity figure.
BUDGET: Final = 0.5
MASTERS: Final = 3
#: The first Redis with sharded pub/sub.
SHARDED_SINCE: Final = 7
#: Subscribers on the cluster at most: with 1 000 on one master of the benchmark's cluster
#: (Redis 6.2), its subscribers read almost none of the messages, unexplained; up to 100, all.
CLUSTER_MOST: Final = 100


@dataclass(frozen=True)
class Options:
    subscribers: str = "1,10,100,1000"
    messages: int = 5000


QUICK = Options(subscribers="1,10", messages=200)


async def subscribed(
    port: int, count: int, subscribe: str = "SUBSCRIBE"
) -> list[asyncio.Task[int]]:
    """``count`` connections subscribed to ``CHANNEL`` (``subscribe``: or ``SSUBSCRIBE``), each
    a task that reads until cancelled and returns the bytes it read."""
    command = f"*2\r\n${len(subscribe)}\r\n{subscribe}\r\n${len(CHANNEL)}\r\n{CHANNEL}\r\n"

    async def one() -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(command.encode())
        read = 0
        try:
            while chunk := await reader.read(1 << 16):
                read += len(chunk)
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()
        return read

    tasks = [asyncio.ensure_future(one()) for _ in range(count)]
    await asyncio.sleep(0.5 + count / 2000)
    return tasks


async def cpu_per_publish(
    publisher: redis.Redis,
    watched: list[servers.Node],
    subscribers: int,
    port: int,
    count: int,
    *,
    commands: tuple[str, str] = CLASSIC,
) -> tuple[list[float], float]:
    """µs of each watched node's CPU per PUBLISH (``commands``: or sharded), with
    ``subscribers`` on ``port``; and the share of the deliveries that the subscribers read."""
    subscribe, publish = commands
    tasks = await subscribed(port, subscribers, subscribe)
    try:
        before = [node.cpu() for node in watched]
        for start in range(0, count, 100):
            pipe = publisher.pipeline(transaction=False)
            for _ in range(min(100, count - start)):
                getattr(pipe, publish.lower())(CHANNEL, MESSAGE)  # publish, or spublish
            await asyncio.to_thread(pipe.execute)
        await asyncio.sleep(0.5)  # the last deliveries read
        spent = [
            (node.cpu() - cpu) / count * 1e6 for node, cpu in zip(watched, before, strict=True)
        ]
    finally:
        for task in tasks:
            task.cancel()
        read = sum(await asyncio.gather(*tasks))
    return spent, read / (count * subscribers * len(delivery(subscribe)))


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """µs per delivery (the least-squares slope through (subscribers, µs per PUBLISH)), and µs
    per PUBLISH alone (the fewest subscribers' cell, less their deliveries)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points) or 1.0
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    fewest, spent = min(points)
    return slope, max(spent - slope * fewest, 0.0)


def processes_served(per_delivery: float, per_publish: float) -> int:
    """P such that P publishes a second, each delivered to P subscribers, cost ``BUDGET``."""
    a, b, c = per_delivery, per_publish, -BUDGET * 1e6
    return int((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)) if a > 0 else 0


def one_redis(counts: list[int], options: Options) -> list[list[str]]:
    rows, points = [], []
    with servers.redis_server() as server:
        node = servers.Node.of(server)
        for count in counts:
            [spent], read = asyncio.run(
                cpu_per_publish(node.client, [node], count, server.port, options.messages)
            )
            points.append((count, spent))
            rows.append([str(count), f"{spent:.1f} µs", f"{spent / count:.2f} µs", f"{read:.0%}"])
    per_delivery, per_publish = fit(points)
    served = processes_served(per_delivery, per_publish)
    rows.append(
        [
            "fit",
            f"{per_publish:.1f} µs + {per_delivery:.2f} µs per subscriber",
            f"{served} processes publishing once a second within {BUDGET:.0%} of a core",
            "",
        ]
    )
    return rows


def cluster(counts: list[int], options: Options) -> tuple[list[list[str]], list[list[str]], int]:
    """Each master's CPU per message with classic pub/sub (subscribers on the first master,
    published on the second), and with sharded pub/sub on the master of the channel's slot
    (none before Redis 7), and which master that is."""
    # A master busy delivering for a second must not be taken for a failing one.
    nodes = ClusterServers(MASTERS, node_timeout_ms=15_000)
    nodes.start()
    try:
        watched = [servers.Node.of(node) for node in nodes.nodes]
        publisher, owner = nodes.nodes[1].client(), shard_of(nodes)
        classic = spread(publisher, watched, counts, nodes.nodes[0].port, options.messages)
        version = str(publisher.info("server")["redis_version"])
        sharded = []
        if int(version.split(".", maxsplit=1)[0]) >= SHARDED_SINCE:
            sharded = spread(
                owner.client(), watched, counts, owner.port, options.messages, commands=SHARDED
            )
        return classic, sharded, nodes.nodes.index(owner)
    finally:
        nodes.close()


def spread(
    publisher: redis.Redis,
    watched: list[servers.Node],
    counts: list[int],
    port: int,
    messages: int,
    *,
    commands: tuple[str, str] = CLASSIC,
) -> list[list[str]]:
    """A row per count of subscribers on ``port``: each watched master's CPU per message, and
    the share of the deliveries read."""
    rows = []
    for count in counts:
        spent, read = asyncio.run(
            cpu_per_publish(publisher, watched, count, port, messages, commands=commands)
        )
        rows.append([str(count), *(f"{one:.1f} µs" for one in spent), f"{read:.0%}"])
    return rows


def shard_of(nodes: ClusterServers) -> Any:
    """The master that holds ``CHANNEL``'s slot, where its sharded messages stay."""
    first = nodes.nodes[0]
    slot = int(first.command("CLUSTER", "KEYSLOT", CHANNEL))
    for start, end, master, *_replicas in first.command("CLUSTER", "SLOTS"):
        if int(start) <= slot <= int(end):
            port = int(master[1])
            return next(node for node in nodes.nodes if node.port == port)
    raise LookupError(slot)


def run(options: Options) -> Section:
    counts = [int(one) for one in options.subscribers.split(",")]
    servers.raise_open_files(max(counts) + 1000)  # this process's, and the servers' it starts
    started = time.perf_counter()
    single = one_redis(counts, options)
    spread, sharded, owner = cluster([count for count in counts if count <= CLUSTER_MOST], options)
    masters = " | ".join(
        f"master {n + 1}" + (" (subscribers)" if n == 0 else " (publisher)" if n == 1 else "")
        for n in range(MASTERS)
    )
    tables = [
        table("subscribers | Redis CPU per PUBLISH | per subscriber | read", single),
        table(f"subscribers | {masters} | read", spread),
    ]
    if sharded:
        every = " | ".join(
            f"master {n + 1}" + (" (the channel's slot)" if n == owner else "")
            for n in range(MASTERS)
        )
        tables.append(table(f"subscribers, sharded (`SPUBLISH`) | {every} | read", sharded))
    return Section(
        "Pub/sub",
        f"{options.messages} PUBLISH per cell; {time.perf_counter() - started:.0f} s."
        + (
            "" if sharded else " Sharded pub/sub: not measured (this redis-server is older than 7)."
        ),
        tables,
    )
