"""Keys of its own for a site's test run, as Django gives the tests a database of their own.

A site's own tests (``manage.py test``, pytest-django) use the site's settings, and so, without
this, the live Redis and the live ``KEY_PREFIX``: the test client's guest would join real rooms
and raise today's unique visitors. Under tests (and unless ``ISOLATE_TESTS`` is False), each
process writes under a prefix of its own, ``test_<KEY_PREFIX>_<8 random hex digits>``, so that
the processes of a parallel run (Django's ``--parallel``, pytest-xdist) are apart too, and
removes its keys as it ends (``backend.isolated_keys``).

How a test run is told: ``django.test.utils.setup_test_environment()`` sets up the dummy email
outbox, ``django.core.mail.outbox``, which Django's docs describe (Testing tools, "Email
services") and its ``teardown_test_environment()`` deletes. Django's runner calls it first
thing in ``run_tests`` (and in each ``--parallel`` worker it starts with spawn; a forked one
inherits it), and pytest-django calls it in its session-wide ``django_test_environment``
fixture, before any test. It is the one documented mark both leave, and no setting a test may
override (``ALLOWED_HOSTS``, ``EMAIL_BACKEND``, ``DEBUG``) hides it. Its one false alarm is
Django's locmem email backend, which makes the outbox too the first time it is used: a process
that sends mail through it outside tests (Django documents it for testing) is taken for a test
process from then on. ``settings.get_config`` keeps a process that was seen under tests so until
it exits, so that what it writes after the teardown (its queue, as it exits) goes to its test
keys too.
"""

from __future__ import annotations

import multiprocessing.util
import os
import secrets
from typing import Final

from django.core import mail
from django.dispatch import Signal

#: ``django.core.mail``'s namespace, where ``setup_test_environment`` puts ``outbox``; looked up
#: on every ``get_config`` of a process not under tests, so a dict look-up and no more.
_MAIL_NAMES: Final = vars(mail)

#: How a test process's prefix begins, as Django's test databases begin with ``test_``.
PREFIX_START: Final = "test_"


def in_test_environment() -> bool:
    """Whether ``setup_test_environment()`` has run (and not been torn down) in this process."""
    return "outbox" in _MAIL_NAMES


#: Sent in a test process as it ends, with ``prefixes``: every prefix it wrote under
#: (``apps`` connects ``backend.isolated_keys.remove_at_exit``, which removes their keys).
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
