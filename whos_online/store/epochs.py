"""Noticing a Redis that lost its data: each shard keeps a random word, its *epoch*, while it lasts.

A throttle cookie carries its shard's epoch, so that after a restart without data, or a
``FLUSHDB``, its visitor is recorded again on their next page instead of staying missing until the
cookie runs out (docs/how-it-works.md tells how a process learns the epochs).
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import TYPE_CHECKING, Final

from whos_online.backend import keyspace
from whos_online.config import process
from whos_online.config.process import PerProcess

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from whos_online.config.settings import Config

#: Bytes of randomness in an epoch: 6 characters of its text, after when it began.
EPOCH_BYTES: Final = 4
#: Seconds by which the clocks of a site's processes may differ, and a visit be written after
#: its cookie was handed out (``FLUSH_INTERVAL``, retries): a cookie without an epoch whose visit
#: came this close to an epoch's beginning does not vouch for it.
CLOCK_SKEW: Final = 10.0


def new_epoch(now: float | None = None) -> str:
    """A candidate epoch: the word a shard that has none takes, saying when it began."""
    began = int(time.time() if now is None else now)
    return f"{began:x}-{secrets.token_urlsafe(EPOCH_BYTES)}"


def began(epoch: str) -> float:
    """When ``epoch`` (one of ``new_epoch``) began."""
    return float(int(epoch.partition("-")[0], 16))


class Epochs:
    """The epoch this process last heard of, per shard (by hash tag)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Replaced, never changed in place, so that ``_current`` can tell when to work out again.
        self._known: dict[str, str] = {}
        #: The epochs of the layout of a ``Config`` (the same object until settings change).
        self._cached: tuple[Config, dict[str, str], frozenset[str]] | None = None

    def learn(self, tag: str, epoch: str) -> None:
        """Note ``epoch`` as the shard ``tag``'s ("" when it has none, as after a restart)."""
        if self._known.get(tag) == epoch:
            return
        with self._lock:
            previous = self._known.get(tag)
            self._known = {**self._known, tag: epoch}
            if previous is not None and previous != epoch:
                process.note_loss()  # what the shard held before is gone: a new generation

    def learn_all(self, epochs: Mapping[str, str]) -> None:
        for tag, epoch in epochs.items():
            self.learn(tag, epoch)

    def of(self, shard: keyspace.Shard) -> str:
        """The epoch of ``shard`` as far as this process knows ("" if it does not)."""
        return self._known.get(shard.tag, "")

    def gone(self, epoch: str, config: Config) -> bool:
        """Whether Redis is known to have lost what a cookie carrying ``epoch`` speaks of: this
        process knows the epoch of every shard of the configured layout, and ``epoch`` is none
        of them (for a cookie without one: a shard has none, as after a restart)."""
        current = self._current(config)
        if current is None:
            return False
        return epoch not in current if epoch else "" in current

    def outdated(self, epoch: str, config: Config, visited: float | None = None) -> bool:
        """Whether a cookie carrying ``epoch`` should no longer spare a write: gone, or issued
        without an epoch (by a process that did not know it yet) where every shard has one
        now, unless every shard's epoch began before its visit, at ``visited`` (see the
        module's docstring). Its visitor is written once more and handed
        a cookie that carries their shard's epoch, so that a later loss is noticed for them
        too."""
        current = self._current(config)
        if current is None:
            return False
        if epoch:
            return epoch not in current
        if visited is None:
            return True
        # A shard without an epoch ("") lost its data: a cookie of before spares nothing.
        return any(not known or began(known) > visited - CLOCK_SKEW for known in current)

    def _current(self, config: Config) -> frozenset[str] | None:
        """The epochs of the configured layout's shards, or None while one is not known."""
        cached = self._cached
        if cached is not None and cached[0] is config and cached[1] is self._known:
            return cached[2]  # a throttled request asks this: worked out once per change
        known = self._known
        current = set()
        for shard in keyspace.layout(config):
            found = known.get(shard.tag)
            if found is None:
                return None
            current.add(found)
        frozen = frozenset(current)
        self._cached = (config, known, frozen)
        return frozen


_epochs: Final = PerProcess(Epochs)


def current() -> Epochs:
    """The epochs this process knows (``config.process``)."""
    return _epochs.get()


def generation() -> int:
    """A number that changes whenever what this process stored may have been lost: a Redis call
    failed, or a shard's epoch changed (``config.process.losses``). The memory of recent
    visitors holds entries of the current generation only (``throttle.RecentVisitors``)."""
    return process.losses()


def lost_since(found: Iterable[Mapping[str, str]], known: dict[str, str]) -> bool:
    """Whether the epochs ``found`` (a read's, tag to epoch) show a shard that lost its data since
    ``known`` (which it updates): its epoch changed, or is gone. A shard that had none and has
    one now was only written to."""
    forgotten = False
    for epochs in found:
        for tag, epoch in epochs.items():
            if known.get(tag, "") not in {"", epoch}:
                forgotten = True
            known[tag] = epoch
    return forgotten
