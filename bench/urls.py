"""The bench site's pages: a small template view, a log-in for the load generator and, where
whos_online is installed, a page with ``{% whos_online %}``, a page in a room with the room's live
widget, and whos_online's views (the live stream among them)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model, login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template import engines
from django.urls import URLPattern, URLResolver, include, path

ITEMS = [f"Item {number}" for number in range(10)]
ROOM = "bench-room"


def page(request: HttpRequest) -> HttpResponse:
    return render(request, "bench/page.html", {"items": ITEMS})


def log_in(request: HttpRequest, username: str) -> HttpResponse:
    login(request, get_user_model().objects.get(username=username))
    return HttpResponse("logged in")


def ready(request: HttpRequest) -> HttpResponse:
    # Under STATIC_URL, which whos_online ignores: waiting for the site records nobody.
    return HttpResponse("ready")


urlpatterns: list[URLPattern | URLResolver] = [
    path("", page),
    path("static/ready", ready),
    path("login/<str:username>/", log_in),
]
if "whos_online" in settings.INSTALLED_APPS:
    from whos_online.decorators import in_room

    def tag_page(request: HttpRequest) -> HttpResponse:
        template = engines["django"].from_string(
            "{% load whos_online %}<main>page</main>{% whos_online %}"
        )
        return HttpResponse(template.render({}, request))

    @in_room(ROOM)
    def room_page(request: HttpRequest) -> HttpResponse:
        template = engines["django"].from_string(
            '{% load whos_online %}<!doctype html><html lang="en"><head><meta charset="utf-8">'
            "<title>A room</title></head><body>"
            "{% whos_online live=True here=True peak=False %}</body></html>"
        )
        return HttpResponse(template.render(request=request))

    urlpatterns += [
        path("tag/", tag_page),
        path("room/", room_page),
        path("online/", include("whos_online.urls")),
    ]
