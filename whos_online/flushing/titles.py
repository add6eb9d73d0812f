"""Rooms' titles a process saw, written with its next flush, each once per process.

A request that enters a titled room notes the title here; the flusher writes what is new before
the queue (``store.titles``), in a round trip only when a title is new to this process, which is
seldom: the first visit to each room. A write that fails keeps the titles for the next flush.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Final

from whos_online.backend import connection
from whos_online.store import titles

if TYPE_CHECKING:
    from whos_online.backend.connection import Client
    from whos_online.config.settings import Config

#: Titles a process remembers having written; the oldest is forgotten first beyond this.
REMEMBERED: Final = 4096


class RoomTitles:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written: OrderedDict[str, str] = OrderedDict()
        self._waiting: dict[str, str] = {}

    def note(self, room: str, title: str) -> None:
        """``room`` has ``title``: written with the next flush unless this process did so."""
        if self._written.get(room) == title:
            return
        with self._lock:
            self._waiting[room] = title

    def pending(self) -> bool:
        return bool(self._waiting)

    def write(self) -> bool:
        """Write the titles waiting; False (and they keep waiting) if Redis failed."""
        with self._lock:
            taken, self._waiting = self._waiting, {}
        if not taken:
            return True

        def write(client: Client, config: Config) -> bool:
            titles.write(client, config, taken)
            return True

        if not connection.call(False, write, writes=True):
            with self._lock:
                self._waiting = {**taken, **self._waiting}
            return False
        with self._lock:
            for room, title in taken.items():
                self._written[room] = title
                self._written.move_to_end(room)
            while len(self._written) > REMEMBERED:
                self._written.popitem(last=False)
        return True
