"""What a process holds is written as it stops: the SIGTERM handler that setting Django up installs
(``whos_online.flushing.stopping``), in this process, in processes of their own, and under uvicorn
whichever mode Django runs the middleware in and whether or not the process recorded a visit."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

import whos_online
from tests.support import wsgi_server
from tests.support.helpers import configure, members
from whos_online.backend import connection as connection_module
from whos_online.backend.connection import admin_client
from whos_online.config.settings import get_config
from whos_online.flushing import flusher as flushing
from whos_online.flushing import hits, lifecycle, stopping
from whos_online.recording import throttle
from whos_online.recording import visits as recording

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
COOKIE = throttle.COOKIE_NAME


def hits_counted() -> int:
    return sum(count for _, count in whos_online.get_counter("hits", 86400))


@pytest.fixture
def queued(settings) -> None:
    """Visits wait in the queue (the thread would wait 10 s), and page hits are counted."""
    configure(settings, FLUSH_INTERVAL=10, COUNT_HITS=True)


@pytest.fixture
def sigterm() -> Iterator[list[int]]:
    """A server's SIGTERM handler, which notes the signals it is handed, in place of this
    process's until the test ends."""
    before = signal.getsignal(signal.SIGTERM)
    forwarded: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: forwarded.append(signum))
    yield forwarded
    signal.signal(signal.SIGTERM, before)


# Installing


def test_setting_django_up_installed_the_handler():
    assert isinstance(signal.getsignal(signal.SIGTERM), stopping.WriteThenHandOn)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_handler_goes_over_the_server_s_once_and_hands_the_signal_on(r, queued, sigterm):
    stopping.install_signal_handler()
    stopping.install_signal_handler()
    installed = signal.getsignal(signal.SIGTERM)
    assert isinstance(installed, stopping.WriteThenHandOn)
    assert not isinstance(installed.previous, stopping.WriteThenHandOn)
    flushing.current().put(recording.member_visit("guests", "m", time.time()))

    os.kill(os.getpid(), signal.SIGTERM)

    assert sigterm == [signal.SIGTERM]
    assert members(r, "guests") == ["m"]
    assert lifecycle.is_stopping()


def gunicorn_handle_exit(signum: int, frame: object) -> None:
    """Stands for a gunicorn worker's handler (gunicorn.workers.base.Worker.handle_exit)."""


gunicorn_handle_exit.__module__ = "gunicorn.workers.base"


@pytest.mark.parametrize(
    "found", [signal.SIG_IGN, gunicorn_handle_exit], ids=["ignored", "gunicorn's"]
)
def test_an_ignored_sigterm_or_a_gunicorn_worker_s_handler_is_left_alone(sigterm, found):
    signal.signal(signal.SIGTERM, found)

    stopping.install_signal_handler()

    assert signal.getsignal(signal.SIGTERM) is found


def test_a_subinterpreter_s_refusal_is_taken_quietly(sigterm, monkeypatch):
    server_s = signal.getsignal(signal.SIGTERM)

    def refuse(signum: int, handler: object) -> None:
        raise ValueError("signal only works in main thread of the main interpreter")

    monkeypatch.setattr(stopping, "signal", SimpleNamespace(**vars(signal) | {"signal": refuse}))
    stopping.install_signal_handler()

    assert signal.getsignal(signal.SIGTERM) is server_s


def test_only_the_main_thread_installs_it(sigterm):
    server_s = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=stopping.install_signal_handler)
    thread.start()
    thread.join()

    assert signal.getsignal(signal.SIGTERM) is server_s


# Handling


def test_the_handler_tells_the_live_streams_and_a_failing_receiver_is_logged(queued, caplog):
    told: list[str] = []

    def streams(**kwargs: object) -> None:
        told.append("streams")

    def failing(**kwargs: object) -> None:
        raise RuntimeError("broken")

    lifecycle.asked_to_stop.connect(failing, weak=False)
    lifecycle.asked_to_stop.connect(streams, weak=False)
    try:
        forwarded: list[int] = []
        stopping.WriteThenHandOn(lambda signum, frame: forwarded.append(signum))(
            signal.SIGTERM, None
        )
    finally:
        lifecycle.asked_to_stop.disconnect(failing)
        lifecycle.asked_to_stop.disconnect(streams)

    assert told == ["streams"]
    assert forwarded == [signal.SIGTERM]
    [logged] = caplog.records
    assert "failing" in logged.getMessage()
    assert "broken" in logged.getMessage()


def test_a_process_that_holds_nothing_starts_no_thread(monkeypatch, queued):
    flushing.current()  # made, and empty
    monkeypatch.setattr(stopping, "threading", SimpleNamespace(Thread=None))  # use would fail
    forwarded: list[int] = []

    stopping.WriteThenHandOn(lambda signum, frame: forwarded.append(signum))(signal.SIGTERM, None)

    assert forwarded == [signal.SIGTERM]
    assert lifecycle.is_stopping()


@pytest.fixture
def default_action(monkeypatch) -> list[str]:
    """What the handler does to end the process by the signal's default action, noted instead
    of done."""
    done: list[str] = []
    noted = {
        "signal": lambda signum, handler: done.append(f"set {handler!r}"),
        "raise_signal": lambda signum: done.append(f"raise {signum!r}"),
    }
    monkeypatch.setattr(stopping, "signal", SimpleNamespace(**vars(signal) | noted))
    return done


def test_before_the_default_action_it_writes_as_an_exit_does(r, queued, default_action):
    recording.count_hit()
    token = hits.buffer().token
    flushing.current().put(recording.member_visit("guests", "m", time.time()))

    stopping.WriteThenHandOn(signal.SIG_DFL)(signal.SIGTERM, None)

    assert default_action == [f"set {signal.SIG_DFL!r}", f"raise {signal.SIGTERM!r}"]
    assert [member.decode() for member in r.zrange("{whos_online}:guests", 0, -1)] == ["m"]
    assert hits_counted() == 1
    assert r.exists(f"{{whos_online}}:hits-applied:{token}") == 0


def test_a_process_writing_as_it_exits_is_left_to_end_by_itself(r, queued, default_action):
    flushing.current().put(recording.member_visit("guests", "m", time.time()))
    stopping.flush_at_exit()  # written; the process now ends by itself
    assert [member.decode() for member in r.zrange("{whos_online}:guests", 0, -1)] == ["m"]

    stopping.WriteThenHandOn(signal.SIG_DFL)(signal.SIGTERM, None)

    assert default_action == []


def test_once_written_at_exit_the_process_holds_no_client_and_a_second_hook_makes_none(r, queued):
    # atexit and multiprocessing's finalizers both write at exit. A client made after the first
    # is closed by the garbage collector while the interpreter is taken down, where redis-py 5.0
    # under gevent printed a traceback for each (the gevent --preload load test's worker log).
    recording.count_hit()
    flushing.current().put(recording.member_visit("guests", "m", time.time()))

    stopping.flush_at_exit()
    assert connection_module._clients.peek() is None
    flushing.write_at_exit()

    assert connection_module._clients.peek() is None
    assert hits_counted() == 1


@pytest.mark.parametrize(
    ("module", "patched"),
    [
        ("gevent.monkey", SimpleNamespace(is_module_patched=lambda name: name == "threading")),
        ("eventlet.patcher", SimpleNamespace(is_monkey_patched=lambda name: name == "thread")),
    ],
)
def test_under_green_threads_the_handler_waits_for_nothing(r, queued, monkeypatch, module, patched):
    """gevent and eventlet may run a signal handler in their hub, where waiting is an error:
    the handler has later visits written at once, and writes nothing itself."""
    monkeypatch.setitem(sys.modules, module, patched)
    flushing.current().put(recording.member_visit("guests", "m", time.time()))
    forwarded: list[int] = []

    stopping.WriteThenHandOn(lambda signum, frame: forwarded.append(signum))(signal.SIGTERM, None)

    assert forwarded == [signal.SIGTERM]
    assert len(flushing.current().queue) == 1  # not written
    assert flushing.writes_at_once(get_config())


def test_once_asked_to_stop_a_page_hit_wakes_the_thread_at_once(queued, monkeypatch):
    delays: list[float] = []
    monkeypatch.setattr(flushing.Flusher, "schedule", lambda self, delay: delays.append(delay))
    recording.count_hit()
    lifecycle.stop_soon()
    recording.count_hit()

    assert delays == [10, 0]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_once_asked_to_stop_a_throttled_page_view_writes_its_hit_before_it_answers(r, queued, mode):
    """A request the server finishes during its shutdown writes what it counted: the process
    may end by the signal, which no exit handler survives."""
    lifecycle.stop_soon()
    if mode == "sync":
        browser: Any = Client(REMOTE_ADDR="198.51.100.7")
        get = browser.get
    else:
        browser = AsyncClient(REMOTE_ADDR="198.51.100.7")
        get = async_to_sync(browser.get)

    first = get("/async/" if mode == "async" else "/plain/")  # recorded: written at once
    assert COOKIE in first.cookies
    assert hits_counted() == 1
    second = get("/async/" if mode == "async" else "/plain/")  # throttled: its hit only

    assert COOKIE not in second.cookies
    assert hits_counted() == 2


# In processes of their own

ENDING_PROCESS = """
import os
import signal
import sys
import time

import django
from django.conf import settings

settings.WHOS_ONLINE = {"REDIS_URL": sys.argv[1], "COUNT_HITS": True, "FLUSH_INTERVAL": 10}
django.setup()

from whos_online import store
from whos_online.flushing import flusher as flushing, hits
from whos_online.recording import visits as recording

print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
flushing.Flusher.schedule = lambda self, delay: None  # no thread: only the handler writes
recording.count_hit()
flushing.current().put(recording.member_visit("guests", "queued", time.time()))
print(hits.buffer().token, flush=True)
if sys.argv[2] == "while-exiting":
    # The signal comes while the process writes as it exits (a pool's worker that ended just
    # as the pool terminated it): it lets the write finish, and the process end as it would.
    run = store.scripts.run

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return run(*args, **kwargs)

    store.scripts.run = signalled
    flushing.write_at_exit()
    print("exited", flush=True)
else:
    os.kill(os.getpid(), signal.SIGTERM)
    print("not reached", flush=True)
"""


@pytest.mark.parametrize("when", ["at-once", "while-exiting"])
def test_a_process_that_sigterm_ends_writes_what_it_held(settings, real_redis_url, when):
    settings.WHOS_ONLINE = {"REDIS_URL": real_redis_url, "ISOLATE_TESTS": False}
    client = admin_client()
    client.flushdb()

    result = subprocess.run(
        [sys.executable, "-c", ENDING_PROCESS, real_redis_url, when],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    sigint_is_python_s, token, *rest = result.stdout.split()
    assert sigint_is_python_s == "True"  # Ctrl-C still raises KeyboardInterrupt
    if when == "at-once":
        assert (result.returncode, rest) == (-signal.SIGTERM, [])  # ended by the signal
    else:
        assert (result.returncode, rest) == (0, ["exited"]), result.stderr
    stored: Any = client.zrange("{whos_online}:guests", 0, -1)
    assert [member.decode() for member in stored] == ["queued"]
    assert hits_counted() == 1
    # Its write was the last one: it forgot the key of its batches of hits, as an exit does.
    assert client.exists(f"{{whos_online}}:hits-applied:{token}") == 0


# Under uvicorn

#: Requests of the uvicorn tests, each from a new address.
PAGES = 20


def env_for(real_redis_url: str, tmp_path: Path, settings_module: str) -> dict[str, str]:
    """A server's environment: the load test's site on the real Redis, writing only when
    ``FLUSH_INTERVAL`` (10 s) has passed or the process stops."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": settings_module,
        "REDIS_URL": real_redis_url,
        "WHOS_ONLINE_LOAD_DB": str(tmp_path / "unused.sqlite3"),
        "FLUSH_INTERVAL": "10",
        "PYTHONPATH": str(ROOT),
    }


def get(port: int, path: str, address: str, cookie: str = "") -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    headers = {"X-Forwarded-For": address, **({"Cookie": cookie} if cookie else {})}
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        return response
    finally:
        connection.close()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("backend", ["real"], indirect=True)
def test_uvicorn_s_sigterm_with_the_middleware_in_sync_mode(r, real_redis_url, tmp_path, workers):
    """A sync-only middleware below whos_online's: Django runs whos_online's in sync mode, and
    its visits and hits are written at SIGTERM all the same."""
    env = env_for(real_redis_url, tmp_path, "tests.sync_only_settings")
    log = tmp_path / "uvicorn.log"

    with wsgi_server.uvicorn(env, log, ready_path="/static/app.css", workers=workers) as (
        port,
        _,
    ):
        responses = [get(port, "/", f"198.18.3.{number + 1}") for number in range(PAGES)]

    assert [response.status for response in responses] == [200] * PAGES
    assert {response.getheader("X-Sync-Only") for response in responses} == {"1"}
    assert whos_online.online_counts().guests == PAGES
    assert hits_counted() == PAGES
    assert "Traceback" not in log.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("backend", ["real"], indirect=True)
def test_uvicorn_s_sigterm_in_a_process_that_served_only_throttled_pages(
    r, real_redis_url, tmp_path, workers
):
    """A fresh uvicorn process whose every request is throttled records no visit, and holds a
    page hit for each: they are written at SIGTERM."""
    whos_online.record_guest("192.0.2.1")  # an epoch for the cookies to carry
    epoch = r.get("{whos_online}:epoch")
    assert epoch is not None
    config = get_config()
    env = env_for(real_redis_url, tmp_path, "tests.load_settings")
    log = tmp_path / "uvicorn.log"

    with wsgi_server.uvicorn(env, log, ready_path="/static/app.css", workers=workers) as (
        port,
        _,
    ):
        responses = []
        for number in range(PAGES):
            address = f"198.18.4.{number + 1}"
            cookie = throttle.make_cookie(
                throttle.binding("", address), time.time(), config.throttle, epoch=epoch.decode()
            )
            responses.append(get(port, "/plain/", address, f"{COOKIE}={cookie}"))

    assert [response.status for response in responses] == [200] * PAGES
    assert [response.getheader("Set-Cookie") for response in responses] == [None] * PAGES
    assert whos_online.online_counts().guests == 1  # the one recorded here: nobody else
    assert hits_counted() == PAGES
    assert "Traceback" not in log.read_text()
