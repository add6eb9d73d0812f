#!/usr/bin/env python3
"""Django's command-line utility for the example project."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    try:
        from django.core.management import execute_from_command_line
    except ImportError as error:
        msg = (
            "Couldn't import Django. Run `python3 scripts/dev.py example`, which creates a "
            "virtual environment with everything installed, or activate your own."
        )
        raise ImportError(msg) from error
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
