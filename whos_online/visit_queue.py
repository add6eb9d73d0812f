"""The visits a process has recorded and not written yet: one per person, in the order of each
person's latest.

The request path puts a visit here and moves on; ``whos_online.flushing`` takes everything at
once and writes it. Two visits of one person before a flush become one: their latest, which keeps
what the earlier one did that the latest does not undo (see ``merge``). The queue is bounded: a
visit that finds it full is dropped and counted, which only happens while Redis cannot be written
for long (the flusher keeps what failed, up to the same bound).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Final

from whos_online import rooms
from whos_online.store.visits import Visit, person

#: Visits (and readers leaving rooms) a process holds at most, written or waiting to be written
#: again: a few megabytes, and at a thousand recorded visits a second, a twenty-second outage.
QUEUE_SIZE: Final = 20_000


@dataclass(frozen=True)
class RoomLeave:
    """A page's reader leaving its room at ``at``: counted in it a few seconds more, if it is
    theirs (``store.presence.LEAVE_GRACE``)."""

    kind: str
    member: str
    room: str
    at: float

    @property
    def person(self) -> str:
        return person(self.kind, self.member)


Item = Visit | RoomLeave


def merge(earlier: Visit, later: Visit) -> Visit:
    """One visit for two of the same person queued one after the other: the later one, which
    also takes the earlier one off its former identity, and leaves the room the earlier one put
    them in as the later one's mode says (a request that is not a page view leaves the person in
    the room of the page view before it; a page's "still here" does not undo a later page)."""
    room, mode = later.room, later.room_mode
    if mode == rooms.KEEP or (
        mode == rooms.STAY and earlier.room_mode == rooms.GO and earlier.room != later.room
    ):
        room, mode = earlier.room, earlier.room_mode
    return replace(
        later,
        former=later.former or earlier.former,
        visitor=later.visitor or earlier.visitor,
        room=room,
        room_mode=mode,
    )


def _key(item: Item) -> str:
    return item.person if isinstance(item, Visit) else f"leave:{item.person}"


class VisitQueue:
    def __init__(self, size: int = QUEUE_SIZE) -> None:
        self._size = size
        self._items: OrderedDict[str, Item] = OrderedDict()
        self._lock = threading.Lock()
        #: Items dropped because the queue was full, since the process started.
        self.dropped = 0

    def put(self, item: Item, *, room: int = 0) -> bool:
        """Queue ``item`` after everything queued; False if the queue is full (``room`` more
        items are held elsewhere, by the flusher, and count against the bound)."""
        key = _key(item)
        with self._lock:
            earlier = self._items.pop(key, None)
            if earlier is None and len(self._items) + room >= self._size:
                self.dropped += 1
                return False
            if isinstance(earlier, Visit) and isinstance(item, Visit):
                item = merge(earlier, item)
            self._items[key] = item
        return True

    def take(self) -> list[Item]:
        """Everything queued, in order; the queue is empty afterwards."""
        with self._lock:
            items = list(self._items.values())
            self._items.clear()
        return items

    def forget(self, who: str) -> None:
        """Drop what is queued of the person ``who`` (an erasure must not be undone)."""
        with self._lock:
            self._items.pop(who, None)
            self._items.pop(f"leave:{who}", None)

    def __len__(self) -> int:
        return len(self._items)
