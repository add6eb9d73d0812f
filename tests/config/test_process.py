"""A process's state is made at its first use, in that process, and dropped as one when settings
change: importing whos_online makes no lock, and keeps nothing in the process's home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import in_a_fork
from whos_online.config import process

ROOT = Path(__file__).resolve().parent.parent.parent

#: Imports every module of whos_online (but those of an optional dependency that is missing)
#: with the makers of locks counted, and prints the modules whose top-level code made one, and
#: the pieces of state the process's home holds then.
IMPORT_ALL = """
import importlib
import json
import os
import pkgutil
import sys
import threading

made = []


def counted(real):
    def make(*args, **kwargs):
        frame = sys._getframe(1)
        if frame.f_globals.get("__name__") == "django.dispatch.dispatcher":
            return real(*args, **kwargs)  # a Signal's, as Django's own signals have
        while frame is not None and frame.f_code.co_name != "<module>":
            frame = frame.f_back
        module = "" if frame is None else frame.f_globals.get("__name__", "")
        if module.startswith("whos_online"):
            made.append(module)
        return real(*args, **kwargs)

    return make


for name in ("Lock", "RLock", "Condition", "Event", "Semaphore"):
    setattr(threading, name, counted(getattr(threading, name)))

import django

django.setup()
import whos_online
from whos_online.config import process

for module in pkgutil.walk_packages(whos_online.__path__, "whos_online."):
    try:
        importlib.import_module(module.name)
    except ImportError as error:
        if (error.name or "").startswith("whos_online"):
            raise
print(json.dumps({"made": sorted(set(made)), "home": len(process._homes.get(os.getpid(), {}))}))
"""


def test_importing_whos_online_makes_no_lock_and_no_state():
    """A lock made at import is made before a gevent or eventlet worker patches ``threading``
    (gunicorn's ``--preload``), and one held by another thread at a fork stays held for ever."""
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL],
        cwd=ROOT,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {"made": [], "home": 0}


def test_a_reset_drops_every_piece_each_before_those_it_uses():
    dropped: list[str] = []
    lower = process.PerProcess(lambda: "lower", dropped=dropped.append)
    upper = process.PerProcess(lambda: "upper", dropped=dropped.append)
    try:
        assert (lower.get(), upper.get()) == ("lower", "upper")

        process.reset_home()

        assert dropped == ["upper", "lower"]
        assert lower.peek() is None
        assert upper.peek() is None
    finally:
        process._pieces.remove(lower)
        process._pieces.remove(upper)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_process_makes_its_own_pieces():
    made: list[object] = []
    piece = process.PerProcess(object, started=made.append)
    process.reset_home()  # the fork below leaves the parent's home behind: nothing in it
    try:
        ours = piece.get()

        def child() -> str:
            theirs = piece.get()
            return f"{theirs is not ours} {made == [ours, theirs]} {piece.get() is theirs}"

        assert in_a_fork(child) == ("True True True", 0)
        assert piece.get() is ours  # the parent keeps its own
        process.reset_home()
    finally:
        process._pieces.remove(piece)


def test_a_value_kept_per_settings_is_read_again_once_they_change():
    reads = iter(["first", "second"])
    kept = process.per_settings(lambda: next(reads))

    assert kept() == kept() == "first"
    process.reset_home()  # settings changed
    assert kept() == kept() == "second"


def test_a_value_read_while_the_settings_change_is_read_again():
    """The reset comes while the value is being read (another thread changed the settings):
    what was read may be the old value, and it is not kept."""
    reads = iter(["read during the change", "read after it"])

    def read() -> str:
        value = next(reads)
        if value == "read during the change":
            process.reset_home()
        return value

    kept = process.per_settings(read)

    assert kept() == "read during the change"
    assert kept() == kept() == "read after it"
