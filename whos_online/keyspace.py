"""Where whos_online's keys live in Redis, and how its Lua scripts are loaded.

All keys sit under ``{KEY_PREFIX}:`` — the braces make the prefix a Redis Cluster hash tag, so all
keys share one slot and every script and transaction works on a cluster as well.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis
    from redis.commands.core import Script

    from whos_online.conf import Config


def key(config: Config, suffix: str) -> str:
    return f"{{{config.key_prefix}}}:{suffix}"


@functools.lru_cache(maxsize=64)
def script(client: redis.Redis, source: str) -> Script:
    # One Script per client and source keeps the SHA1 from being recomputed on every request.
    return client.register_script(source)


def text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def reset() -> None:
    script.cache_clear()
