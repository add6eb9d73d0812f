"""Signals whos_online sends, for code of the site that reacts to presence (docs/api.md).

Defined here, importing nothing of whos_online, so that the engine that sends them and the site
that receives them import them from the same place.
"""

from __future__ import annotations

from django.dispatch import Signal

__all__ = [
    "came_online",
    "entered_room",
    "left_room",
    "users_went_offline",
    "went_offline",
]

#: Sent once per person who came online (was not online until a visit a flush wrote), with
#: ``kind`` ("users", "hidden", "guests" or "bots"), ``member`` (a user's pk as text, a guest's or
#: bot's pseudonym), ``user_id`` (the pk as the user model has it, None for a guest or bot) and
#: ``at`` (when, an aware datetime).
came_online = Signal()
#: Sent once per person who entered a room (``room``), with the arguments of ``came_online``.
entered_room = Signal()
#: Sent once per person who left a room (``room``): a page view elsewhere, their page closed (its
#: leaving word; they count there ``LEAVE_GRACE`` seconds more), a login or logout.
left_room = Signal()
#: Sent by the cleanup once per chunk of people it took off the online sets, their window run
#: out: ``kind``, ``members`` and ``user_ids`` (empty for guests and bots).
went_offline = Signal()
#: Sent by the cleanup with ``user_ids``: primary keys of the users it took off the online list
#: because they were last seen before the window. Sent once per chunk of removals.
users_went_offline = Signal()
