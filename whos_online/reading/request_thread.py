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

import asyncio
from typing import Any

from asgiref.sync import SyncToAsync
from django.db import connections


async def let_go() -> bool:
    """Close the database connections of the calling request's own thread and end that thread;
    whether it did (False: the request has no thread of its own, as when a sync caller above
    runs its sync code, or it could not be found)."""
    context = _current_context()
    executors: Any = getattr(SyncToAsync, "context_to_thread_executor", None)
    if context is None or executors is None:
        return False
    if getattr(context, "_executor", None) is not None:
        return False  # an executor the caller made and shuts down itself
    executor = executors.pop(context, None)
    if executor is None:
        return False
    try:
        await asyncio.get_running_loop().run_in_executor(executor, connections.close_all)
    finally:
        executor.shutdown(wait=False)
    return True


def _current_context() -> object | None:
    variable: Any = getattr(SyncToAsync, "thread_sensitive_context", None)
    if variable is None or not hasattr(variable, "get"):
        return None
    found: object | None = variable.get(None)
    return found
