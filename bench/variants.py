"""The sites whose request throughput is compared: each one is bare Django plus one middleware.

``bench.site`` builds the settings of one of them from ``WHOS_ONLINE_BENCH_VARIANT``; the
throughput benchmark serves each through its own gunicorn and compares them with ``bare``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pathlib import Path

WHOS_ONLINE_MIDDLEWARE: Final = "whos_online.middleware.WhosOnlineMiddleware"
NAIVE_MIDDLEWARE: Final = "bench.naive.NaiveZaddMiddleware"


# Compared by identity: there is one of each, and its settings dict is not hashable.
@dataclass(frozen=True, eq=False)
class Variant:
    name: str
    label: str
    apps: tuple[str, ...] = ()
    middleware: tuple[str, ...] = ()
    #: WHOS_ONLINE settings beyond those every whos_online variant shares (see ``bench.site``).
    whos_online: dict[str, Any] | None = None
    #: Requests carry the throttle cookie that a first, recorded visit handed out.
    throttled: bool = False
    #: Whether it records guests; the competitors record authenticated users only.
    records_guests: bool = True
    #: A third-party module that must import for the variant to run at all.
    module: str | None = None
    #: Another checkout of the project to serve this variant from, to compare two versions.
    checkout: Path | None = None

    @property
    def settings_name(self) -> str:
        """What ``bench.site`` knows the variant as (a copy from another checkout included)."""
        return self.name.partition("@")[0]

    def served_from(self, checkout: Path) -> Variant:
        return replace(
            self,
            name=f"{self.name}@{checkout.name}",
            label=f"{self.label}, from {checkout}",
            checkout=checkout,
        )


BARE: Final = Variant("bare", "bare Django (sessions, auth, a small template)")

VARIANTS: Final = (
    BARE,
    Variant(
        "throttled",
        "whos_online, throttle cookie present (defaults)",
        apps=("whos_online",),
        middleware=(WHOS_ONLINE_MIDDLEWARE,),
        whos_online={},
        throttled=True,
    ),
    Variant(
        "recording",
        "whos_online, every request recorded (`THROTTLE=0`), queued and written within the "
        "default `FLUSH_INTERVAL`",
        apps=("whos_online",),
        middleware=(WHOS_ONLINE_MIDDLEWARE,),
        whos_online={"THROTTLE": 0},
    ),
    Variant(
        "recording_at_once",
        "whos_online, every request recorded and written before its response (`THROTTLE=0`, "
        "`FLUSH_INTERVAL=0`)",
        apps=("whos_online",),
        middleware=(WHOS_ONLINE_MIDDLEWARE,),
        whos_online={"THROTTLE": 0, "FLUSH_INTERVAL": 0},
    ),
    Variant(
        "recording_hits",
        "whos_online, every request recorded and its page hit counted (`THROTTLE=0`, "
        "`COUNT_HITS=True`)",
        apps=("whos_online",),
        middleware=(WHOS_ONLINE_MIDDLEWARE,),
        whos_online={"THROTTLE": 0, "COUNT_HITS": True},
    ),
    Variant(
        "naive",
        "one plain ZADD per request (the naive middleware)",
        middleware=(NAIVE_MIDDLEWARE,),
    ),
    Variant(
        "online_users",
        "django-online-users 0.3 (an SQL write per authenticated request)",
        apps=("online_users",),
        middleware=("online_users.middleware.OnlineNowMiddleware",),
        records_guests=False,
        module="online_users.middleware",
    ),
    Variant(
        "online_status",
        "django-online-status 0.1.0",
        apps=("online_status",),
        middleware=("online_status.middleware.OnlineStatusMiddleware",),
        records_guests=False,
        module="online_status.middleware",
    ),
)

BY_NAME: Final = {variant.name: variant for variant in VARIANTS}
