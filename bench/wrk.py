"""Runs wrk (Debian's package ``wrk``) against one site and reads back what it measured.

The clients are given as header sets; a generated Lua script formats one request per client once,
hands them out in turn (so that consecutive requests come from different clients), and prints the
summary as one JSON line, which is sturdier to read than wrk's human report.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

MARKER: Final = "WHOS_ONLINE_WRK "
#: Threads and connections: one wrk thread keeps two sync workers busy on a 2-core machine.
THREADS: Final = 1
CONNECTIONS: Final = 4

_SCRIPT: Final = """
local clients = {
%(clients)s
}
local requests = {}
local next_one = 0
-- -1: the clients in turn; otherwise a new client each request, from this number on.
local fresh = %(fresh)d

init = function(args)
  for i, headers in ipairs(clients) do
    requests[i] = wrk.format("GET", "/", headers)
  end
end

request = function()
  if fresh >= 0 then
    fresh = fresh + 1
    local headers = {}
    for name, value in pairs(clients[1]) do headers[name] = value end
    headers["X-Forwarded-For"] = string.format("10.%%d.%%d.%%d",
      math.floor(fresh / 65536) %% 256, math.floor(fresh / 256) %% 256, fresh %% 256)
    return wrk.format("GET", "/", headers)
  end
  next_one = next_one %% #requests + 1
  return requests[next_one]
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "%(marker)s{\\"requests\\": %%.0f, \\"duration_us\\": %%.0f, \\"connect\\": %%.0f, "
    .. "\\"read\\": %%.0f, \\"write\\": %%.0f, \\"status\\": %%.0f, \\"timeout\\": %%.0f, "
    .. "\\"p50_us\\": %%.0f, \\"p99_us\\": %%.0f}\\n",
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""

_SAFE: Final = re.compile(r"^[\x20-\x7e]*$")


@dataclass(frozen=True)
class Result:
    requests: int
    seconds: float
    #: Socket errors, time-outs and responses other than 2xx/3xx.
    errors: int
    p50: float
    p99: float

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds


def _lua_string(text: str) -> str:
    if not _SAFE.match(text):
        msg = f"not a printable ASCII header value: {text!r}"
        raise ValueError(msg)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def script(clients: Sequence[Mapping[str, str]], fresh: int = -1) -> str:
    """The Lua script: the clients in turn or, with ``fresh`` ≥ 0, a new client for each request
    (the first client's headers with the address ``10.a.b.c`` of ``fresh + 1``, ``fresh + 2``
    and so on), whom no cookie and no memory of the site spares a write."""
    rows = [
        "  {" + ", ".join(f"[{_lua_string(k)}] = {_lua_string(v)}" for k, v in c.items()) + "},"
        for c in clients
    ]
    return _SCRIPT % {"clients": "\n".join(rows), "marker": MARKER, "fresh": fresh}


def run(
    port: int, clients: Sequence[Mapping[str, str]], seconds: int, *, fresh: int = -1
) -> Result:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", prefix="whos-online-wrk-") as lua:
        lua.write(script(clients, fresh))
        lua.flush()
        finished = subprocess.run(
            [
                "wrk",
                f"--threads={THREADS}",
                f"--connections={CONNECTIONS}",
                f"--duration={seconds}s",
                "--timeout=10s",
                f"--script={Path(lua.name)}",
                f"http://127.0.0.1:{port}/",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=seconds + 60,
        )
    if finished.returncode != 0:
        msg = f"wrk failed ({finished.returncode}): {finished.stderr or finished.stdout}"
        raise RuntimeError(msg)
    lines = [line for line in finished.stdout.splitlines() if line.startswith(MARKER)]
    if not lines:
        raise RuntimeError(f"wrk printed no summary:\n{finished.stdout}")
    found = json.loads(lines[-1][len(MARKER) :])
    return Result(
        requests=int(found["requests"]),
        seconds=found["duration_us"] / 1e6,
        errors=int(sum(found[kind] for kind in ("connect", "read", "write", "status", "timeout"))),
        p50=found["p50_us"] / 1e6,
        p99=found["p99_us"] / 1e6,
    )
