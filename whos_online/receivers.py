"""Receivers that keep the online list exact across logins, logouts and deleted users.

A login is recorded at once (with the process's next flush, like any recorded request) and moves
the visitor from the guests to the users; a logout moves them back at once. Neither waits for the
throttle cookie to expire.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from whos_online import api, store
from whos_online.config.settings import get_config
from whos_online.flushing import flusher
from whos_online.flushing.jobs import Job
from whos_online.reading import snapshots
from whos_online.recording import visits
from whos_online.recording.state import state_of
from whos_online.recording.throttle import recent
from whos_online.store import users
from whos_online.store.keys import former_guest_keys, user_person_key

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    from whos_online.backend.connection import Client
    from whos_online.config.settings import Config


def record_login(
    sender: object, request: HttpRequest | None, user: AbstractBaseUser, **kwargs: Any
) -> None:
    user_logged_in(user, request)


def remove_logout(
    sender: object,
    request: HttpRequest | None,
    user: AbstractBaseUser | None,
    **kwargs: Any,
) -> None:
    user_logged_out(user, request)
    # What this process last read still lists them: the next page it renders reads again.
    snapshots.invalidate()


def forget_deleted_user(sender: object, instance: AbstractBaseUser, **kwargs: Any) -> None:
    # A deleted account has nothing left to show; erase it rather than list a dangling name.
    api.forget_user(instance)


def user_logged_in(user: AbstractBaseUser, request: HttpRequest | None) -> None:
    """Record ``user``, who just logged in, with the process's next flush (at once with
    ``FLUSH_INTERVAL`` 0), taking the visitor's guest entry off in the same step: a login is a
    recorded request like any other, and waits on Redis no more."""
    config = get_config()
    now = time.time()
    former = ""
    if request is not None:
        state = state_of(request)
        state.logged_in_as = user
        former = state.guest_member(config, now)
    details = users.details(user, config)
    visits.record_soon(config, visits.user_visit(details, now, former_guest=former))
    if former:
        recent.forget(former_guest_keys(former))


def user_logged_out(
    user: AbstractBaseUser | AnonymousUser | None, request: HttpRequest | None = None
) -> None:
    """Take ``user`` off the online list at once; their last-seen record stays.

    With the logout's ``request``, the visitor goes on as a guest, in the same flush, as a login
    moves them the other way. Recording them here rather than on their next request matters when
    another process served their earlier guest visits: that process still remembers the guest as
    recorded and would skip the write. Without a guest to record, the user's removal is a job
    for the flusher (``flush_jobs``), as is taking them off the layouts of another ``SHARDS``
    that the site's processes have written in, which a switch back would show again. Either way
    the request waits on nothing (with ``FLUSH_INTERVAL`` 0, it writes as it always did).
    """
    if request is not None:
        from django.contrib.auth.models import AnonymousUser

        state_of(request).logged_in_as = AnonymousUser()
    if user is None or not user.is_authenticated:
        return
    pk = users.pk_text(user)
    recent.forget([user_person_key(pk)])
    flusher.current().forget([user_person_key(pk)])
    config = get_config()
    now = time.time()
    guest = None if request is None else state_of(request).guest(config, now)
    if guest is None:
        flusher.current().add_job(
            Job(
                lambda client, config: store.presence.remove_user(client, config, pk, now=now),
                store.keys.user_shard(config, pk),
            )
        )
    if config.shards != 1 or flusher.current().may_hold_other_layouts():
        flusher.current().add_job(
            Job(lambda client, config: _leave_other_layouts(client, config, pk, now))
        )
    if guest is None:
        flusher.after_recording(config)
    else:
        kind, member = guest
        visits.record_soon(config, visits.member_visit(kind, member, now, former_user=pk))


def _leave_other_layouts(client: Client, config: Config, pk: str, now: float) -> None:
    """Take the user off the layouts of another ``SHARDS`` that may hold them (a site that
    changed it, whose processes each register the layout they write in): a switch back would
    otherwise show them online again. The caller skips it on a site that never changed it, as
    the process's flushes tell."""
    for shards in store.keys.layouts_known(client, config)[1:]:
        store.presence.remove_user(client, config, pk, now=now, shards=shards)
