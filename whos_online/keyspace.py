"""Where whos_online's keys live in Redis, and how its Lua scripts are loaded.

All keys sit under ``{KEY_PREFIX}:`` — the braces make the prefix a Redis Cluster hash tag, so all
keys share one slot and every script and transaction works on a cluster as well.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis
    from redis.commands.core import Script

    from whos_online.conf import Config

T = TypeVar("T")


def key(config: Config, suffix: str) -> str:
    return f"{{{config.key_prefix}}}:{suffix}"


@functools.lru_cache(maxsize=64)
def script(client: redis.Redis, source: str) -> Script:
    # One Script per client and source keeps the SHA1 from being recomputed on every request.
    return client.register_script(source)


class PerConfig(Generic[T]):
    """A value derived from a ``Config``, built once and kept while the same Config is in use.

    ``get_config()`` hands out one frozen Config until settings change, so an identity check is
    enough; ``functools.lru_cache`` would hash every field of the Config on every call, which is
    a couple of microseconds on every recorded request.
    """

    def __init__(self, build: Callable[[Config], T]) -> None:
        self._build = build
        self._last: tuple[Config, T] | None = None

    def __call__(self, config: Config) -> T:
        last = self._last
        if last is not None and last[0] is config:
            return last[1]
        value = self._build(config)
        self._last = (config, value)
        return value


def text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def reset() -> None:
    script.cache_clear()
