"""The chat's WebSocket: whoever holds a socket open is in the chat's room, however many tabs
they have open and whatever page they read meanwhile (``whos_online.channels.PresenceMixin``)."""

from __future__ import annotations

import json
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer

from whos_online.channels import PresenceMixin


class ChatConsumer(PresenceMixin, AsyncWebsocketConsumer):  # type: ignore [misc]
    """Relays each message to everyone in the chat (through the channel layer's group of the
    chat); its person is in the room ``chat:<name>`` while the socket is open."""

    def get_presence_rooms(self) -> list[str]:
        return [f"chat:{self.chat_name()}"]

    def chat_name(self) -> str:
        return str(self.scope["url_route"]["kwargs"]["name"])

    def group(self) -> str:
        return f"chat.{self.chat_name()}"

    async def connect(self) -> None:
        await self.channel_layer.group_add(self.group(), self.channel_name)
        await self.accept()  # the mixin enters the room here

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(self.group(), self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        text = (text_data or "").strip()[:500]
        if not text:
            return
        user = self.scope.get("user")
        author = user.get_username() if user is not None and user.is_authenticated else "a guest"
        await self.channel_layer.group_send(
            self.group(), {"type": "chat.message", "author": author, "text": text}
        )

    async def chat_message(self, event: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps({"author": event["author"], "text": event["text"]}))
