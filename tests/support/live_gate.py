"""A gate in front of pytest-django's live server, so that it serves only the test that runs.

The live server lives for the whole session, in threads of this process, while the database
belongs to one test at a time. A browser keeps sending requests (the widget refreshes every
second), and one sent just before a test's pages closed is answered after the test, while the
test database is being flushed or after database access was blocked again: the flush breaks and
the next test finds the previous test's users. Closing the gate and waiting for the requests
already inside Django, before the test's database goes away, keeps every test to itself.

It also lets one request at a time into Django. For an in-memory SQLite database, Django's live
server hands the test's one connection to all its threads, and two requests using it at once
(a page's "still here" and its refresh, sent by the same timer tick) read each other's rows:
a session read back empty, so a logged-in reader turned anonymous for a request.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

#: Long enough for the slowest request of a browser test on a busy CI machine.
DRAIN_TIMEOUT = 30.0


class LiveServerGate:
    """A WSGI application that passes requests to ``app`` while open and answers 503 while
    closed, without touching Django (whose request signals use the database)."""

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app
        self._open = False
        self._in_flight = 0
        self._changed = threading.Condition()
        #: Held from a request's start until its response is closed (see the module's docstring).
        self._serving = threading.Lock()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        with self._changed:
            if not self._open:
                start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
                return [b"No test is running.\n"]
            self._in_flight += 1
        self._serving.acquire()
        try:
            response = self.app(environ, start_response)
        except BaseException:
            self._finished()
            raise
        # Django sends request_finished when the server closes the response, after the body is
        # written: the request is over only then.
        return _Body(response, self._finished)

    def open(self) -> None:
        with self._changed:
            self._open = True

    def close_and_drain(self, timeout: float = DRAIN_TIMEOUT) -> None:
        """Lets no new request in, then waits for those inside to finish."""
        with self._changed:
            self._open = False
            if not self._changed.wait_for(lambda: self._in_flight == 0, timeout):
                raise AssertionError(
                    f"{self._in_flight} request(s) still inside the live server after {timeout} s"
                )

    def _finished(self) -> None:
        self._serving.release()
        with self._changed:
            self._in_flight -= 1
            self._changed.notify_all()


class _Body:
    """The application's response, unchanged but for telling the gate when it is closed: once,
    although wsgiref's error handling may close a response twice."""

    def __init__(self, response: Iterable[bytes], finished: Callable[[], None]) -> None:
        self._response = response
        self._finished = finished
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._response)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            close = getattr(self._response, "close", None)
            if close is not None:
                close()
        finally:
            self._finished()
