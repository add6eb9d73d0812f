"""Redis URLs as log lines may show them."""

from __future__ import annotations

import re
from urllib.parse import urlsplit


def redact_url(url: str) -> str:
    """Hide passwords, given before the host or as ``?password=``, from log lines."""
    parts = urlsplit(url)
    if parts.password:
        parts = parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@"))
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return parts._replace(query=query).geturl()
