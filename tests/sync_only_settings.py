"""The settings of the load test (``tests/load_settings.py``) with a sync-only middleware below
whos_online's, which makes Django run whos_online's in sync mode under ASGI."""

from __future__ import annotations

from tests.load_settings import *  # noqa: F403
from tests.load_settings import MIDDLEWARE

MIDDLEWARE = [*MIDDLEWARE, "tests.support.sync_only.sync_only_middleware"]
