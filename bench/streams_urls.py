"""The live streams benchmark's pages: one page in a room that shows the room's live widget,
whos_online's views (the stream among them), and the throughput benchmark's page at ``/`` (in no
room), which ``bench.streams_requests`` loads with wrk while streams are open."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import include, path

from bench.urls import page
from whos_online.decorators import in_room

ROOM = "bench-room"

_PAGE = """{% load whos_online %}<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>A room</title></head><body>{% whos_online live=True here=True peak=False %}</body></html>"""


@in_room(ROOM)
def room_page(request: HttpRequest) -> HttpResponse:
    return HttpResponse(engines["django"].from_string(_PAGE).render(request=request))


def ready(request: HttpRequest) -> HttpResponse:
    # Under STATIC_URL, which whos_online ignores: waiting for the site records nobody.
    return HttpResponse("ready")


urlpatterns = [
    path("", page),
    path("static/ready", ready),
    path("room/", room_page),
    path("online/", include("whos_online.urls")),
]
