from __future__ import annotations

from django.contrib.auth import get_user_model, login, logout
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import include, path

from whos_online.decorators import not_recorded

PAGE = engines["django"].from_string("{% load whos_online %}<main>page</main>{% whos_online %}")


def page(request: HttpRequest) -> HttpResponse:
    return HttpResponse(PAGE.render({}, request))


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("plain")


def log_in(request: HttpRequest, username: str) -> HttpResponse:
    login(request, get_user_model().objects.get(username=username))
    return HttpResponse("logged in")


def log_out(request: HttpRequest) -> HttpResponse:
    logout(request)
    return HttpResponse("logged out")


async def async_plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("async")


@not_recorded
def poll(request: HttpRequest) -> HttpResponse:
    return HttpResponse("poll")


@not_recorded
async def async_poll(request: HttpRequest) -> HttpResponse:
    return HttpResponse("async poll")


urlpatterns = [
    path("", page),
    path("plain/", plain),
    path("async/", async_plain),
    path("poll/", poll),
    path("async-poll/", async_poll),
    path("login/<str:username>/", log_in),
    path("logout/", log_out),
    path("static/app.css", plain),
    path("online/", include("whos_online.urls")),
]
