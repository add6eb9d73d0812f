from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from example_project import views

urlpatterns = [
    path("", views.home, name="home"),
    path("forum/", views.forum, name="forum"),
    path("forum/topics/<int:pk>/", views.topic, name="topic"),
    path("forum/topics/<int:pk>/read/", views.mark_read, name="mark_read"),
    # The chat's page; its WebSocket is routed in asgi.py (routing.py).
    path("chat/", views.chat, name="chat"),
    path("accounts/", include("django.contrib.auth.urls")),
    # The view the live widget polls (/online/widget/), the JSON view of the counts
    # (/online/counts.json) and the staff dashboard (/online/).
    path("online/", include("whos_online.urls")),
    path("admin/", admin.site.urls),
    # Prometheus scrapes who is online here (whos_online.metrics, with prometheus_client).
    path("metrics", views.metrics, name="metrics"),
]
