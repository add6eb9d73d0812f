"""Removing the keys a test process wrote under its own prefix, as it ends (``config.process``).

Every key of a prefix starts with its hash tag: the base tag ``{prefix}`` or a shard's
``{prefix:i/n…}`` (``keyspace``). They are found with ``SCAN MATCH`` (on every master of a
cluster, which redis-py's cluster client scans one after the other) and removed with ``UNLINK``
in chunks, which frees their memory off Redis's main thread; never ``KEYS``, which would stop a
live Redis for the whole keyspace at once. SCAN walks the whole database, one round trip per
``SCAN_COUNT`` keys it holds whatever their prefix (each keeping Redis busy well under a
millisecond): about 0.15 s per hundred thousand keys on a laptop.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Final

from whos_online.backend import connection

if TYPE_CHECKING:
    from collections.abc import Sequence

    from whos_online.backend.connection import Client

logger = logging.getLogger("whos_online")

#: Keys SCAN looks at per call (its COUNT), and keys per UNLINK.
SCAN_COUNT: Final = 1000
UNLINK_CHUNK: Final = 500


def pattern(prefix: str) -> str:
    """The ``SCAN MATCH`` pattern of every key under ``prefix``: its base tag and its shards'
    tags, and no other prefix's (``{site}`` is not ``{site-b}``'s). ``KEY_PREFIX`` may hold
    characters that a pattern reads as wildcards; they are escaped."""
    return "{" + re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "[}:]*"


def remove(client: Client, prefix: str) -> int:
    """Remove every key under ``prefix``; returns how many there were."""
    removed = 0
    chunk: list[Any] = []
    for key in client.scan_iter(match=pattern(prefix), count=SCAN_COUNT):
        chunk.append(key)
        if len(chunk) == UNLINK_CHUNK:
            removed += client.unlink(*chunk)
            chunk = []
    if chunk:
        removed += client.unlink(*chunk)
    return removed


def remove_at_exit(*, prefixes: Sequence[str], **kwargs: object) -> None:
    """Receives ``process.test_run_ended``: removes the keys of a test process's prefixes from
    its Redis (as the settings name it as it ends). A Redis that cannot be reached leaves them,
    and the log says how to remove them by hand."""
    for prefix in prefixes:
        try:
            removed = remove(connection.request_client(), prefix)
        except connection.REDIS_ERRORS as error:
            logger.warning(
                "whos_online could not remove the keys of this test process (%s): %s. "
                "Remove them with: redis-cli --scan --pattern '%s' | xargs redis-cli unlink",
                prefix,
                error,
                pattern(prefix),
            )
        else:
            logger.debug("whos_online removed %d keys of this test process (%s)", removed, prefix)
