"""Sphinx configuration of the whos_online documentation (MyST Markdown pages, the furo theme).

``nox -s docs`` builds it with every warning an error; Read the Docs builds it the same way
(``.readthedocs.yaml``).
"""

from __future__ import annotations

project = "whos_online"
author = "whos_online developers"
copyright = "whos_online developers"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
# Headings down to ### get anchors, so that pages can link to a section of another page.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "whos_online"
