"""Mount with ``path("online/", include("whos_online.urls"))``."""

from __future__ import annotations

from django.urls import path

from whos_online import views

app_name = "whos_online"

urlpatterns = [
    path("counts.json", views.counts, name="counts"),
]
