"""The benchmark site's pages: a small template view, and a log-in for the load generator."""

from __future__ import annotations

from django.contrib.auth import get_user_model, login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path

ITEMS = [f"Item {number}" for number in range(10)]


def page(request: HttpRequest) -> HttpResponse:
    return render(request, "bench/page.html", {"items": ITEMS})


def log_in(request: HttpRequest, username: str) -> HttpResponse:
    login(request, get_user_model().objects.get(username=username))
    return HttpResponse("logged in")


def ready(request: HttpRequest) -> HttpResponse:
    # Under STATIC_URL, which whos_online ignores: waiting for the site records nobody.
    return HttpResponse("ready")


urlpatterns = [
    path("", page),
    path("static/ready", ready),
    path("login/<str:username>/", log_in),
]
