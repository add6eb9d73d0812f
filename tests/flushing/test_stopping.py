"""What a process holds is written as it stops: the SIGTERM handler that setting Django up installs
(``whos_online.flushing.stopping``), in this process, in processes of their own, and under uvicorn
whichever mode Django runs the middleware in and whether or not the process recorded a visit."""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import multiprocessing
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
from tests.support import processes, wsgi_server
from tests.support.helpers import configure, members
from whos_online.backend import clients
from whos_online.backend.clients import admin_client
from whos_online.config import process
from whos_online.config.settings import get_config
from whos_online.flushing import batches, stopping
from whos_online.flushing import flusher as flushing
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
    assert process.is_stopping()


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

    process.asked_to_stop.connect(failing, weak=False)
    process.asked_to_stop.connect(streams, weak=False)
    try:
        forwarded: list[int] = []
        stopping.WriteThenHandOn(lambda signum, frame: forwarded.append(signum))(
            signal.SIGTERM, None
        )
    finally:
        process.asked_to_stop.disconnect(failing)
        process.asked_to_stop.disconnect(streams)

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
    assert process.is_stopping()


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
    token = batches.buffer().token
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
    assert clients._clients.peek() is None
    flushing.write_at_exit()

    assert clients._clients.peek() is None
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


def test_a_signal_sent_again_while_the_handler_runs_is_left_to_the_run_under_way(
    r, queued, default_action
):
    handler = stopping.WriteThenHandOn(signal.SIG_DFL)
    flushing.current().put(recording.member_visit("guests", "m", time.time()))

    handler(signal.SIGTERM, None)
    handler(signal.SIGTERM, None)  # the watch's, or a second stop's, while the first ran

    assert default_action == [f"set {signal.SIG_DFL!r}", f"raise {signal.SIGTERM!r}"]
    assert handler.has_run()


# Watching for a signal the main thread missed


@pytest.fixture
def knocks(monkeypatch) -> list[int]:
    """The threads the watch sends SIGTERM to, noted instead of sent; it looks quickly."""
    sent: list[int] = []
    noted = {"pthread_kill": lambda thread, signum: sent.append(thread)}
    monkeypatch.setattr(stopping, "signal", SimpleNamespace(**vars(signal) | noted))
    monkeypatch.setattr(stopping, "KNOCK_EVERY", 0.001)
    return sent


@pytest.fixture
def watch(monkeypatch) -> Iterator[type[stopping.MissedSignalWatch]]:
    """The watch of this process, as in a child of multiprocessing; let go of at the end."""
    monkeypatch.setattr(stopping.MissedSignalWatch, "_needed", staticmethod(lambda: True))
    monkeypatch.setattr(stopping.MissedSignalWatch, "_current", None)
    yield stopping.MissedSignalWatch
    current = stopping.MissedSignalWatch._current
    if current is not None and signal.set_wakeup_fd(-1) != current.write_fd:
        pytest.fail("the watch's pipe was not the wakeup fd")
    if current is not None:
        current.close()


def installed(monkeypatch, handler: Any) -> None:
    """``handler`` is the SIGTERM handler that the watch finds (and only the watch)."""
    found = {"getsignal": lambda signum: handler}
    monkeypatch.setattr(
        stopping, "signal", SimpleNamespace(**vars(vars(stopping)["signal"]) | found)
    )


def test_the_watch_sends_sigterm_again_to_the_main_thread_until_the_handler_has_run(
    monkeypatch, knocks
):
    handler = stopping.WriteThenHandOn(signal.SIG_DFL)
    installed(monkeypatch, handler)
    main_thread = threading.main_thread().ident or 0
    watch = stopping.MissedSignalWatch(main_thread)

    def sent_again(thread: int, signum: int) -> None:
        knocks.append(thread)
        if len(knocks) == 3:
            handler._ran_in = os.getpid()  # the main thread's wait ended: it ran the handler

    monkeypatch.setattr(vars(stopping)["signal"], "pthread_kill", sent_again)
    try:
        assert watch.knock()
    finally:
        watch.close()

    assert knocks == [main_thread] * 3


def test_the_watch_leaves_a_server_s_signal_to_the_server(monkeypatch, knocks):
    installed(monkeypatch, lambda signum, frame: None)
    watch = stopping.MissedSignalWatch(threading.main_thread().ident or 0)
    try:
        assert watch.knock()
    finally:
        watch.close()

    assert knocks == []


def test_the_watch_gives_up_on_a_main_thread_busy_in_c(monkeypatch, knocks):
    """A main thread that is not waiting runs the handler once it is back in Python."""
    installed(monkeypatch, stopping.WriteThenHandOn(signal.SIG_DFL))
    monkeypatch.setattr(stopping, "KNOCK_FOR", 0.05)
    watch = stopping.MissedSignalWatch(threading.main_thread().ident or 0)
    try:
        assert not watch.knock()
    finally:
        watch.close()

    assert knocks


def test_the_watch_reads_the_signals_python_notes_and_knocks_at_sigterm(monkeypatch, watch):
    knocked = threading.Event()

    def knock(self: stopping.MissedSignalWatch) -> bool:
        knocked.set()
        return False  # the watch ends

    monkeypatch.setattr(stopping.MissedSignalWatch, "knock", knock)
    watch.start()
    current = watch._current
    assert current is not None
    watch.start()  # watched already: the same watch
    watch.after_fork()  # nor is it a parent's
    assert watch._current is current

    os.write(current.write_fd, bytes([signal.SIGINT]))  # as Python writes it at a signal
    assert not knocked.wait(0.05)
    os.write(current.write_fd, bytes([signal.SIGTERM]))
    assert knocked.wait(10)


def test_the_watch_ends_when_its_pipe_is_closed(watch):
    made = watch(threading.main_thread().ident or 0)
    os.close(made.write_fd)
    made.run()  # end of file
    os.close(made.read_fd)
    made.run()  # closed
    made.close()  # twice: nothing to do


def test_an_event_loop_s_wakeup_fd_is_left_in_place(watch):
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    try:
        watch.start()
        assert watch._current is None
        assert signal.set_wakeup_fd(write_end) == write_end
    finally:
        signal.set_wakeup_fd(-1)
        os.close(read_end)
        os.close(write_end)


def test_only_the_main_thread_starts_the_watch(watch):
    thread = threading.Thread(target=watch.start)
    thread.start()
    thread.join()

    assert watch._current is None


def test_a_forked_child_lets_go_of_its_parent_s_pipe_and_watches_with_its_own(monkeypatch, watch):
    parent_s = stopping.MissedSignalWatch(threading.main_thread().ident or 0)
    monkeypatch.setattr(parent_s, "pid", -1)  # as the child sees it
    monkeypatch.setattr(stopping.MissedSignalWatch, "_current", parent_s)
    signal.set_wakeup_fd(parent_s.write_fd)
    closed: list[bool] = []
    monkeypatch.setattr(parent_s, "close", lambda: closed.append(True))

    watch.after_fork()

    assert closed == [True]
    assert watch._current is not None
    assert watch._current is not parent_s  # the fixture checks that its pipe is the wakeup fd
    os.close(parent_s.read_fd)
    os.close(parent_s.write_fd)


def test_a_forked_child_leaves_a_wakeup_fd_set_since_alone(monkeypatch, watch):
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    monkeypatch.setattr(stopping.MissedSignalWatch, "_needed", staticmethod(lambda: False))
    parent_s = stopping.MissedSignalWatch(threading.main_thread().ident or 0)
    monkeypatch.setattr(parent_s, "pid", -1)
    monkeypatch.setattr(stopping.MissedSignalWatch, "_current", parent_s)
    signal.set_wakeup_fd(write_end)  # an event loop's, set after the watch's
    try:
        watch.after_fork()
        assert signal.set_wakeup_fd(-1) == write_end
    finally:
        os.close(read_end)
        os.close(write_end)
    assert watch._current is None


def test_where_the_wakeup_fd_cannot_be_set_after_a_fork_no_watch_starts(monkeypatch, watch):
    parent_s = stopping.MissedSignalWatch(threading.main_thread().ident or 0)
    monkeypatch.setattr(parent_s, "pid", -1)
    monkeypatch.setattr(stopping.MissedSignalWatch, "_current", parent_s)
    thread = threading.Thread(target=stopping._after_multiprocessing_fork, args=(None,))
    thread.start()  # set_wakeup_fd refuses any thread but the main interpreter's main thread
    thread.join()

    assert watch._current is None
    parent_s.close()


def test_a_child_of_multiprocessing_whose_handler_ends_it_needs_the_watch(monkeypatch):
    needed = stopping.MissedSignalWatch._needed
    installed(monkeypatch, stopping.WriteThenHandOn(signal.SIG_DFL))
    assert not needed()  # this process has no parent of multiprocessing

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    assert needed()  # a spawn child setting Django up as it imports its parent's main module

    installed(monkeypatch, stopping.WriteThenHandOn(lambda signum, frame: None))
    assert not needed()  # a server's handler, which the signal goes on to


def test_once_asked_to_stop_a_page_hit_wakes_the_thread_at_once(queued, monkeypatch):
    delays: list[float] = []
    monkeypatch.setattr(flushing.Flusher, "schedule", lambda self, delay: delays.append(delay))
    recording.count_hit()
    process.stop_soon()
    recording.count_hit()

    assert delays == [10, 0]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_once_asked_to_stop_a_throttled_page_view_writes_its_hit_before_it_answers(r, queued, mode):
    """A request the server finishes during its shutdown writes what it counted: the process
    may end by the signal, which no exit handler survives."""
    process.stop_soon()
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

from whos_online.flushing import batches, flusher as flushing
from whos_online.recording import visits as recording
from whos_online.store import scripts

print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
flushing.Flusher.schedule = lambda self, delay: None  # no thread: only the handler writes
recording.count_hit()
flushing.current().put(recording.member_visit("guests", "queued", time.time()))
print(batches.buffer().token, flush=True)
if sys.argv[2] == "while-exiting":
    # The signal comes while the process writes as it exits (a pool's worker that ended just
    # as the pool terminated it): it lets the write finish, and the process end as it would.
    run = scripts.run

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return run(*args, **kwargs)

    scripts.run = signalled
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


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; fork is Unix's")
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_a_child_whose_main_thread_waits_in_c_as_the_signal_comes_still_ends(
    real_redis_url, tmp_path, method
):
    """Python runs a handler when the main thread next runs Python code: a pool's worker that
    the signal reaches just before it waits for a task would wait for ever, and the pool's
    ``terminate()`` with it (``stopping.MissedSignalWatch``). It ends, and writes what it held."""
    result = processes.run(
        [sys.executable, str(ROOT / "tests" / "support" / "missed_signal.py"), method],
        env=processes.load_env(real_redis_url, tmp_path),
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [str(-signal.SIGTERM), "1 1"], result.stderr


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


# Through a short stall of Redis

#: Guests each server's workers hold when Redis stalls, and how long it stalls (milliseconds).
STALLED_GUESTS, STALL = 120, 3000


@contextlib.contextmanager
def serving(server: str, env: dict[str, str], log: Path) -> Iterator[int]:
    """The test site under gunicorn's sync or gthread workers (two), or uvicorn ``--workers 2``,
    until the block ends: then SIGTERM, and the block's end waits for the server to exit."""
    ready = "/static/app.css"
    if server == "uvicorn":
        with wsgi_server.uvicorn(env, log, ready_path=ready, workers=2) as (port, _):
            yield port
    else:
        threads = 4 if server == "gthread" else 1
        with wsgi_server.gunicorn(env, log, ready_path=ready, threads=threads) as (port, _):
            yield port


@pytest.mark.slow
@pytest.mark.parametrize("pause", ["WRITE", "ALL"])
@pytest.mark.parametrize("server", ["sync", "gthread", "uvicorn"])
@pytest.mark.parametrize("backend", ["real"], indirect=True)
def test_a_stop_during_a_short_stall_of_redis_loses_nothing(
    r, real_redis_url, tmp_path, server, pause
):
    """Redis stalls for three seconds (a failover, a slow fork for BGSAVE) just as the server
    is told to stop: each worker's exit write tries again within STOP_TIMEOUT, and writes every
    visit and page hit it held."""
    env = env_for(real_redis_url, tmp_path, "tests.load_settings")
    log = tmp_path / f"{server}.log"

    with (
        serving(server, env, log) as port,
        concurrent.futures.ThreadPoolExecutor(8) as pool,
    ):
        addresses = [f"198.18.5.{number + 1}" for number in range(STALLED_GUESTS)]
        responses = list(pool.map(lambda address: get(port, "/plain/", address), addresses))
        assert whos_online.online_counts().guests == 0  # all held by the workers
        r.execute_command("CLIENT", "PAUSE", STALL, pause)
        stopped = time.monotonic()
    exit_took = time.monotonic() - stopped
    r.ping()  # the admin client waits out what is left of the stall

    assert [response.status for response in responses] == [200] * STALLED_GUESTS
    written = whos_online.online_counts().guests
    print(
        f"{server}, CLIENT PAUSE {STALL} {pause}: {written} of {STALLED_GUESTS} written, "
        f"exited {exit_took:.1f} s after SIGTERM"
    )
    assert written == STALLED_GUESTS, log.read_text()
    assert hits_counted() == STALLED_GUESTS
    assert "Traceback" not in log.read_text()
