"""Letting go of a request's thread, and its database connections, while its response streams.

Django's ASGI handler runs each request in a thread-sensitive context of its own (asgiref's
``ThreadSensitiveContext``): the request's first synchronous call (a sync middleware, the session,
the user) starts a thread that the request keeps until its response has ended, so that all its
sync code runs on one thread, and the database connections that code opened stay open on it
until Django closes them as the request finishes. A live stream's response lasts as long as its
page is open, and needs that thread and those connections only to open: kept, every open page
would hold an idle thread of its worker, and a connection to the database.

So once a stream has sent its first state, it closes its thread's database connections (as
Django does when a request finishes; the next query opens one again), and shuts that thread down.
Should the request make another thread-sensitive call later (Django's own, as the response ends),
asgiref starts a thread for it then. Finding the thread reaches into asgiref
(``SyncToAsync.thread_sensitive_context`` and ``context_to_thread_executor``, both there since
asgiref 3.3); when they are not as expected, or the context runs on an executor its caller owns,
the thread stays, as it would without this.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Final

from asgiref.sync import AsyncToSync, SyncToAsync, ThreadSensitiveContext
from django.db import connections

logger = logging.getLogger(__name__)

#: Whether asgiref lets the caller of a context give it an executor of its own (3.13 on), which
#: must then be left alone.
_CALLERS_MAY_OWN_EXECUTORS: Final = (
    "executor" in inspect.signature(ThreadSensitiveContext.__init__).parameters
)


def let_go() -> bool:
    """Close the database connections of the calling request's own thread and end that thread;
    whether it did (False: the request has no thread of its own, as when a sync caller above
    runs its sync code, or it could not be found). The connections are closed on that thread,
    as its last work, without waiting for it: a client gone meanwhile cancels nothing, and a
    connection that fails to close is logged, never the stream's end."""
    if getattr(AsyncToSync.executors, "current", None) is not None:
        return False  # a sync caller above runs this request's sync code, on its own thread
    context = _current_context()
    executors: Any = getattr(SyncToAsync, "context_to_thread_executor", None)
    if context is None or executors is None:
        return False
    if getattr(context, "_executor", None) is not None or (
        _CALLERS_MAY_OWN_EXECUTORS and not hasattr(context, "_executor")
    ):
        # An executor the caller made and shuts down itself, or an asgiref that does not say.
        return False
    executor = executors.pop(context, None)
    if executor is None:
        return False
    executor.submit(_close_connections)
    executor.shutdown(wait=False)
    return True


def _close_connections() -> None:
    try:
        connections.close_all()
    except Exception:
        logger.exception("Closing the database connections of a live stream's thread failed.")


def _current_context() -> object | None:
    variable: Any = getattr(SyncToAsync, "thread_sensitive_context", None)
    if variable is None or not hasattr(variable, "get"):
        return None
    found: object | None = variable.get(None)
    return found
