"""Time-series counters in Redis, kept at several precisions ("Redis in Action" 5.2).

One HASH per counter and precision (slice start to count), and a sorted set naming them all so
that the cleanup finds them; every script keeps a counter that exists named in that set, so that
cleaning never loses an update (docs/counters.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from whos_online.backend import keyspace
from whos_online.store import lua, scripts

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config

#: Longest counter name accepted; names become part of Redis keys.
MAX_COUNTER_NAME_LENGTH: Final = 200

#: The range of a Redis integer, which is what a counter sample is.
MIN_COUNT: Final = -(2**63)
MAX_COUNT: Final = 2**63 - 1

#: Counters (precision and name) handled per cleaning step, and slices deleted per command.
CLEAN_PAGE_SIZE: Final = 100
DELETE_CHUNK_SIZE: Final = 1000

#: Cleaning a precision more often than this gains nothing: a minute of 1-second slices is small.
MIN_CLEAN_INTERVAL: Final = 60


def known_key(config: Config) -> str:
    return keyspace.key(config, "counters")


def counter_prefix(config: Config) -> str:
    return keyspace.key(config, "counter:")


def counter_key(config: Config, name: str, precision: int) -> str:
    return counter_prefix(config) + member(name, precision)


def member(name: str, precision: int) -> str:
    return f"{precision}:{name}"


def slice_start(now: float, precision: int) -> int:
    return int(now // precision) * precision


def check_name(name: object) -> str:
    """Return ``name`` if it can name a counter; raise ValueError or TypeError otherwise."""
    if not isinstance(name, str):
        msg = f"A counter name must be a str, not {type(name).__name__}."
        raise TypeError(msg)
    if not name or len(name) > MAX_COUNTER_NAME_LENGTH:
        longest = MAX_COUNTER_NAME_LENGTH
        msg = f"A counter name must have 1 to {longest} characters, not {len(name)}."
        raise ValueError(msg)
    try:
        name.encode()
    except UnicodeEncodeError:
        msg = f"A counter name must be valid Unicode text, not {name!r}."
        raise ValueError(msg) from None
    return name


def check_count(count: object, caller: str) -> int:
    """Return ``count`` if ``caller`` may add it to a counter; raise TypeError or ValueError."""
    if not _is_whole_number(count):
        msg = f"{caller}() counts in whole numbers, not {type(count).__name__}."
        raise TypeError(msg)
    assert isinstance(count, int)
    if not MIN_COUNT <= count <= MAX_COUNT:
        msg = f"{caller}() counts must be in Redis's 64-bit integer range, not {count}."
        raise ValueError(msg)
    return count


def check_precision(precision: object, precisions: Sequence[int], caller: str) -> int:
    """Return ``precision`` if it is one of ``precisions``; raise TypeError or ValueError."""
    if not _is_whole_number(precision):
        msg = f"{caller}() precision is a whole number of seconds, not {precision!r}."
        raise TypeError(msg)
    if precision not in precisions:
        msg = (
            f"{caller}() precision must be one of COUNTER_PRECISIONS {list(precisions)}, "
            f"not {precision!r}."
        )
        raise ValueError(msg)
    assert isinstance(precision, int)
    return precision


def _is_whole_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@functools.lru_cache(maxsize=8)
def precisions_arg(precisions: tuple[int, ...]) -> str:
    """The precisions as the scripts read them (``parse_precisions``)."""
    return ",".join(map(str, precisions))


def increment_args(amounts: Mapping[tuple[str, int], int]) -> list[str | int]:
    """How many increments, then (name, second, amount) for each amount by (name, second).

    Zero amounts are left out, so that adding nothing stores no 0 sample.
    """
    args: list[str | int] = [0]
    for (name, second), amount in amounts.items():
        if amount:
            args += (name, int(second), amount)
    args[0] = (len(args) - 1) // 3
    return args


def add(
    client: Client,
    config: Config,
    amounts: Mapping[tuple[str, int], int],
    *,
    batch: tuple[str, int] | None = None,
) -> None:
    """Add each amount, keyed by (counter name, Unix second), at every precision in one call;
    with ``batch``, (process token, batch number), only if that batch was not added before."""
    args = increment_args(amounts)
    if args[0]:
        scripts.call(
            client,
            lua.UPDATE_COUNTERS,
            [known_key(config)],
            args=[
                counter_prefix(config),
                precisions_arg(config.counter_precisions),
                *batch_args(config, batch),
                *args,
            ],
        )


#: Seconds Redis remembers the highest batch of page hits a process added (refreshed by each
#: batch): far longer than a failed batch waits to be sent again, which is about
#: ``FAILURE_BACKOFF``.
APPLIED_MEMORY: Final = 86400


def applied_key(config: Config, token: str) -> str:
    """The key that remembers the highest batch of page hits the process ``token`` added."""
    return keyspace.key(config, f"hits-applied:{token}")


def batch_args(config: Config, batch: tuple[str, int] | None) -> list[str | int]:
    """What ``add_batch`` reads before the increments: the key that remembers the process's
    highest batch added (under the counters' hash tag), the number, and how long to remember."""
    if batch is None:
        return ["", 0, 0]
    token, number = batch
    return [applied_key(config, token), number, APPLIED_MEMORY]


def get(client: Client, config: Config, name: str, precision: int) -> list[tuple[int, int]]:
    stored = client.hgetall(counter_key(config, name, precision))
    return sorted((int(start), int(count)) for start, count in stored.items())


def names(
    client: Client,
    config: Config,
    precision: int,
    *,
    limit: int,
    among: Sequence[str] = (),
) -> tuple[list[str], int, int]:
    """The first ``limit`` names (in lexical order) of the counters kept at ``precision``, how
    many there are, and how many of the names ``among`` are kept too, in one round trip.

    Members of the known set are ``<precision>:<name>`` with equal scores, so a lexical range
    selects one precision: from ``[60:`` to ``(60;`` (``;`` follows ``:``), which "600:…" is not
    part of, since "0" sorts before ":".
    """
    low, high = f"[{precision}:", f"({precision};"
    pipe = client.pipeline(transaction=False)
    pipe.zrangebylex(known_key(config), low, high, start=0, num=limit)
    pipe.zlexcount(known_key(config), low, high)
    if among:
        pipe.zmscore(known_key(config), [member(name, precision) for name in among])
    found, total, *scores = pipe.execute()
    present = sum(score is not None for score in scores[0]) if scores else 0
    return [keyspace.text(each).partition(":")[2] for each in found], int(total), present


def samples(
    client: Client,
    config: Config,
    counter_names: Sequence[str],
    precision: int,
    starts: Sequence[int],
) -> list[list[int | None]]:
    """Each counter's samples at the slices ``starts`` (None where a slice has none), in one
    round trip.

    HMGET of the slices wanted rather than HGETALL: the read stays as small as the chart however
    long the cleanup has not run (a HASH keeps growing until it does).
    """
    if not counter_names:
        return []
    fields = [str(start) for start in starts]
    pipe = client.pipeline(transaction=False)
    for name in counter_names:
        pipe.hmget(counter_key(config, name, precision), fields)
    return [[None if value is None else int(value) for value in found] for found in pipe.execute()]


@dataclass
class Cleaned:
    """What ``clean`` did, counted counter by counter."""

    #: Every sample removed, those of dropped counters included.
    samples: int = 0
    #: Counters of precisions no longer configured, dropped whole, and how many samples they held.
    counters_dropped: int = 0
    dropped_samples: int = 0


def clean(
    client: Client,
    config: Config,
    *,
    now: float,
    precisions: Iterable[int] | None = None,
    dry_run: bool = False,
    between_pages: Callable[[], object] | None = None,
    into: Cleaned | None = None,
) -> Cleaned:
    """Drop slices older than the newest ``COUNTER_SAMPLES`` of each counter.

    ``precisions`` limits the work to those (the command's schedule); counters of precisions no
    longer in ``COUNTER_PRECISIONS`` are always dropped whole. Each counter is one round trip to
    read and one script call per ``DELETE_CHUNK_SIZE`` slices, so Redis is never busy for long.
    ``between_pages`` runs after each page of ``CLEAN_PAGE_SIZE`` counters: the command keeps
    its lock and hears a stop signal there, however many counters a site has. ``into``, when
    given, is what is returned, counted counter by counter: a caller that ``between_pages``
    stops by raising still knows what went.
    """
    wanted = set(config.counter_precisions if precisions is None else precisions)
    cleaned = Cleaned() if into is None else into
    for page in _known_pages(client, config):
        pipe = client.pipeline(transaction=False)
        for name_member in page:
            pipe.hkeys(counter_prefix(config) + name_member)
        for name_member, fields in zip(page, pipe.execute(), strict=True):
            precision = _precision_of(name_member)
            if precision not in config.counter_precisions:
                samples = _drop(client, config, name_member, len(fields), dry_run=dry_run)
                cleaned.samples += samples
                cleaned.dropped_samples += samples
                cleaned.counters_dropped += 1
            elif precision in wanted:
                cutoff = now - config.counter_samples * precision
                stale = [field for field in fields if int(field) <= cutoff]
                cleaned.samples += _delete(client, config, name_member, stale, dry_run=dry_run)
        if between_pages is not None:
            between_pages()
    return cleaned


def _known_pages(client: Client, config: Config) -> Iterator[list[str]]:
    # Paging by name rather than by rank: members removed behind the cursor shift no page.
    after = "-"
    while True:
        page = [
            keyspace.text(found)
            for found in client.zrangebylex(
                known_key(config), after, "+", start=0, num=CLEAN_PAGE_SIZE
            )
        ]
        if page:
            yield page
        if len(page) < CLEAN_PAGE_SIZE:
            return
        after = "(" + page[-1]


def _precision_of(name_member: str) -> int | None:
    head, _, _ = name_member.partition(":")
    return int(head) if head.isdigit() else None


def _delete(
    client: Client, config: Config, name_member: str, stale: list[bytes], *, dry_run: bool
) -> int:
    if dry_run:
        return len(stale)
    removed = 0
    keys = [counter_prefix(config) + name_member, known_key(config)]
    # An empty call still runs, so that a HASH found empty is forgotten.
    for start in range(0, max(len(stale), 1), DELETE_CHUNK_SIZE):
        chunk = stale[start : start + DELETE_CHUNK_SIZE]
        slices = [keyspace.text(field) for field in chunk]
        removed += int(scripts.call(client, lua.DELETE_SLICES, keys, [name_member, *slices]))
    return removed


def _drop(client: Client, config: Config, name_member: str, size: int, *, dry_run: bool) -> int:
    if dry_run:
        return size
    return int(
        scripts.call(
            client,
            lua.DROP_COUNTER,
            [counter_prefix(config) + name_member, known_key(config)],
            args=[name_member],
        )
    )


def cleaning_due(client: Client, config: Config, *, now: float) -> list[int]:
    """The precisions whose cleaning is due: each is cleaned every max(precision, 60) seconds."""
    last = client.hmget(_cleaned_key(config), [str(p) for p in config.counter_precisions])
    return [
        precision
        for precision, when in zip(config.counter_precisions, last, strict=True)
        if when is None or now - float(when) >= max(precision, MIN_CLEAN_INTERVAL)
    ]


def mark_cleaned(client: Client, config: Config, precisions: Sequence[int], now: float) -> None:
    key = _cleaned_key(config)
    pipe = client.pipeline(transaction=False)
    if precisions:
        pipe.hset(key, mapping={str(p): f"{now:.3f}" for p in precisions})
    gone = [
        field
        for field in client.hkeys(key)
        if _precision_of(keyspace.text(field)) not in config.counter_precisions
    ]
    if gone:
        pipe.hdel(key, *gone)
    pipe.execute()


def _cleaned_key(config: Config) -> str:
    return keyspace.key(config, "counters-cleaned")
