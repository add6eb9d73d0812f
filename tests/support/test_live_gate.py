"""The gate that keeps the live server's requests inside the test that made them."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest

from tests.support.live_gate import LiveServerGate

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from _typeshed import OptExcInfo
    from _typeshed.wsgi import StartResponse, WSGIEnvironment


class Answers:
    """A WSGI application that answers once ``release`` is set, and counts closed responses."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.closed = 0

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        self.entered.set()
        self.release.wait()
        start_response("200 OK", [])
        return Closing(self)


class Closing(list[bytes]):
    def __init__(self, app: Answers) -> None:
        super().__init__([b"page"])
        self.app = app

    def close(self) -> None:
        self.app.closed += 1


def call(gate: LiveServerGate) -> tuple[list[str], Iterable[bytes]]:
    """Calls the gate as a WSGI server would; returns the statuses it started and the body."""
    statuses: list[str] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: OptExcInfo | None = None, /
    ) -> Callable[[bytes], object]:
        statuses.append(status)
        return lambda data: None

    return statuses, gate({}, start_response)


def test_a_closed_gate_answers_503_without_calling_the_site():
    app = Answers()
    gate = LiveServerGate(app)
    statuses, body = call(gate)
    assert statuses == ["503 Service Unavailable"]
    assert list(body) == [b"No test is running.\n"]
    assert not app.entered.is_set()


def test_draining_waits_for_the_request_inside_until_its_response_is_closed():
    app = Answers()
    gate = LiveServerGate(app)
    gate.open()
    bodies: list[Iterable[bytes]] = []
    request = threading.Thread(target=lambda: bodies.append(call(gate)[1]))
    request.start()
    assert app.entered.wait(10)
    drain = threading.Thread(target=gate.close_and_drain)
    drain.start()

    drain.join(0.2)
    assert drain.is_alive()  # the request is still in the site
    app.release.set()
    request.join()
    drain.join(0.2)
    assert drain.is_alive()  # answered, but its response is not closed yet
    # A server may close a response twice on an error path; the gate counts it once.
    body = bodies[0]
    assert list(body) == [b"page"]
    close = getattr(body, "close")  # noqa: B009 (a WSGI body's close is optional)
    close()
    close()
    drain.join()
    assert app.closed == 1
    assert call(gate)[0] == ["503 Service Unavailable"]  # and no new request gets in


def test_a_request_that_fails_in_the_site_leaves_the_gate():
    def failing(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        raise RuntimeError("broken view")

    gate = LiveServerGate(failing)
    gate.open()
    with pytest.raises(RuntimeError):
        call(gate)
    gate.close_and_drain(timeout=0)
