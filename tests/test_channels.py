"""The Channels consumer mixin, driven by Channels' own ``WebsocketCommunicator``: a consumer's
person is in its rooms while its connection is open, renewed, and out once it ends."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from asgiref.sync import async_to_sync
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.testing import WebsocketCommunicator

import whos_online
from tests.support.helpers import configure
from whos_online import api
from whos_online.channels import PresenceMixin
from whos_online.config.settings import get_config
from whos_online.recording.guests import guest_id

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable, Callable

CHAT = "chat:lobby"


class Chat(PresenceMixin, AsyncWebsocketConsumer):  # type: ignore [misc]
    """A chat that holds its people in ``chat:lobby``, and in the rooms its client joins."""

    presence_rooms = (CHAT,)
    #: The consumers the test made, newest last.
    made: ClassVar[list[Chat]] = []

    async def connect(self) -> None:
        Chat.made.append(self)
        if self.scope.get("refuse"):
            await self.close()
            return
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        verb, _, room = (text_data or "").partition(" ")
        if verb == "join":
            await self.presence_enter(room)
        elif verb == "part":
            await self.presence_leave(room)
        await self.send(text_data=f"done {verb}")


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    """Run an async scenario as Django runs a consumer: a thread-sensitive call (the database)
    comes back to this thread."""
    return async_to_sync(scenario)()


def socket(
    user: object = None,
    client: tuple[str, int] | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
    **scope: Any,
) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(Chat.as_asgi(), "/ws/chat/", headers=headers)
    if user is not None:
        communicator.scope["user"] = user
    if client is not None:
        communicator.scope["client"] = client
    communicator.scope.update(scope)
    return communicator


async def names(room: str = CHAT) -> list[str]:
    return sorted(user.name for user in await whos_online.aonline_users(room=room))


async def guests(room: str = CHAT) -> int:
    return (await whos_online.aonline_counts(room=room)).guests


@pytest.fixture(autouse=True)
def _forget_consumers() -> None:
    Chat.made.clear()


def test_two_sockets_of_one_user_hold_the_room_until_the_last_closes(backend, alice):
    async def scenario() -> list[list[str]]:
        first, second = socket(alice), socket(alice)
        seen = []
        assert (await first.connect())[0]
        assert (await second.connect())[0]
        seen.append(await names())
        await first.disconnect()
        seen.append(await names())
        await second.disconnect()
        seen.append(await names())
        return seen

    assert run(scenario) == [["alice"], ["alice"], []]
    assert whos_online.online_counts().users == 1  # still online on the site


def test_a_guest_is_named_by_their_address(backend, r, db):
    async def scenario() -> tuple[int, int]:
        communicator = socket(client=("198.51.100.7", 50000))
        await communicator.connect()
        inside = await guests()
        await communicator.disconnect()
        return inside, await guests()

    assert run(scenario) == (1, 0)
    me = guest_id("198.51.100.7", get_config(), time.time())
    assert r.zrange("{whos_online}:guests", 0, -1) == [me.encode()]  # a page's guest, the same


def test_behind_a_trusted_proxy_the_guest_is_the_forwarded_address(backend, settings, r, db):
    configure(settings, TRUSTED_PROXY_COUNT=1)

    async def scenario() -> list[bytes]:
        communicator = socket(
            client=("10.0.0.2", 50000), headers=[(b"x-forwarded-for", b"203.0.113.9")]
        )
        await communicator.connect()
        await whos_online.aflush()
        inside: list[bytes] = r.zrange(f"{{whos_online}}:room:{CHAT}:guests", 0, -1)
        await communicator.disconnect()
        return inside

    member = guest_id("203.0.113.9", get_config(), time.time())
    assert run(scenario) == [member.encode()]


def test_a_connection_without_a_person_holds_no_room(backend, db):
    async def scenario() -> tuple[bool, int]:
        communicator = socket()  # no user, no client address
        connected, _ = await communicator.connect()
        inside = await guests()
        await communicator.disconnect()
        return connected, inside

    assert run(scenario) == (True, 0)


def test_a_refused_connection_enters_no_room(backend, alice):
    async def scenario() -> tuple[bool, list[str]]:
        communicator = socket(alice, refuse=True)
        connected, _ = await communicator.connect()
        return connected, await names()

    assert run(scenario) == (False, [])


def test_a_consumer_joins_and_parts_rooms_as_its_client_asks(backend, alice):
    async def scenario() -> list[list[str]]:
        communicator = socket(alice)
        await communicator.connect()
        await communicator.send_to(text_data="join chat:games")
        await communicator.receive_from()
        seen = [await names(CHAT), await names("chat:games")]
        await communicator.send_to(text_data="part chat:lobby")
        await communicator.receive_from()
        seen += [await names(CHAT), await names("chat:games")]
        await communicator.disconnect()
        seen.append(await names("chat:games"))
        return seen

    assert run(scenario) == [["alice"], ["alice"], [], ["alice"], []]


def test_a_consumer_the_server_cancels_leaves_its_rooms(backend, alice):
    async def scenario() -> tuple[list[str], list[str]]:
        communicator = socket(alice)
        await communicator.connect()
        inside = await names()
        communicator.future.cancel()  # a server shutting down cancels the application
        await communicator.wait()
        return inside, await names()

    assert run(scenario) == (["alice"], [])


class Renewals:
    """The calls of ``aenter``, counted as they come, and still made."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.real = api.aenter

    async def __call__(self, room: str, **kwargs: Any) -> bool:
        self.calls.append(room)
        return await self.real(room, **kwargs)


def test_the_mixin_renews_its_rooms_until_the_connection_closes(backend, monkeypatch, alice):
    renewals = Renewals()
    monkeypatch.setattr(api, "aenter", renewals)
    monkeypatch.setattr(Chat, "presence_renew_every", 0.01)

    async def scenario() -> asyncio.Task[None]:
        communicator = socket(alice)
        await communicator.connect()
        deadline = time.monotonic() + 10
        while len(renewals.calls) < 3 and time.monotonic() < deadline:
            await communicator.receive_nothing(0.01)
        task = Chat.made[-1]._presence_task
        assert task is not None
        await communicator.disconnect()
        return task

    task = run(scenario)

    assert renewals.calls[:3] == [CHAT] * 3  # entered, then renewed
    assert task.cancelled() or task.done()


def test_the_default_renewal_is_a_third_of_the_window(settings, monkeypatch):
    configure(settings, WINDOW=300)

    assert Chat().presence_renewal_interval() == 100.0
    monkeypatch.setattr(Chat, "presence_renew_every", 7.5)
    assert Chat().presence_renewal_interval() == 7.5


def test_the_connection_is_the_consumer_s_channel_name_with_a_channel_layer():
    consumer = Chat()
    first = consumer.get_presence_connection()
    assert first == consumer.get_presence_connection()  # made once
    assert first != Chat().get_presence_connection()

    consumer.channel_name = "specific.abc!def"
    assert consumer.get_presence_connection() == "specific.abc!def"


def test_parting_a_room_not_joined_changes_nothing(backend, alice):
    async def scenario() -> list[str]:
        communicator = socket(alice)
        await communicator.connect()
        await communicator.send_to(text_data="part chat:elsewhere")
        await communicator.receive_from()
        inside = await names()
        await communicator.disconnect()
        return inside

    assert run(scenario) == ["alice"]


def test_a_renewal_that_fails_is_logged_and_the_next_one_tried(backend, monkeypatch, caplog, alice):
    calls: list[str] = []
    real = api.aenter

    async def failing(room: str, **kwargs: Any) -> bool:
        calls.append(room)
        if len(calls) == 2:  # the first renewal
            raise RuntimeError("a bug of the site's HIDE_USER")
        return await real(room, **kwargs)

    monkeypatch.setattr(api, "aenter", failing)
    monkeypatch.setattr(Chat, "presence_renew_every", 0.01)

    async def scenario() -> None:
        communicator = socket(alice)
        await communicator.connect()
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            await communicator.receive_nothing(0.01)
        await communicator.disconnect()

    run(scenario)

    assert len(calls) >= 3  # renewed again after the failure
    assert "could not renew a connection's rooms" in caplog.text
