from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpResponse
from django.shortcuts import render

from whos_online.decorators import not_recorded

if TYPE_CHECKING:
    from django.http import HttpRequest


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html")


@not_recorded  # the scraper is not a visitor
def metrics(request: HttpRequest) -> HttpResponse:
    """Who is online, for Prometheus, from a registry of its own (see the README's "Metrics")."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    from whos_online.metrics import OnlineCollector

    registry = CollectorRegistry()
    registry.register(OnlineCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
