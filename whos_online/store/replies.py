"""What a call of ``lua/record.lua`` answers, read back: the shard's epoch, who arrived, the
layouts recorded, and the room changes of the batch (its header's ``Output``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple

from whos_online.backend import keyspace

if TYPE_CHECKING:
    from collections.abc import Sequence

#: The values of the reply, in the order ``lua/record.lua`` returns them (a test checks that its
#: header names them), and those of each room change in its flat list.
REPLY_FIELDS: Final = ("epoch", "arrived", "layouts", "changes")
CHANGE_FIELDS: Final = ("entry", "who", "left", "entered")


class RoomChange(NamedTuple):
    """A room an entry of a batch left or entered: ``entry`` is its index in the call (from
    0); ``who`` is "" for the entry's own member, or ``<kind>:<member>`` for another identity a
    step of the entry took out of its room (a visit's former identity, a leaving identity's);
    ``left`` and ``entered`` are rooms, "" for none."""

    entry: int
    who: str
    left: str
    entered: str


@dataclass(frozen=True)
class Reply:
    """What a batch's call answers: the shard's epoch, whether each entry's visitor was not
    online until then ('1') or was ('0'), on the base shard how many layouts are recorded (a
    site that changed ``SHARDS``), and the batch's room changes."""

    epoch: str
    arrived: str
    layouts: int
    changes: tuple[RoomChange, ...] = ()


def parse_reply(raw: Sequence[object]) -> Reply:
    """Read a reply; one without room changes (three values, as the script answered before it
    reported them) has none."""
    epoch, arrived, layouts = raw[:3]
    flat = raw[3] if len(raw) > 3 else ()
    assert isinstance(flat, (list, tuple))
    assert isinstance(layouts, (int, str, bytes))
    changes = tuple(
        RoomChange(
            int(flat[start]) - 1,
            keyspace.text(flat[start + 1]),
            keyspace.text(flat[start + 2]),
            keyspace.text(flat[start + 3]),
        )
        for start in range(0, len(flat) - len(CHANGE_FIELDS) + 1, len(CHANGE_FIELDS))
    )
    return Reply(_text(epoch), _text(arrived), int(layouts), changes)


def _text(value: object) -> str:
    assert isinstance(value, (bytes, str))
    return keyspace.text(value)
