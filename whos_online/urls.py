"""Mount with ``path("online/", include("whos_online.urls"))``."""

from __future__ import annotations

from django.urls import path

from whos_online import dashboard, views
from whos_online.live import streaming

app_name = "whos_online"

urlpatterns = [
    path("", dashboard.dashboard_page, name="dashboard"),
    path("refresh/", dashboard.dashboard_refresh, name="dashboard_refresh"),
    path("counts.json", views.counts, name="counts"),
    path("widget/", views.widget, name="widget"),
    path("widgets/", views.widgets, name="widgets"),
    path("stream/", streaming.stream, name="stream"),
    path("presence/", views.presence, name="presence"),
    path("page-view/", views.page_view, name="page_view"),
    path("live-check.js", views.live_check, name="live_check"),
]
