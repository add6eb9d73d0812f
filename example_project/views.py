from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_POST

import whos_online
from example_project.models import Board, Topic
from whos_online.decorators import not_recorded

if TYPE_CHECKING:
    from django.http import HttpRequest

#: The repository's root, where manage.py is.
ROOT = Path(__file__).resolve().parent.parent
#: The chat's room: its sockets' (``routing``: ``/ws/chat/lobby/``) and its page's.
CHAT_ROOM = "chat:lobby"


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html", {"cleanup_command": cleanup_command()})


def forum(request: HttpRequest) -> HttpResponse:
    """The boards and their topics, each with how many are reading it (one read per topic)."""
    boards = Board._default_manager.prefetch_related("topics")
    return render(request, "forum.html", {"boards": boards})


def topic(request: HttpRequest, pk: int) -> HttpResponse:
    """A topic: its readers are in its room (``ROOMS`` in the settings names this view's URL,
    as a site does for an app's views it did not write), and the page says who they are, live.
    """
    found = get_object_or_404(Topic._default_manager.select_related("board"), pk=pk)
    return render(request, "topic.html", {"topic": found})


def chat(request: HttpRequest) -> HttpResponse:
    """A chat: its WebSocket (``consumers.ChatConsumer``) holds its person in the room
    ``chat:lobby`` while it is open, in however many tabs, whatever page they read in another
    one; the page is in the room too, and says who is in it, live."""
    whos_online.set_room(request, CHAT_ROOM, title="Chat")
    return render(request, "chat.html", {"room": CHAT_ROOM})


@require_POST
def mark_read(request: HttpRequest, pk: int) -> JsonResponse:
    """What a topic page's own script posts once it has loaded, as forums do to remember what
    each member read: a request that keeps its reader online, and in the topic's room."""
    get_object_or_404(Topic, pk=pk)
    return JsonResponse({"read": pk})


def cleanup_command() -> str:
    """The command that cleans this site's Redis, to run from the repository's root.

    ``scripts/dev.py example`` starts a redis-server on a free port and tells only the site's
    process (``REDIS_URL``), so the command says the URL, and the Python that has Django.
    """
    python = Path(sys.executable)
    if python.is_relative_to(ROOT):
        python = python.relative_to(ROOT)
    command = shlex.join([str(python), "manage.py", "whos_online_cleanup"])
    url = os.environ.get("REDIS_URL")
    return f"REDIS_URL={shlex.quote(url)} {command}" if url else command


@not_recorded  # the scraper is not a visitor
def metrics(request: HttpRequest) -> HttpResponse:
    """Who is online, for Prometheus, from a registry of its own (see the README's "Metrics")."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    from whos_online.metrics import OnlineCollector

    registry = CollectorRegistry()
    registry.register(OnlineCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
