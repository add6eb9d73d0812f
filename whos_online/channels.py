"""Presence for Django Channels: a consumer mixin that holds its person in its rooms while its
connection is open.

It enters the rooms once the consumer accepts, renews them from a task of its own and leaves them
however the consumer ends, so that a socket counts as a page does (docs/connections.md). Nothing
here imports Channels: whos_online does not depend on it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any, ClassVar

from whos_online import api
from whos_online.config.settings import get_config
from whos_online.recording import guests

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    class _Consumer:
        """What the mixin uses of a Channels consumer (for the type checker only)."""

        scope: dict[str, Any]

        async def __call__(
            self,
            scope: dict[str, Any],
            receive: Callable[[], Awaitable[Any]],
            send: Callable[[Any], Awaitable[None]],
        ) -> None: ...

        async def accept(self, *args: Any, **kwargs: Any) -> None: ...

else:
    _Consumer = object

logger = logging.getLogger("whos_online")


class _ScopeAsRequest:
    """The two headers of a connection's scope that name its client, where the middleware reads
    them on a request (``guests.client_ip``)."""

    def __init__(self, scope: dict[str, Any]) -> None:
        client = scope.get("client") or ("",)
        headers = dict(scope.get("headers") or ())
        forwarded = headers.get(b"x-forwarded-for", b"").decode("latin-1")
        self.META = {"REMOTE_ADDR": str(client[0]), "HTTP_X_FORWARDED_FOR": forwarded}


class PresenceMixin(_Consumer):
    """Holds the consumer's person in ``get_presence_rooms()`` while its connection is open."""

    #: The rooms of every connection of the consumer (``get_presence_rooms`` may say otherwise).
    presence_rooms: ClassVar[Sequence[str]] = ()
    #: Seconds between two renewals; None for a third of ``WINDOW``.
    presence_renew_every: ClassVar[float | None] = None

    _presence_held: set[str]
    _presence_task: asyncio.Task[None] | None
    _presence_person: tuple[AbstractBaseUser | AnonymousUser | None, str | None] | None
    _presence_id: str

    def get_presence_rooms(self) -> Sequence[str]:
        """The rooms this connection holds its person in; ``presence_rooms`` by default."""
        return self.presence_rooms

    def get_presence_user(self) -> AbstractBaseUser | AnonymousUser | None:
        """The user of the connection, ``scope["user"]`` (a guest's is anonymous, or None)."""
        user: AbstractBaseUser | AnonymousUser | None = self.scope.get("user")
        return user

    def get_presence_address(self) -> str | None:
        """The client's address, as the middleware finds it on a request (the
        ``TRUSTED_PROXY_COUNT``-th entry of ``X-Forwarded-For`` from the right, else the peer's
        address); None when unknown (a Unix socket, a test's scope without ``client``)."""
        scope = _ScopeAsRequest(self.scope)
        if not scope.META["REMOTE_ADDR"] and not scope.META["HTTP_X_FORWARDED_FOR"]:
            return None
        request: HttpRequest = scope  # type: ignore [assignment]
        return guests.client_ip(request, get_config())

    def presence_renewal_interval(self) -> float:
        """Seconds between two renewals: ``presence_renew_every``, or a third of ``WINDOW``, so
        that one late renewal (a busy loop, a failed write retried) costs no drop-out."""
        return self.presence_renew_every or get_config().window / 3

    def get_presence_connection(self) -> str:
        """The id of this connection: the consumer's ``channel_name`` (with a channel layer),
        else a random id made once."""
        name = getattr(self, "channel_name", None)
        if isinstance(name, str) and name:
            return name
        if not hasattr(self, "_presence_id"):
            self._presence_id = uuid.uuid4().hex
        return self._presence_id

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        self._presence_held = set()
        self._presence_task = None
        self._presence_person = None
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.presence_leave_all()

    async def accept(self, *args: Any, **kwargs: Any) -> None:
        """Accept the connection, then enter its rooms and start renewing them."""
        await super().accept(*args, **kwargs)
        for room in self.get_presence_rooms():
            await self.presence_enter(room)

    async def presence_enter(self, room: str) -> None:
        """Hold the connection's person in ``room`` too, from now until ``presence_leave``
        (a chat whose consumer joins rooms as its client asks)."""
        person = self._person()
        if person is None:
            return
        user, address = person
        await api.aenter(
            room, user=user, address=address, connection=self.get_presence_connection()
        )
        self._presence_held.add(room)
        if self._presence_task is None:
            self._presence_task = asyncio.create_task(self._renew())

    async def presence_leave(self, room: str) -> None:
        """Let go of ``room``; the person leaves it with the last of their connections there."""
        if room not in self._presence_held or self._presence_person is None:
            return
        self._presence_held.discard(room)
        user, address = self._presence_person
        await api.aleave(
            room, user=user, address=address, connection=self.get_presence_connection()
        )

    async def presence_leave_all(self) -> None:
        """Stop renewing, and leave every room held: as the consumer ends."""
        task, self._presence_task = self._presence_task, None
        if task is not None:
            task.cancel()
        for room in list(self._presence_held):
            await self.presence_leave(room)

    def _person(self) -> tuple[AbstractBaseUser | AnonymousUser | None, str | None] | None:
        """Who the connection holds, worked out once: the user, or the guest's address."""
        if self._presence_person is None:
            user = self.get_presence_user()
            if user is not None and user.is_authenticated:
                self._presence_person = (user, None)
            else:
                address = self.get_presence_address()
                if address is None:
                    logger.debug("A connection without a user or an address holds no room.")
                    return None
                self._presence_person = (None, address)
        return self._presence_person

    async def _renew(self) -> None:
        """Enter the rooms held again, every ``presence_renew_every`` seconds."""
        every = self.presence_renewal_interval()
        while True:
            await asyncio.sleep(every)
            try:
                for room in list(self._presence_held):
                    user, address = self._presence_person or (None, None)
                    await api.aenter(
                        room, user=user, address=address, connection=self.get_presence_connection()
                    )
            except Exception:
                logger.exception("whos_online could not renew a connection's rooms.")
