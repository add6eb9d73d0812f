"""A site that uses the template tag but has not mounted whos_online.urls."""

from __future__ import annotations

from tests.urls import urlpatterns as all_patterns

urlpatterns = [pattern for pattern in all_patterns if "online/" not in str(pattern.pattern)]
