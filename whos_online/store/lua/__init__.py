"""whos_online's Lua scripts, read from the ``.lua`` files beside this module once per process.

A script pulls shared functions in from ``includes/`` with an ``--- @include`` line, which
``load`` expands; read at import, so that each script's SHA1 is worked out once per process
(docs/how-it-works.md).
"""

from __future__ import annotations

import re
from importlib.resources import files
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

#: A line that pulls in a shared file, named relative to this folder and without ``.lua``.
INCLUDE: Final = re.compile(r'^--- @include "([\w/]+)"[ \t]*$', re.MULTILINE)

#: This folder, inside the installed package (a wheel ships the ``.lua`` files with it).
FOLDER: Final = files(__name__)


def load(name: str, folder: Traversable = FOLDER) -> str:
    """The source of ``<name>.lua`` in ``folder``, its includes expanded."""
    return _expand(name, folder, set())


def _expand(name: str, folder: Traversable, included: set[str]) -> str:
    text = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")

    def include(match: re.Match[str]) -> str:
        wanted = match.group(1)
        if wanted in included:
            return ""
        included.add(wanted)
        return _expand(wanted, folder, included).rstrip("\n")

    return INCLUDE.sub(include, text)


#: One recorded visit (see ``store.record``).
RECORD: Final = load("record")
#: A person leaving two sets and their rooms: a former identity in another shard, a logout.
LEAVE: Final = load("leave")
#: The rooms most recently active, with who is in each (the dashboard's busiest rooms).
RECENT_ROOMS: Final = load("recent_rooms")
#: The site-wide counts, sampled by the cleanup command into the peak and the counters.
SAMPLE: Final = load("sample")
#: One shard's part of a snapshot of the site or of a room.
SNAPSHOT: Final = load("snapshot")
#: A chunk of stale members out of one sorted set.
PRUNE_CHUNK: Final = load("prune_chunk")
#: A page of one shard's rooms pruned, emptied rooms out of its index.
PRUNE_ROOMS: Final = load("prune_rooms")
#: Amounts added to counters at every precision (see ``counters``).
UPDATE_COUNTERS: Final = load("update_counters")
#: Stale slices out of one counter HASH.
DELETE_SLICES: Final = load("delete_slices")
#: A counter of a precision no longer configured, dropped whole.
DROP_COUNTER: Final = load("drop_counter")
