"""The bench site's ASGI application in ``whos_online.asgi.LiveStreams``, as a site that installs
it serves it (``uvicorn --factory bench.asgi:live_streams``)."""

from __future__ import annotations

from django.core.asgi import get_asgi_application

from whos_online.asgi import LiveStreams


def live_streams() -> LiveStreams:
    return LiveStreams(get_asgi_application())
