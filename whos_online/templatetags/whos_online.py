"""``{% whos_online %}``, ``{% online_count %}`` and ``{% last_seen user %}``.

Thin wrappers over the API. A page that uses several of them reads Redis once: the snapshot is
kept on the request for the rest of the render.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import template
from django.template.base import render_value_in_context
from django.utils.translation import ngettext

from whos_online import api, store
from whos_online.conf import get_config

if TYPE_CHECKING:
    from datetime import datetime

register = template.Library()

_SNAPSHOT_ATTRIBUTE = "_whos_online_snapshot"


def _snapshot(context: template.Context) -> store.Snapshot:
    request = context.get("request")
    cached = getattr(request, _SNAPSHOT_ATTRIBUTE, None)
    if isinstance(cached, store.Snapshot):
        return cached
    found = api.snapshot(get_config().display_limit)
    if found is None:
        # Fail open; not cached, so that the next render can show Redis again once it is back.
        return store.EMPTY_SNAPSHOT
    if request is not None:
        setattr(request, _SNAPSHOT_ATTRIBUTE, found)
    return found


@register.inclusion_tag("whos_online/online.html", takes_context=True)
def whos_online(
    context: template.Context, *, peak: bool = True, visitors: bool = False
) -> dict[str, Any]:
    """Render "Who's online: alice, bob, 3 more and 12 guests" (hidden users are not named).

    ``peak=False`` leaves out "Most people ever online was N on DATE"; ``visitors=True`` adds
    today's unique visitors. Both come from the same single read as the names.
    """
    found = _snapshot(context)
    users = api.listed_users(found)
    more = max(found.visible - len(users), 0)
    counts = api.counts_of(found)
    parts: list[tuple[api.OnlineUser | None, str]] = [(user, "") for user in users]
    if more:
        parts.append((None, ngettext("%(count)d more", "%(count)d more", more) % {"count": more}))
    if counts.guests:
        parts.append(
            (
                None,
                ngettext("%(count)d guest", "%(count)d guests", counts.guests)
                % {"count": counts.guests},
            )
        )
    if counts.bots:
        parts.append(
            (
                None,
                ngettext("%(count)d bot", "%(count)d bots", counts.bots) % {"count": counts.bots},
            )
        )
    return {
        "users": users,
        "more": more,
        "counts": counts,
        "parts": parts,
        "peak": api.peak_of(found) if peak else None,
        "visitors": found.visitors if visitors else None,
    }


@register.simple_tag(takes_context=True)
def online_count(context: template.Context, kind: str = "total") -> int:
    """How many are online: ``total`` (users and guests), ``users``, ``guests`` or ``bots``."""
    counts = api.counts_of(_snapshot(context))
    if kind not in counts._fields:
        msg = f"online_count takes one of {', '.join(counts._fields)}, not {kind!r}."
        raise template.TemplateSyntaxError(msg)
    return int(getattr(counts, kind))


class LastSeenNode(template.Node):
    def __init__(self, user: template.base.FilterExpression, target: str | None) -> None:
        self.user = user
        self.target = target

    def render(self, context: template.Context) -> str:
        user = self.user.resolve(context)
        seen: datetime | None = None
        if user is not None and getattr(user, "is_authenticated", False):
            seen = api.last_seen(user)
        if self.target is not None:
            context[self.target] = seen
            return ""
        # Rendered like {{ value }}: in the current time zone, format and language.
        return "" if seen is None else render_value_in_context(seen, context)


@register.tag
def last_seen(parser: template.base.Parser, token: template.base.Token) -> LastSeenNode:
    """``{% last_seen user %}`` renders when the user was last seen (or nothing);
    ``{% last_seen user as seen %}`` stores the aware datetime, or None, in ``seen``."""
    bits = token.split_contents()
    if len(bits) == 2:
        return LastSeenNode(parser.compile_filter(bits[1]), None)
    if len(bits) == 4 and bits[2] == "as":
        return LastSeenNode(parser.compile_filter(bits[1]), bits[3])
    msg = f"{bits[0]} takes a user, optionally followed by 'as name'."
    raise template.TemplateSyntaxError(msg)
