"""wrk (Debian's package ``wrk``) loading one site with a crowd of clients, each request's
headers those of the next client in turn, or of a new client each time; its summary read back
as one JSON line, sturdier than wrk's human report."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

MARKER: Final = "WHOS_ONLINE_WRK "
#: One wrk thread and four connections keep two sync workers busy on a 2-core machine.
THREADS: Final = 1
CONNECTIONS: Final = 4

_SCRIPT: Final = """
local clients = {
%(clients)s
}
local requests, next_one = {}, 0
-- -1: the clients in turn; otherwise a new client each request, numbered from this on.
local fresh = %(fresh)d

init = function(args)
  for i, headers in ipairs(clients) do requests[i] = wrk.format("GET", "/", headers) end
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
  io.write(string.format("%(marker)s{\\"requests\\": %%.0f, \\"duration_us\\": %%.0f, "
    .. "\\"errors\\": %%.0f, \\"p50_us\\": %%.0f, \\"p99_us\\": %%.0f}\\n",
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""
_PRINTABLE: Final = re.compile(r"^[\x20-\x7e]*$")


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


def _lua(text: str) -> str:
    if not _PRINTABLE.match(text):
        raise ValueError(f"not a printable ASCII header value: {text!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def run(
    port: int, clients: Sequence[Mapping[str, str]], seconds: float, *, fresh: int = -1
) -> Result:
    """Load ``/`` for ``seconds`` (whole), the ``clients`` in turn, or with ``fresh`` ≥ 0 a new
    client each request (the first one's headers, its address ``10.a.b.c`` of ``fresh + 1``,
    ``fresh + 2`` and so on), whom no cookie and no memory of the site spares a write."""
    rows = [
        "{" + ", ".join(f"[{_lua(k)}] = {_lua(v)}" for k, v in c.items()) + "}," for c in clients
    ]
    script = _SCRIPT % {"clients": "\n".join(rows), "marker": MARKER, "fresh": fresh}
    with tempfile.NamedTemporaryFile("w", suffix=".lua", prefix="whos-online-wrk-") as lua:
        lua.write(script)
        lua.flush()
        command = ["wrk", f"--threads={THREADS}", f"--connections={CONNECTIONS}"]
        command += [f"--duration={round(seconds)}s", "--timeout=10s", f"--script={lua.name}"]
        finished = subprocess.run(
            [*command, f"http://127.0.0.1:{port}/"],
            capture_output=True,
            text=True,
            check=False,
            timeout=seconds + 60,
        )
    lines = [line for line in finished.stdout.splitlines() if line.startswith(MARKER)]
    if finished.returncode != 0 or not lines:
        raise RuntimeError(
            f"wrk failed ({finished.returncode}): {finished.stderr or finished.stdout}"
        )
    found = json.loads(lines[-1][len(MARKER) :])
    return Result(
        int(found["requests"]),
        found["duration_us"] / 1e6,
        int(found["errors"]),
        found["p50_us"] / 1e6,
        found["p99_us"] / 1e6,
    )
