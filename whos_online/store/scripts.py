"""Running the Lua scripts: one round trip for every script a read or a visit needs.

The sources come from ``whos_online.store.lua``; what is sent is a ``ScriptCall``, so that the
callers (a visit, a snapshot over every shard) build their calls first and send them together.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from redis.exceptions import NoScriptError, ResponseError

from whos_online.backend.clients import execute, is_cluster

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from redis.client import Pipeline
    from redis.cluster import ClusterPipeline

    from whos_online.backend.clients import Client

T = TypeVar("T")


@dataclass(frozen=True)
class ScriptCall:
    """One script to run on one shard: what ``run`` sends, in one pipeline or one by one."""

    source: str
    keys: list[str]
    args: list[str | int | float]


def call(
    client: Client, source: str, keys: Sequence[str], args: Sequence[str | int | float]
) -> Any:
    """Run one script and return its reply (an error reply is raised): ``run`` for one call."""
    return run(client, [ScriptCall(source, list(keys), list(args))])[0]


def run(client: Client, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run ``calls`` and return their replies, in one round trip where the client allows; the
    first error reply is raised.

    On one Redis (plain or Sentinel-managed) several calls go out in one pipeline of EVALSHAs;
    scripts the server does not know yet are loaded and the pipeline is sent once more. A cluster
    client runs each call on its own (redis-py refuses EVALSHA in cluster pipelines), following
    MOVED and ASK replies, so a call costs one round trip to the node of its shard.
    """
    found = replies(client, calls)
    for reply in found:
        if isinstance(reply, Exception):
            raise reply
    return found


def replies(client: Client, calls: Sequence[ScriptCall]) -> list[Any]:
    """``run``, with an error reply (a script's, or a Redis that refuses writes) in the place of
    its call's reply rather than raised: for a round trip that writes and reads, whose read may
    succeed where its write was refused. A connection error is raised."""
    if len(calls) == 1 or is_cluster(client):
        return [_reply_of(client, call) for call in calls]
    written, _read, _answer = _pipelined(client, calls, _nothing)
    return written


def run_then(
    client: Client,
    calls: Sequence[ScriptCall],
    ask: Callable[[Pipeline | ClusterPipeline], Callable[[list[Any]], T]],
) -> tuple[list[Any], T]:
    """``calls`` (a flush of the process's queue), then a read made of plain commands, in one
    pipeline: one round trip on one Redis. ``ask`` queues the read's commands on the pipeline
    and returns what makes the read's answer of their replies.

    Returns the replies of ``calls`` as ``replies`` gives them (an error in the place of a call
    that failed, such as a write refused by a full Redis, which the read may survive) and the
    answer; an error of the read is raised. A cluster client takes no ``calls`` (redis-py
    refuses EVALSHA in cluster pipelines): ``Flusher.flush_with`` writes them first there."""
    written, read, answer = _pipelined(client, calls, ask)
    for reply in read:
        if isinstance(reply, Exception):
            raise reply
    return written, answer(read)


def _pipelined(
    client: Client,
    calls: Sequence[ScriptCall],
    ask: Callable[[Pipeline | ClusterPipeline], Callable[[list[Any]], T]],
) -> tuple[list[Any], list[Any], Callable[[list[Any]], T]]:
    """One pipeline of EVALSHAs for ``calls`` and the commands ``ask`` queues after them;
    scripts the server does not know yet are loaded and the pipeline is sent once more.
    Returns the calls' replies, the commands' replies, and what ``ask`` returned."""
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for one in calls:
            pipe.evalsha(sha1_of(one.source), len(one.keys), *one.keys, *one.args)
        answer = ask(pipe)
        answered = list(pipe.execute(raise_on_error=False))
        written = answered[: len(calls)]
        missing = _missing(calls, written)
        if not missing or attempt:
            break
        for source in missing:
            client.script_load(source)
    return written, answered[len(calls) :], answer


def _missing(calls: Sequence[ScriptCall], written: Sequence[Any]) -> list[str]:
    """The sources of the scripts whose calls failed because the server did not know them,
    each once."""
    missing = {
        one.source: None
        for one, reply in zip(calls, written, strict=True)
        if isinstance(reply, NoScriptError)
    }
    return list(missing)


def _nothing(pipe: Pipeline | ClusterPipeline) -> Callable[[list[Any]], None]:
    return lambda replies: None


def _reply_of(client: Client, call: ScriptCall) -> Any:
    try:
        return _run_one(client, call)
    except ResponseError as error:
        return error


def _run_one(client: Client, call: ScriptCall) -> Any:
    """EVALSHA, or EVAL (which also loads the script) if the server lacks it.

    Not redis-py's ``Script``: its call costs about 9 µs more than the EVALSHA itself, which is
    on every recorded visit. And not its reload on a cluster, which sends SCRIPT LOAD to every
    primary, so that a master that is down would make every node that has not run the script yet
    fail too. Sent by ``clients.execute``, which spares one Redis redis-py's per-call work.
    """
    numkeys = len(call.keys)
    try:
        return execute(client, "EVALSHA", sha1_of(call.source), numkeys, *call.keys, *call.args)
    except NoScriptError:
        return execute(client, "EVAL", call.source, numkeys, *call.keys, *call.args)


@functools.cache
def sha1_of(source: str) -> str:
    """A script's SHA1, as EVALSHA names it (worked out once per script and process)."""
    return hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
