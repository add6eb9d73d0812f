"""Who is on a Django site right now, kept in Redis.

The API is importable from here; see ``whos_online.api`` for what each function guarantees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "OnlineCounts",
    "OnlineUser",
    "Peak",
    "Presence",
    "aenter",
    "aflush",
    "ais_online",
    "alast_seen",
    "aleave",
    "aonline_counts",
    "aonline_users",
    "apresence",
    "clean_counters",
    "enter",
    "flush",
    "forget_user",
    "get_counter",
    "is_online",
    "last_seen",
    "leave",
    "online_counts",
    "online_user_pks",
    "online_users",
    "peak",
    "presence",
    "prune",
    "record_guest",
    "record_user",
    "room_token",
    "set_room",
    "shows_names_to",
    "unique_visitors",
    "update_counter",
]

if TYPE_CHECKING:
    from whos_online.api import (
        OnlineCounts,
        OnlineUser,
        Peak,
        Presence,
        aenter,
        aflush,
        ais_online,
        alast_seen,
        aleave,
        aonline_counts,
        aonline_users,
        apresence,
        clean_counters,
        enter,
        flush,
        forget_user,
        get_counter,
        is_online,
        last_seen,
        leave,
        online_counts,
        online_user_pks,
        online_users,
        peak,
        presence,
        prune,
        record_guest,
        record_user,
        room_token,
        set_room,
        shows_names_to,
        unique_visitors,
        update_counter,
    )


def __getattr__(name: str) -> Any:
    # Importing the API needs configured settings and the app registry; deferring the import
    # keeps "import whos_online" safe in settings files and before django.setup().
    if name in __all__:
        from whos_online import api

        return getattr(api, name)
    raise AttributeError(f"module 'whos_online' has no attribute {name!r}")
