"""Instructions per visit in redis-server, counted rather than timed: the record script's, the
bound's (``bench.bound``) and the floor's, split into what Redis does around the script, the
script's Lua, and the commands it calls.

``bench batching`` times Redis's CPU, which moves by more than a rewrite of ``record.lua`` gains
on a shared machine. Here redis-server runs under valgrind's callgrind, which counts the machine
instructions of each phase exactly, run after run. Counts are not times: at 20 000 people the
data fits in the caches, where at a million the commands' memory reads cost more than their
instructions say, so the ratios here overstate the Lua's share of the CPU. They say where the
instructions go, and whether a change removed some.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final
from unittest import mock

from django.test import override_settings

from bench import batching
from bench import internals as whos
from bench import people as crowd
from bench.harness import servers
from bench.harness.report import Section, fixed, number, table
from tests.support.redis_server import RedisServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

AT: Final = batching.AT
#: The functions of redis-server whose instructions, callees included, split a phase's: the
#: script's run (``lua_pcall``), the commands it calls, and the Lua garbage collector's steps.
SCRIPT, COMMANDS, COLLECTOR = "lua_pcall", "luaRedisGenericCommand", "luaC_step"
#: The collector steps in wherever Lua allocates: counted by its two nearest callers, so that its
#: steps can be told apart by where they fell. Those under these callers fall outside the script
#: (Redis handing a call's arguments to Lua, its own step every few scripts, and the script's
#: reply turned into Redis's); those under a command's reply turned into Lua, in the commands; the
#: others in the script's Lua.
CALLERS: Final = 2
OUTSIDE: Final = frozenset({"luaSetGlobalArray", "lua_gc", "luaReplyToRedisReply"})
IN_COMMANDS: Final = "redisProtocolToLuaType"
LINE: Final = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+(.*)$")


@dataclass(frozen=True)
class Options:
    people: int = 20_000
    visits: int = 2_000
    #: Another checkout whose record script (taking the same arguments) sends the calls of 20.
    against: Path | None = None


QUICK = Options(people=2_000, visits=200)


@dataclass(frozen=True)
class Count:
    """A phase's instructions per visit: in all, in the script's run, in its commands, and the
    garbage collector's steps, by where they fell (outside the script, in its commands, in its
    Lua). The figures a table shows leave the collector out of the other three: where it steps in
    moves from run to run, and would move instructions between them."""

    total: float
    script: float
    commands_with_collector: float
    collector_outside: float
    collector_in_commands: float
    collector_in_lua: float

    @property
    def collector(self) -> float:
        return self.collector_outside + self.collector_in_commands + self.collector_in_lua

    @property
    def around(self) -> float:
        """Outside the script: the call read and its arguments handed to Lua, the reply."""
        return self.total - self.script - self.collector_outside

    @property
    def commands(self) -> float:
        return self.commands_with_collector - self.collector_in_commands

    @property
    def lua(self) -> float:
        return self.script - self.commands_with_collector - self.collector_in_lua


def counted(dump: Path, visits: int) -> Count:
    """The figures of a callgrind ``dump`` per visit, from ``callgrind_annotate``."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[str, int] = {}
    collector = {"outside": 0, "commands": 0, "lua": 0}
    for line in text.splitlines():
        match = LINE.match(line)
        if match is None:
            continue
        where, value = match[2], int(match[1].replace(",", ""))
        name = "total" if where == "PROGRAM TOTALS" else where.split(" [")[0].rpartition(":")[2]
        function, *callers = name.split("'")
        if function == COLLECTOR and callers:
            if OUTSIDE.intersection(callers):
                collector["outside"] += value
            elif any(caller.startswith(IN_COMMANDS) for caller in callers):
                collector["commands"] += value
            else:
                collector["lua"] += value
        else:
            found.setdefault(name, value)
    if "total" not in found or SCRIPT not in found:
        raise RuntimeError(f"callgrind counted no {SCRIPT} in {dump.name}: no script ran")
    return Count(
        found["total"] / visits,
        found[SCRIPT] / visits,
        found.get(COMMANDS, 0) / visits,
        collector["outside"] / visits,
        collector["commands"] / visits,
        collector["lua"] / visits,
    )


class Counted(RedisServer):
    """The tests' redis-server, run under callgrind, counting only while a phase runs; its
    dumps go to its own directory."""

    def argv(self) -> list[str]:
        return [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--separate-callers{CALLERS}={COLLECTOR}",
            f"--callgrind-out-file={self.directory}/dump.%p",
            *super().argv(),
        ]

    def control(self, *words: str) -> None:
        assert self.process is not None
        subprocess.run(
            ["callgrind_control", *words, str(self.process.pid)], check=True, capture_output=True
        )

    def count(self, label: str, action: Callable[[], object], visits: int) -> Count:
        """``action``'s instructions per visit, run once more after a run that warms it."""
        action()
        self.control("--instr=on")
        self.control("--zero")
        action()
        self.control(f"--dump={label}")
        self.control("--instr=off")
        dumps = Path(self.directory).glob("dump.*")
        return counted(max(dumps, key=lambda path: path.stat().st_mtime_ns), visits)


def phases(b: batching.Batches) -> Iterator[tuple[str, Callable[[], object], int]]:
    """Each phase of ``b`` counted here: its label, its action and the visits it records."""
    in_no_room = [person for person in b.who if not person.rooms]
    whole, no_room = len(b.who) // AT * AT, len(in_no_room) // AT * AT
    floor = batching.FLOORS["a command per visit"]
    yield f"the floor, {AT} per call", lambda: b.floor(floor), whole
    yield f"the record script, {AT} per call", lambda: b.batch(b.who, AT), whole
    if b.other is not None:
        yield "the record script of the `--against` checkout", b.against, whole
    yield "the bound (`bench.bound`)", lambda: b.bound(b.who), whole
    yield "the record script, visits in no room", lambda: b.batch(in_no_room, AT), no_room
    yield "the bound, visits in no room", lambda: b.bound(in_no_room), no_room


def run(options: Options) -> Section:
    missing = [
        tool
        for tool in ("valgrind", "callgrind_control", "callgrind_annotate")
        if shutil.which(tool) is None
    ]
    if missing:
        raise RuntimeError(
            f"instructions needs valgrind (sudo apt-get install valgrind): {missing}"
        )
    found: dict[str, Count] = {}
    server = Counted()
    server.start(timeout=60)  # valgrind takes seconds to start it
    try:
        # A request's timeout (0.25 s) is too short for a Redis under valgrind.
        slow = mock.patch.object(whos.clients, "REQUEST_TIMEOUT", whos.clients.ADMIN_TIMEOUT)
        with slow, override_settings(WHOS_ONLINE={"REDIS_URL": server.url}):
            node, config = servers.Node.of(server), whos.get_config()
            crowd.fill(lambda _: node.client, config, options.people)
            options_of_batches = batching.Options(
                people=options.people, visits=options.visits, against=options.against
            )
            b = batching.Batches(node, config, options_of_batches)
            for label, action, visits in phases(b):
                found[label] = server.count(f"phase{len(found)}", action, visits)
    finally:
        server.close()
    return section(options, found)


def section(options: Options, found: Mapping[str, Count]) -> Section:
    floor, script = found[f"the floor, {AT} per call"], found[f"the record script, {AT} per call"]
    lean = found["the bound (`bench.bound`)"]
    rows = [
        [
            label,
            number(count.total),
            fixed(2)(count.total / floor.total),
            number(count.around),
            number(count.lua),
            number(count.commands),
            f"{number(count.collector)} ({number(count.collector_outside)} outside the script)",
        ]
        for label, count in found.items()
    ]
    return Section(
        "Instructions per visit in redis-server",
        f"{number(options.people)} people online, {number(options.visits)} visits of the mix of "
        f"`bench batching` per phase at {AT} per call, redis-server under valgrind's callgrind. "
        "Counts are exact, but how the calls fall into the socket's reads and where the garbage "
        "collector steps in vary a little run to run. The collector steps in wherever Lua "
        "allocates, a good part of it while Redis hands a call's arguments to Lua: the other "
        "columns leave it out, and it has its own. Around the script also holds Redis's timer "
        "and the bench's own INFO commands, a few hundred instructions a visit.",
        [
            table(
                "phase | instructions per visit | × the floor | around the script (the call, "
                "its arguments, the reply) | the script's Lua | its commands | garbage collection, "
                "wherever it ran",
                rows,
            )
        ],
        [
            f"The record script runs {script.total / lean.total:.2f} × the bound's instructions: "
            f"its Lua {script.lua / lean.lua:.2f} ×, its commands "
            f"{script.commands / lean.commands:.2f} ×, "
            f"around it {script.around / lean.around:.2f} ×."
        ],
    )
