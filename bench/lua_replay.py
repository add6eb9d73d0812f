"""The record script's own Lua, apart from Redis: what a rewrite of ``record.lua`` can be judged by
to a few percent on a shared machine, where Redis's CPU per visit moves by more than that.

Calls of 20 of the bench's mix (``bench.people``) are captured from a real redis-server: their
KEYS, their ARGV and every reply Redis gave the script's ``redis.call``. Debian's ``lua5.1`` (the
Lua Redis embeds) then runs the script on them again and again, each ``redis.call`` answering
what Redis answered: the time left is the script's Lua alone. ``--against CHECKOUT`` replays the
same calls through another checkout's script, in alternating runs; it must take the same
arguments and make the same calls, or the replay stops and says so.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from django.test import override_settings

from bench import internals as whos
from bench import people as crowd
from bench.harness import servers
from bench.harness.report import Section, fixed, number, table
from bench.harness.rounds import Spread, interleaved, ratios

#: Runs the script (the body of a function, as Redis runs it) with a ``redis.call`` that returns
#: the replies Redis gave, in order, and hands them back with the script's own reply.
CAPTURE: Final = """
local real_call, replies = redis.call, {}
redis.call = function(...)
  local reply = real_call(...)
  replies[#replies + 1] = reply
  return reply
end
local function body()
%s
end
local result = body()
redis.call = real_call
return cjson.encode({replies = replies})
"""
#: ``lua5.1 replay.lua SCRIPT CALLS ITERATIONS``: µs per call (the best of 5 runs of every call
#: ITERATIONS times), and Lua instructions per call.
REPLAY: Final = """
local script, calls, iterations = arg[1], arg[2], tonumber(arg[3])
dofile(calls)
local file = assert(io.open(script))
local chunk = assert(loadstring(file:read('*a')))
file:close()
local replies, at = nil, 0
redis = {call = function() at = at + 1; return replies[at] end, error_reply = error}
local function all()
  for c = 1, #CALLS do
    KEYS, ARGV, replies, at = CALLS[c].keys, CALLS[c].argv, CALLS[c].replies, 0
    chunk()
    if at ~= #replies then
      error('call ' .. c .. ' made ' .. at .. ' commands, not ' .. #replies)
    end
  end
end
all()
local best = math.huge
for _ = 1, 5 do
  collectgarbage('collect')
  local started = os.clock()
  for _ = 1, iterations do all() end
  best = math.min(best, (os.clock() - started) / (iterations * #CALLS) * 1e6)
end
local thousands = 0
debug.sethook(function() thousands = thousands + 1 end, '', 1000)
all()
debug.sethook()
print(best, thousands * 1000 / #CALLS)
"""
SIZE: Final = 20


@dataclass(frozen=True)
class Options:
    people: int = 100_000
    calls: int = 40
    iterations: int = 60
    repeats: int = 8
    #: Another checkout whose record script takes the same arguments and makes the same calls.
    against: Path | None = None


QUICK = Options(people=5_000, calls=4, iterations=3, repeats=2)


def lua_literal(value: object) -> str:
    """``value`` (a decoded JSON reply, or a call's arguments) as a Lua expression; strings
    byte for byte, in decimal escapes where not plain."""
    if value is None or value is False:
        return "false"
    if value is True:
        return "true"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        plain = (
            chr(b) if chr(b).isalnum() or chr(b) in " :_-./,{}" else f"\\{b}"
            for b in value.encode()
        )
        return "'" + "".join(plain) + "'"
    if isinstance(value, list):
        return "{" + ",".join(map(lua_literal, value)) + "}"
    if isinstance(value, dict):
        return (
            "{" + ",".join(f"[{lua_literal(k)}]={lua_literal(v)}" for k, v in value.items()) + "}"
        )
    raise TypeError(f"no Lua for {type(value).__name__}")


def capture(options: Options, folder: Path) -> Path:
    """``options.calls`` calls of the mix, as a Lua file of their KEYS, ARGV and replies."""
    with servers.redis_server() as server, override_settings(WHOS_ONLINE={"REDIS_URL": server.url}):
        node, config = servers.Node.of(server), whos.get_config()
        crowd.fill(lambda _: node.client, config, options.people)
        who = crowd.chosen(
            config, options.people, options.calls * SIZE // 2, options.calls * SIZE // 2, seed=1
        )
        crowd.warm_up(whos.clients.request_client(), config, who)
        wrapped = CAPTURE % whos.lua.RECORD
        calls = []
        for batch in crowd.calls_of(who, SIZE):
            now = time.time()
            visits = [crowd.visit_of(person, now, turn=1) for person in batch]
            entries = [entry for visit in visits for entry in whos.items.entries_of(config, visit)]
            if len({entry.shard for entry in entries}) != 1:
                raise RuntimeError("lua_replay captures the calls of one shard (SHARDS = 1)")
            (call,) = whos.record.batch_calls(
                config, entries[0].shard, entries, now=now, epoch="-"
            ).calls
            args = [str(arg) for arg in call.args]
            replies = json.loads(node.client.eval(wrapped, len(call.keys), *call.keys, *args))
            keys = lua_literal(list(call.keys))
            calls.append(
                f"{{keys={keys},argv={lua_literal(args)},replies={lua_literal(replies['replies'])}}}"
            )
    path = folder / "calls.lua"
    path.write_text("CALLS = {\n" + ",\n".join(calls) + "\n}\n")
    return path


def replay(lua: str, script: Path, calls: Path, iterations: int) -> tuple[float, float]:
    """(µs, Lua instructions) per call of ``script`` over the captured ``calls``."""
    runner = calls.with_name("replay.lua")
    runner.write_text(REPLAY)
    found = subprocess.run(
        [lua, str(runner), str(script), str(calls), str(iterations)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if found.returncode != 0:
        raise RuntimeError(f"the replay of {script.name} failed: {found.stderr.strip()}")
    us, instructions = found.stdout.split()
    return float(us), float(instructions)


def run(options: Options) -> Section:
    lua = shutil.which("lua5.1")
    if lua is None:
        raise RuntimeError("lua_replay needs Debian's lua5.1 (sudo apt-get install lua5.1)")
    with tempfile.TemporaryDirectory(prefix="whos-online-lua-") as temporary:
        folder = Path(temporary)
        calls = capture(options, folder)
        scripts = {"this checkout": folder / "record.lua"}
        scripts["this checkout"].write_text(whos.lua.RECORD)
        if options.against is not None:
            scripts[str(options.against)] = folder / "against.lua"
            scripts[str(options.against)].write_text(
                whos.lua.load("record", options.against / "whos_online" / "store" / "lua")
            )
        found = interleaved(
            list(scripts),
            options.repeats,
            lambda name: replay(lua, scripts[name], calls, options.iterations),
            label="replays",
        )
    base = [us for us, _ in found["this checkout"]]
    rows = [
        [
            name,
            Spread.of([us for us, _ in runs]).show(fixed(1)),
            Spread.of([us / SIZE for us, _ in runs]).show(fixed(2)),
            f"{statistics.median(n for _, n in runs) / SIZE:.0f}",
            ratios([us for us, _ in runs], base).show(fixed(3)),
        ]
        for name, runs in found.items()
    ]
    return Section(
        "The record script's Lua, replayed",
        f"{options.calls} calls of {SIZE} of the mix of `bench batching` ({number(options.people)} "
        f"people online) captured from redis-server, replayed in lua5.1 {options.iterations} "
        f"times per run (the best of 5), {options.repeats} runs of each script in turns; median "
        "(min–max).",
        [
            table(
                "script | µs per call | µs per entry | Lua instructions per entry "
                "| × this checkout",
                rows,
            )
        ],
    )
