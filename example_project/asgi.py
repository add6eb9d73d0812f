"""ASGI entry point of the example site: ``python3 scripts/dev.py example`` serves it with
uvicorn, which also carries the chat's WebSockets (Channels routes them to the chat's consumer,
with the session's user in ``scope["user"]``). Django's application is in ``LiveStreams``, which
sends the live widgets' streams straight to their connections (docs/live.md)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

# Django is set up before anything imports the models (the consumer, the auth middleware).
django_application = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from example_project.routing import websocket_urlpatterns  # noqa: E402
from whos_online.asgi import LiveStreams  # noqa: E402

application = ProtocolTypeRouter(
    {
        # With DEBUG on, the static files too, as runserver serves them.
        "http": LiveStreams(
            ASGIStaticFilesHandler(django_application) if settings.DEBUG else django_application
        ),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
