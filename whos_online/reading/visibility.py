"""Who may see names in the JSON view and the live widget (``SHOW_NAMES_TO``).

Deciding must not load the session when that can be avoided: reading ``request.user`` reads the
session, which makes ``SessionMiddleware`` add ``Vary: Cookie`` to the response, and a response
that varies on the cookie is one that a CDN cannot share between visitors. So the user is looked
at only when the request carries the session cookie (without it, the visitor is anonymous for
every session-based login), and never when names are shown to everyone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    from whos_online.config.settings import Config

    AnyUser = AbstractBaseUser | AnonymousUser


def may_see_names(request: HttpRequest | None, config: Config) -> bool:
    rule = config.show_names_to
    if rule is None:
        return True
    if request is None or settings.SESSION_COOKIE_NAME not in request.COOKIES:
        # Anonymous for every session-based login; the rule is asked about an AnonymousUser,
        # which reads no session (a rule of the site's own may admit anonymous visitors).
        from django.contrib.auth.models import AnonymousUser

        return bool(rule(AnonymousUser()))
    user = getattr(request, "user", None)
    return user is not None and bool(rule(user))


def shows_names_to(user: AnyUser, config: Config) -> bool:
    """Whether ``SHOW_NAMES_TO`` lets ``user`` see names, for a view that authenticated them
    itself (an API's token, which the JSON view cannot know)."""
    rule = config.show_names_to
    return rule is None or bool(rule(user))


def shows_names_to_everyone(config: Config) -> bool:
    """Whether every viewer gets the same names, so that an answer with names may be shared."""
    return config.show_names_to is None
