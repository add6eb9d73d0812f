"""The example site's WebSocket URLs (``asgi.py`` routes them)."""

from __future__ import annotations

from django.urls import path

from example_project.consumers import ChatConsumer

websocket_urlpatterns = [
    path("ws/chat/<slug:name>/", ChatConsumer.as_asgi()),
]
