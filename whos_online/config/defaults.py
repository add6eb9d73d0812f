"""The defaults of every ``WHOS_ONLINE`` key, and the bounds the checks hold them to.

Kept apart from ``conf`` (which builds the ``Config``) and ``validation`` (which checks what the
site set), so that both read them without importing each other, as django-cors-headers keeps its
``defaults.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Crawlers, monitors and HTTP libraries that are counted as bots rather than guests.
DEFAULT_BOT_USER_AGENTS: Final = (
    r"(?i)bot\b|crawl|spider|slurp|bingpreview|facebookexternalhit|embedly|quora link preview"
    r"|pinterestbot|whatsapp|telegrambot|discord|slack|skype|vkshare|w3c_validator|lighthouse"
    r"|headlesschrome|phantomjs|python-requests|python-urllib|aiohttp|httpx|curl/|wget/"
    r"|go-http-client|java/|okhttp|libwww|apache-httpclient|uptime|pingdom|statuscake"
    r"|monitor|scrapy|feedfetcher|feedly|ahrefs|semrush|mj12|dotbot|petalbot|yandex|baidu"
)

DEFAULTS: Final[Mapping[str, Any]] = {
    "REDIS_ALIAS": "default",
    "REDIS_URL": None,
    "REDIS_CLUSTER": False,
    "KEY_PREFIX": "whos_online",
    "WINDOW": 600,
    "THROTTLE": 120,
    "TRACK_GUESTS": True,
    "GUEST_IDENTITY": "hashed-ip",
    "GUEST_IPV6_PREFIX": 64,
    "TRUSTED_PROXY_COUNT": 0,
    # None means "STATIC_URL and MEDIA_URL", read when the config is built.
    "IGNORE_PATHS": None,
    "BOT_USER_AGENTS": DEFAULT_BOT_USER_AGENTS,
    "HIDE_USER": None,
    "DISPLAY_NAME": None,
    "DISPLAY_LIMIT": 50,
    "COUNTER_PRECISIONS": [1, 5, 60, 300, 3600, 18000, 86400],
    "COUNTER_SAMPLES": 120,
    "FAILURE_BACKOFF": 10,
    "LAST_SEEN_DAYS": 90,
    "COUNT_HITS": False,
    "SHOW_NAMES_TO": "staff",
    "REFRESH_INTERVAL": 30,
    "JSON_MAX_AGE": 10,
    "SHARDS": 1,
    "SNAPSHOT_MAX_AGE": 2,
    "FLUSH_INTERVAL": 0.1,
    "ROOMS": {},
    "ROOM_ACCESS": None,
    "ROOM_TOKEN_MAX_AGE": 3600,
}

#: Most shards a layout may have: choosing their hash tags costs about a millisecond per shard,
#: once per process.
MAX_SHARDS: Final = 128
