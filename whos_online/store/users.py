"""Users in Redis: what whos_online stores about one, how a stored primary key becomes the
user's again, whether given users are online, and taking one off (or out of a room).

``DISPLAY_NAME`` and ``HIDE_USER`` run when the user is recorded, never when the list is read, so
that the list costs no SQL; names and URLs are cleaned first, so that neither can change the page
around them nor run script. Each read of presence is one pipeline, never a walk of a set, queued
on the caller's pipeline (``ask_*``) so that the API reads in the round trip that writes the
process's queue.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from whos_online.backend import keyspace
from whos_online.backend.keyspace import (
    KINDS,
    ROOM_PREFIX,
    ROOMS_WHERE,
    gone_key,
    layouts_known,
    links_key,
    score,
    user_key,
    user_person_key,
    user_shard,
)
from whos_online.store import lua
from whos_online.store.scripts import ScriptCall, run

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from redis.client import Pipeline
    from redis.cluster import ClusterPipeline

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config


#: Longest display name stored; longer names are cut, so one user cannot bloat the list.
MAX_DISPLAY_NAME_LENGTH: Final = 150


@dataclass(frozen=True)
class UserDetails:
    """What a user's display HASH holds, and whether they are counted but not named."""

    pk: str
    hidden: bool
    name: str
    url: str


def pk_text(user: AbstractBaseUser | AnonymousUser | object) -> str:
    """A user's primary key as stored: a user, or a primary key given as it is."""
    return str(getattr(user, "pk", user))


def pk_values(texts: Iterable[str]) -> list[object]:
    """Primary keys as the user model has them, from their stored text (kept as text if the
    model would not take it). The model's field is looked up once for the whole list."""
    to_python = get_user_model()._meta.pk.to_python
    values = []
    for text in texts:
        try:
            values.append(to_python(text))
        except ValidationError:
            values.append(text)
    return values


def display_name(user: AbstractBaseUser | AnonymousUser, config: Config) -> str:
    name = config.display_name(user) if config.display_name else user.get_username()
    # A lone surrogate cannot be sent to Redis; replace it rather than fail the request.
    # Cleaned after the cut, which could leave a bidirectional run open.
    cut = str(name)[:MAX_DISPLAY_NAME_LENGTH]
    return clean_name(cut.encode("utf-8", "replace").decode())


def profile_url(user: AbstractBaseUser | AnonymousUser) -> str:
    """The user's ``get_absolute_url()``, if a link to it cannot run script (else "")."""
    get_absolute_url = getattr(user, "get_absolute_url", None)
    return linkable_url(str(get_absolute_url())) if callable(get_absolute_url) else ""


def details(user: AbstractBaseUser | AnonymousUser, config: Config) -> UserDetails:
    """What is stored about a user: runs the site's ``HIDE_USER`` and ``DISPLAY_NAME``."""
    return UserDetails(
        pk=pk_text(user),
        hidden=bool(config.hide_user and config.hide_user(user)),
        name=display_name(user, config),
        url=profile_url(user),
    )


#: Combining marks kept on one base character. Vietnamese, Hebrew and Indic scripts stack up to
#: three or four; stacking beyond that is decoration at the expense of the page.
MAX_COMBINING_MARKS: Final = 4

#: Bidirectional formatting characters that open a run, and the character that closes it.
_OPENERS: Final = {
    "\u202a": "\u202c",  # LEFT-TO-RIGHT EMBEDDING … POP DIRECTIONAL FORMATTING
    "\u202b": "\u202c",  # RIGHT-TO-LEFT EMBEDDING
    "\u202d": "\u202c",  # LEFT-TO-RIGHT OVERRIDE
    "\u202e": "\u202c",  # RIGHT-TO-LEFT OVERRIDE
    "\u2066": "\u2069",  # LEFT-TO-RIGHT ISOLATE … POP DIRECTIONAL ISOLATE
    "\u2067": "\u2069",  # RIGHT-TO-LEFT ISOLATE
    "\u2068": "\u2069",  # FIRST STRONG ISOLATE
}
_CLOSERS: Final = frozenset(_OPENERS.values())
_WHITESPACE_CONTROLS: Final = frozenset("\t\n\v\f\r\x1c\x1d\x1e\x1f\x85")
LINKED_SCHEMES: Final = frozenset({"http", "https"})


def clean_name(name: str) -> str:
    """``name`` with control characters, unpaired bidirectional controls and excess combining
    marks removed (see the module's docstring)."""
    if name.isascii() and name.isprintable():
        return name  # the common case, at the cost of two C loops
    kept: list[str] = []
    open_runs: list[tuple[int, str]] = []  # (index in kept, the closer it waits for)
    marks = 0
    for char in name:
        category = unicodedata.category(char)
        if category == "Cc":
            if char in _WHITESPACE_CONTROLS:
                kept.append(" ")
            marks = 0
            continue
        if category in {"Mn", "Me"}:
            marks += 1
            if marks > MAX_COMBINING_MARKS:
                continue
        else:
            marks = 0
        if char in _OPENERS:
            open_runs.append((len(kept), _OPENERS[char]))
        elif char in _CLOSERS:
            if not open_runs or open_runs[-1][1] != char:
                continue  # closes nothing: dropped
            open_runs.pop()
        kept.append(char)
    for index, _closer in reversed(open_runs):
        del kept[index]  # never closed: dropped
    return "".join(kept)


def linkable_url(url: str) -> str:
    """``url`` if a link to it cannot run script (``http``, ``https``, or a path on this site),
    else ``""``. Browsers ignore tabs and line breaks inside a scheme (``java\\tscript:``), and
    read ``/\\host`` as ``//host``, so a URL holding either is not linked at all."""
    if not url or not url.isprintable() or "\\" in url or url != url.strip():
        return ""
    if url.startswith("/"):
        return "" if url.startswith("//") else url  # "//host" may be any host
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return url if parts.scheme.lower() in LINKED_SCHEMES and parts.netloc else ""


#: Seconds the mark of an erasure lives: longer than any batch stays on its way, short enough
#: that nothing keyed by the erased user's primary key outlives the day.
ERASURE_MARK_LIVES: Final = 86400


def erase_user(client: Client, config: Config, pk: str, *, now: float) -> bool:
    """Erase a user from every layout the site's processes have written in and the cleanup has
    seen: a user recorded before ``SHARDS`` changed has their last-seen record in the old one
    until it expires."""
    for shards in layouts_known(client, config):
        remove_user(client, config, pk, now=now, erase=True, shards=shards)
    return True


def remove_user(
    client: Client,
    config: Config,
    pk: str,
    *,
    now: float,
    erase: bool = False,
    shards: int | None = None,
) -> None:
    """Take a user off the online list and out of their room as of ``now``, in one call, unless
    they were seen since (a visit from another device); with ``erase``, whenever they were seen,
    and drop their last-seen record too.

    An erasure also takes them out of the rooms their connections hold, and forgets those; a
    logout leaves them there (a connection holds the person it was opened with until it
    leaves). Either way a mark says when they left (the time, no more), so that a visit of
    theirs from before, still on its way from a process or sent again after an outage, does not
    bring them back: for ``WINDOW`` after a logout (a visit older than that no longer counts
    anyway), for ``ERASURE_MARK_LIVES`` after an erasure (which would otherwise write their name
    again).
    ``shards`` names another layout than the configured one (the cleanup's old layouts, an
    erasure's).
    """
    shard = _shard_in(config, user_person_key(pk), shards)
    keys = [shard.key("users"), shard.key("hidden"), shard.key(ROOMS_WHERE), gone_key(shard, pk)]
    mark_lives = config.window
    if erase:
        keys += [user_key(shard, pk), links_key(shard, user_person_key(pk))]
        mark_lives = max(config.window, ERASURE_MARK_LIVES)
    arguments: list[str | int | float] = [
        pk,
        shard.key(ROOM_PREFIX),
        score(now),
        mark_lives,
        user_person_key(pk),
    ]
    run(client, [ScriptCall(lua.LEAVE, keys, arguments)])


def _shard_in(config: Config, person: str, shards: int | None) -> keyspace.Shard:
    if shards is None or shards == config.shards:
        return keyspace.shard_of(config, person)
    layout = keyspace.layout(config, shards)
    return layout[keyspace.bucket(person, len(layout))]


#: Per user: their score in the online sets and when they were last seen (None: not there).
Presences = list[tuple[float | None, float | None]]


def users_presence(client: Client, config: Config, pks: Sequence[str]) -> Presences:
    """(score in the online sets, last seen from the HASH) of each of ``pks``, in one pipeline
    (one round trip on one Redis).

    The scores are read with one ZMSCORE (Redis 6.2) per online set and shard, however many of
    ``pks`` it holds, rather than two ZSCOREs per user; the last-seen times stay one HGET per
    user, since each lives in that user's own HASH.
    """
    pipe = client.pipeline(transaction=False)
    answer = ask_users_presence(pipe, config, pks)
    return answer(pipe.execute())


def ask_users_presence(
    pipe: Pipeline | ClusterPipeline, config: Config, pks: Sequence[str]
) -> Callable[[list[Any]], Presences]:
    """``users_presence``'s commands, queued on ``pipe``; returns what makes its answer."""
    if not pks:
        return lambda replies: []  # ZMSCORE with no member is an error, not an empty reply
    shards = [user_shard(config, pk) for pk in pks]
    by_shard: dict[keyspace.Shard, list[str]] = {}
    for pk, shard in zip(pks, shards, strict=True):
        by_shard.setdefault(shard, []).append(pk)
    for shard, members in by_shard.items():
        pipe.zmscore(shard.key("users"), members)
        pipe.zmscore(shard.key("hidden"), members)
    for pk, shard in zip(pks, shards, strict=True):
        pipe.hget(user_key(shard, pk), "seen")

    def answer(replies: list[Any]) -> Presences:
        scores: dict[str, float | None] = {}
        for index, members in enumerate(by_shard.values()):
            visible, hidden = replies[2 * index], replies[2 * index + 1]
            for pk, shown, unseen in zip(members, visible, hidden, strict=True):
                scores[pk] = shown if shown is not None else unseen
        seen_times = replies[2 * len(by_shard) :]
        return [
            (scores[pk], float(seen) if seen is not None else None)
            for pk, seen in zip(pks, seen_times, strict=True)
        ]

    return answer


def ask_online_user_pks(
    pipe: Pipeline | ClusterPipeline, config: Config, *, now: float, limit: int
) -> Callable[[list[Any]], list[str]]:
    """The primary keys of up to ``limit`` users online (hidden ones included), newest first
    within each set: O(log N + limit) per set and shard, never the whole of a large set. Queues
    the commands on ``pipe``; returns what makes the answer of their replies."""
    for shard in keyspace.layout(config):
        for kind in ("users", "hidden"):
            pipe.zrevrangebyscore(shard.key(kind), "+inf", score(now - config.window), 0, limit)

    def answer(replies: list[Any]) -> list[str]:
        pks = [keyspace.text(pk) for members in replies for pk in members]
        return pks[:limit] if len(pks) > limit else pks

    return answer


def oldest_seen(client: Client, config: Config) -> float | None:
    """When the longest-unseen member of any online set was last seen (None: the sets are
    empty): one ZRANGE of the first member per set and shard, O(log N) each. Members older than
    the window stay until the cleanup command removes them, so this tells whether it runs."""
    pipe = client.pipeline(transaction=False)
    for shard in keyspace.layout(config):
        for kind in KINDS:
            pipe.zrange(shard.key(kind), 0, 0, withscores=True)
    scores = [float(score) for first in pipe.execute() for _member, score in first]
    return min(scores, default=None)
