"""State of one process, in one home (``PerProcess``, ``reset_home``), where the process is in its
life, and the threads whos_online starts in it (``start_thread``).

Each piece is made at first use in the process that asks, never at import or in a fork hook, so
that a forked process or a gevent worker never uses another's lock, thread or socket
("Per-process state" in docs/how-it-works.md).
"""

from __future__ import annotations

import functools
import multiprocessing.util
import os
import secrets
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar, cast

from django.core import mail
from django.dispatch import Signal

if TYPE_CHECKING:
    from collections.abc import Callable


T = TypeVar("T")


class PerProcess(Generic[T]):
    """A piece of a process's state: one ``T`` per process, from ``make()`` at its first use
    there, kept in the process's home (``_homes``) until settings change (``reset_home``).
    ``started(value)`` runs once for each value made, in the process that made it (to register
    what the process does with it as it exits); ``dropped(value)`` as settings change drop it (to
    stop what it started, or close what it holds)."""

    def __init__(
        self,
        make: Callable[[], T],
        *,
        started: Callable[[T], object] | None = None,
        dropped: Callable[[T], object] | None = None,
    ):
        self._make = make
        self._started = started
        self._dropped = dropped
        _pieces.append(self)

    def get(self) -> T:
        home = _homes.get(os.getpid())  # what _home() finds on every call but a process's first
        value = home.get(self) if home is not None else None
        if value is not None:
            return cast("T", value)
        home = _home()
        made = self._make()
        # dict.setdefault is atomic: of two threads racing here, both get the first one stored.
        value = home.setdefault(self, made)
        if value is made and self._started is not None:
            self._started(made)
        return cast("T", value)

    def peek(self) -> T | None:
        """This process's value if it made one, without making it."""
        return cast("T | None", _homes.get(os.getpid(), {}).get(self))

    def replace(self) -> T | None:
        """Drop this process's value (the next ``get`` makes a new one); returns it."""
        return cast("T | None", _homes.get(os.getpid(), {}).pop(self, None))

    def drop(self, value: object) -> None:
        if self._dropped is not None:
            self._dropped(cast("T", value))


#: Every piece, in the order they were declared: a module's after those of the modules it
#: imports, which is what it uses.
_pieces: list[PerProcess[Any]] = []
#: Each process's home, by process id: a forked child makes its own, and drops its parent's.
_homes: dict[int, dict[PerProcess[Any], object]] = {}


def _home() -> dict[PerProcess[Any], object]:
    pid = os.getpid()
    home = _homes.get(pid)
    if home is None:
        home = _homes.setdefault(pid, {})
        for other in [key for key in _homes if key != pid]:
            _homes.pop(other, None)  # a parent's, copied by the fork
    return home


class _Cache(Protocol):
    def cache_clear(self) -> None: ...


C = TypeVar("C", bound=_Cache)

#: What ``reset_home`` clears besides: caches of values derived from settings.
_caches: list[_Cache] = []


def cleared_on_reset(cache: C) -> C:
    """Have ``reset_home`` clear ``cache`` (a ``functools.lru_cache``)."""
    _caches.append(cache)
    return cache


#: How many times this process's state was dropped (``reset_home``: settings changed).
_resets = 0


def per_settings(read: Callable[[], T]) -> Callable[[], T]:
    """``read()`` once per settings, for a setting every request needs (reading one costs a
    throttled request as much as checking its cookie). The count of resets is taken before
    ``read`` runs, so that a value read while settings change is read again, where a cache
    cleared by ``reset_home`` could keep it. Where a ``Config`` is at hand, ``keyspace.PerConfig``
    keeps what is derived from it."""
    held: tuple[int, T] | None = None

    @functools.wraps(read)
    def kept() -> T:
        nonlocal held
        found = held
        if found is not None and found[0] == _resets:
            return found[1]
        resets = _resets
        value = read()
        held = (resets, value)
        return value

    return kept


#: Bumped whenever what this process stored may have been lost: a call to Redis failed or was
#: refused, or a shard's epoch changed (``store.epochs.generation``). One number, read on every
#: recorded request without a look-up of the process's state; a forked child starts from its
#: parent's, which only its own memory of recent visitors, made empty, is compared with. Back to
#: 0 with the process's state (``reset_home``), as that memory is.
_losses = 0


def note_loss() -> None:
    """What this process stored may have been lost (see ``losses``)."""
    global _losses  # noqa: PLW0603 - one number per process
    _losses += 1


def losses() -> int:
    """A number that changes whenever what this process stored may have been lost."""
    return _losses


def reset_home() -> None:
    """Drop this process's state (settings changed, which tests do): every piece, each before
    those it uses (the flushing thread is stopped before the clients it writes with are closed),
    the caches, and what the process was told of its stop (``reset``)."""
    global _resets, _losses  # noqa: PLW0603 - what per_settings compares with; see _losses
    _resets += 1
    _losses = 0
    reset()
    home = _homes.pop(os.getpid(), {})
    for piece in reversed(_pieces):
        if piece in home:
            piece.drop(home[piece])
    for cache in _caches:
        cache.cache_clear()


#: Sent by the SIGTERM handler (``announce_stop``), on the thread the signal runs on (an ASGI
#: server's event loop): a receiver must not wait, only have its work done soon.
asked_to_stop: Final = Signal()

#: The process (by id) that a SIGTERM has reached: from then on it writes what it records at
#: once (``stopping``). By id, so that a child forked afterwards does not inherit it.
_stopping_in: int | None = None
#: The process (by id) that is writing what it holds as it exits (``write_at_exit``).
_exiting_in: int | None = None
#: The process (by id) whose stop began, and when (monotonic): asked to stop, or exiting.
_stop_began: tuple[int, float] | None = None


def stop_soon() -> None:
    """Have this process write each visit and page hit as it comes from now on: it has been
    asked to stop, and may end without running its exit handlers (``stopping``)."""
    global _stopping_in  # noqa: PLW0603 - one flag per process
    _stopping_in = os.getpid()
    _note_stop()


def announce_stop() -> None:
    """Send ``asked_to_stop``; a receiver that fails is logged (by Django, ``django.dispatch``),
    and the others still run."""
    asked_to_stop.send_robust(sender=None)


def is_stopping() -> bool:
    """Whether this process has been asked to stop (``stop_soon``): on the throttled path, a
    look at a global but for the moments of a stop."""
    return _stopping_in is not None and _stopping_in == os.getpid()


def is_exiting() -> bool:
    """Whether this process is writing what it holds as it exits, after which it ends."""
    return _exiting_in == os.getpid()


def exiting() -> None:
    """This process is writing what it holds as it exits, after which it ends."""
    global _exiting_in  # noqa: PLW0603 - one flag per process
    _exiting_in = os.getpid()
    _note_stop()


def _note_stop() -> None:
    global _stop_began  # noqa: PLW0603 - one per process
    if stop_began() is None:
        _stop_began = (os.getpid(), time.monotonic())


def stop_began() -> float | None:
    """When (monotonic) this process was first asked to stop, or began to write as it exits;
    None while it is neither."""
    if _stop_began is None or _stop_began[0] != os.getpid():
        return None
    return _stop_began[1]


def reset() -> None:
    """Forget that the process was asked to stop, or wrote as it exited (tests do both)."""
    global _stopping_in, _exiting_in, _stop_began  # noqa: PLW0603 - one flag per process
    _stopping_in = _exiting_in = _stop_began = None


#: What tells a process to stop: a server, ``multiprocessing``, a shell's Ctrl-C.
STOP_SIGNALS: Final = frozenset({signal.SIGTERM, signal.SIGINT})


def start_thread(target: Callable[[], object], *, name: str) -> threading.Thread:
    """Start a daemon thread running ``target`` with the stop signals blocked (see the module's
    docstring). They are blocked in the caller around ``start``, which the thread inherits, so
    that no signal reaches it before it could block them itself; the caller's own mask is put
    back at once, and a signal that came meanwhile is delivered then."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    if not _can_mask():
        thread.start()
        return thread
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return thread


def green_threads() -> bool:
    """Whether gevent or eventlet has patched ``threading``: a thread is then a greenlet, and a
    signal handler may run in their hub, where waiting for a thread raises."""
    gevent_monkey: Any = sys.modules.get("gevent.monkey")
    if gevent_monkey is not None and gevent_monkey.is_module_patched("threading"):
        return True
    eventlet_patcher: Any = sys.modules.get("eventlet.patcher")
    return eventlet_patcher is not None and bool(eventlet_patcher.is_monkey_patched("thread"))


def _can_mask() -> bool:
    # pthread_sigmask is POSIX's (not on Windows, where no signal goes to a thread anyway).
    return hasattr(signal, "pthread_sigmask") and not green_threads()


#: ``django.core.mail``'s namespace, where ``setup_test_environment`` puts ``outbox``; looked up
#: on every ``get_config`` of a process not under tests, so a dict look-up and no more.
_MAIL_NAMES: Final = vars(mail)

#: How a test process's prefix begins, as Django's test databases begin with ``test_``.
PREFIX_START: Final = "test_"


def in_test_environment() -> bool:
    """Whether ``setup_test_environment()`` has run (and not been torn down) in this process."""
    return "outbox" in _MAIL_NAMES


#: Sent in a test process as it ends, with ``prefixes``: every prefix it wrote under
#: (``apps`` connects ``apps.remove_test_keys``, which removes their keys).
test_run_ended = Signal()


class RunKeys:
    """The prefixes of one process's test run, made from its random token."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(4)
        self.prefixes: set[str] = set()

    def prefix(self, key_prefix: str) -> str:
        """The prefix this process writes under instead of ``key_prefix``; remembered, so that
        its keys are removed as the process ends."""
        name = f"{PREFIX_START}{key_prefix}_{self.token}"
        self.prefixes.add(name)
        return name

    def end(self) -> None:
        if self.prefixes:
            test_run_ended.send(sender=RunKeys, prefixes=sorted(self.prefixes))


#: One per process, by process id: a forked child (a ``--parallel`` worker) makes its own.
_made: dict[int, RunKeys] = {}


def run_keys() -> RunKeys:
    """This process's ``RunKeys``, made at its first use here.

    Its end is registered with multiprocessing in the process that made it: a child of
    multiprocessing (a ``--parallel`` worker) ends with ``os._exit`` after running the finalizers
    registered in it, which skips ``atexit``; elsewhere multiprocessing runs its finalizers at
    exit too. A finalizer runs only in the process that registered it, so a child never removes
    its parent's keys. Its priority is below the flusher's (10), so that what the process still
    holds is written before its keys are removed.
    """
    pid = os.getpid()
    found = _made.get(pid)
    if found is not None:
        return found
    made = RunKeys()
    found = _made.setdefault(pid, made)
    if found is made:
        multiprocessing.util.Finalize(None, made.end, exitpriority=1)
    return found
