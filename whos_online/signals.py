"""Signals whos_online sends, for code of the site that reacts to presence."""

from __future__ import annotations

from django.dispatch import Signal

#: Sent by the cleanup (``prune``) with ``user_ids``: primary keys of the users it took off the
#: online list because they were last seen before the window. Sent once per chunk of removals.
users_went_offline = Signal()
