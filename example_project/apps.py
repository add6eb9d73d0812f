from __future__ import annotations

from django.apps import AppConfig


class ExampleProjectConfig(AppConfig):
    """Installed as an app only for its templates and its ``whos_online_demo`` command."""

    name = "example_project"
    verbose_name = "whos_online example project"
