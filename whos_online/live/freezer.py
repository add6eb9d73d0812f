"""Short garbage-collector passes in a process that holds many live streams.

A full pass visits every tracked object, about 130 per open stream, and comes each time they
have grown by a quarter: with 10 000 streams, most of a second each time more open. So each time
``every`` streams have begun, what is new is collected and the process's objects are frozen
(``gc.freeze``): passes skip them. A frozen cycle is collected only once thawed, so a stream
breaks its own as it ends (``Opened.follow``); a second after four times as many frozen streams
have ended as are open, all is thawed and collected. What waits for that thaw: an asyncio
transport's cycle per connection (uvloop's make none), and the requests of other views under way
at a freeze. A process that froze objects itself, or turned its collector off, is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import ModuleType

    Later = Callable[[float, Callable[[], None]], object]

#: Streams begun between two freezes: a pass over what they bring costs some 50 ms.
FREEZE_EVERY: Final = 500
#: Frozen streams ended, per stream open, at which the frozen objects are thawed, and the
#: seconds after which it is done (if it still holds).
THAW_AT: Final = 4
THAW_AFTER: Final = 1.0


def _call_later(delay: float, then: Callable[[], None]) -> object:
    return asyncio.get_running_loop().call_later(delay, then)


class Freezer:
    """Freezes and thaws the objects of one process as its streams begin and end."""

    def __init__(
        self,
        every: int = FREEZE_EVERY,
        collector: ModuleType = gc,
        later: Later = _call_later,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._every = every
        self._gc = collector
        self._later = later
        self._clock = clock
        #: When (``clock``) the thaw asked for should run; None when none is.
        self._thaw_at: float | None = None
        #: Streams open, and begun since the last freeze.
        self.open = 0
        self._begun = 0
        #: Freezes so far, and their count at the last thaw.
        self.freezes = 0
        self._thawed_at = 0
        #: Streams ended since the last thaw that had been frozen.
        self._ended_frozen = 0
        #: Whether the process froze objects of its own: then it is left alone.
        self._declined = False

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Around a stream, from its start to its end."""
        began = self._begin()
        try:
            yield
        finally:
            self._end(began)

    def _begin(self) -> int:
        """The freezes before it began; its objects are there, and frozen by the next."""
        began = self.freezes
        self.open += 1
        self._begun += 1
        if self._begun >= self._every:
            self._begun = 0
            self._freeze()
        return began

    def _end(self, began: int) -> None:
        self.open -= 1
        # Frozen if a freeze since the last thaw came after it began (it was open then).
        if self._frozen() and began < self.freezes:
            self._ended_frozen += 1
        if self._thaw_due() and not self._thaw_pending():
            self._later(THAW_AFTER, self._thaw)
            self._thaw_at = self._clock() + THAW_AFTER

    def _thaw_pending(self) -> bool:
        """Whether a thaw was asked for and may still run: one long overdue is taken as lost
        (its event loop closed), and asked for again."""
        return self._thaw_at is not None and self._clock() < self._thaw_at + THAW_AFTER

    def _frozen(self) -> bool:
        """Whether it froze the process's objects since its last thaw."""
        return self._thawed_at < self.freezes

    def _thaw_due(self) -> bool:
        return self._frozen() and self.open * THAW_AT <= self._ended_frozen

    def _freeze(self) -> None:
        if self._declined or not self._gc.isenabled():
            return
        if not self._frozen() and self._gc.get_freeze_count():
            self._declined = True  # frozen by someone else: theirs to thaw, not ours
            return
        self._gc.collect()
        self._gc.freeze()
        self.freezes += 1

    def _thaw(self) -> None:
        self._thaw_at = None
        if not self._thaw_due():  # more streams opened, or it froze again, meanwhile
            return
        self._gc.unfreeze()
        self._thawed_at, self._ended_frozen = self.freezes, 0
        self._gc.collect()
