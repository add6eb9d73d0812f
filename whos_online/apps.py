"""The app: its system checks, the receivers that keep the online list exact across logins,
logouts and deleted users (neither waits for a throttle cookie to run out), and what a process
does as it ends.
"""

from __future__ import annotations

import atexit
import logging
import time
from typing import TYPE_CHECKING, Any

from django.apps import AppConfig
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.core.checks import Tags, register
from django.db.models.signals import post_delete

from whos_online import api
from whos_online.backend import keyspace
from whos_online.backend.keyspace import former_guest_keys, user_person_key
from whos_online.config.settings import get_config
from whos_online.flushing import flusher
from whos_online.flushing.queue import Job
from whos_online.reading import snapshots
from whos_online.recording import visits
from whos_online.recording.state import state_of
from whos_online.recording.throttle import recent
from whos_online.store import users

if TYPE_CHECKING:
    from collections.abc import Sequence

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config


logger = logging.getLogger("whos_online")


class WhosOnlineConfig(AppConfig):
    name = "whos_online"
    verbose_name = "Who's online"

    def ready(self) -> None:
        from whos_online import checks
        from whos_online.config import process
        from whos_online.flushing import stopping

        register(Tags.compatibility)(checks.check_settings)
        register(Tags.compatibility)(checks.check_middleware)
        register(Tags.urls)(checks.check_room_urls)
        register(Tags.compatibility, deploy=True)(checks.check_cleanup_runs)
        register(Tags.compatibility, deploy=True)(checks.check_own_database)
        register(Tags.compatibility, deploy=True)(checks.check_redis_reachable)
        user_logged_in.connect(record_login, dispatch_uid="whos_online.record_login")
        user_logged_out.connect(remove_logout, dispatch_uid="whos_online.remove_logout")
        post_delete.connect(
            forget_deleted_user,
            sender=get_user_model(),
            dispatch_uid="whos_online.forget_deleted_user",
        )
        # A test process removes the keys it wrote under its own prefix as it ends.
        process.test_run_ended.connect(
            remove_test_keys, dispatch_uid="whos_online.remove_test_keys"
        )
        # Queued visits and buffered page hits are written when the process exits normally
        # (atexit, which a forked gunicorn worker inherits); a process that multiprocessing
        # started registers a finalizer of its own when it first queues something, since it
        # ends with os._exit (whos_online.flushing.flusher). A process that SIGTERM ends by its
        # default action (a pool's workers, uvicorn's processes, which raise it again once they
        # have shut down) runs neither: the handler installed here writes first, whatever the
        # server and whether or not the process has recorded yet (whos_online.flushing.stopping).
        atexit.register(stopping.flush_at_exit)
        stopping.install_signal_handler()


def remove_test_keys(*, prefixes: Sequence[str], **kwargs: object) -> None:
    """Receives ``process.test_run_ended``: removes the keys of a test process's prefixes from
    its Redis (as the settings name it as it ends). A Redis that cannot be reached leaves them,
    and the log says how to remove them by hand."""
    from whos_online.backend import clients, keyspace

    for prefix in prefixes:
        try:
            removed = keyspace.remove_prefix(clients.request_client(), prefix)
        except clients.REDIS_ERRORS as error:
            logger.warning(
                "whos_online could not remove the keys of this test process (%s): %s. "
                "Remove them with: redis-cli --scan --pattern '%s' | xargs redis-cli unlink",
                prefix,
                error,
                keyspace.prefix_pattern(prefix),
            )
        else:
            logger.debug("whos_online removed %d keys of this test process (%s)", removed, prefix)


def record_login(
    sender: object, request: HttpRequest | None, user: AbstractBaseUser, **kwargs: Any
) -> None:
    """Receives ``user_logged_in``: records ``user`` with the process's next flush (at once with
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
        recent().forget(former_guest_keys(former))


def remove_logout(
    sender: object,
    request: HttpRequest | None,
    user: AbstractBaseUser | AnonymousUser | None,
    **kwargs: Any,
) -> None:
    """Receives ``user_logged_out``: takes ``user`` off the online list at once; their last-seen
    record stays.

    With the logout's ``request``, the visitor goes on as a guest, in the same flush, as a login
    moves them the other way. Recording them here rather than on their next request matters when
    another process served their earlier guest visits: that process still remembers the guest as
    recorded and would skip the write. Without a guest to record, the user's removal is a job
    for the flusher (``flush_jobs``), as is taking them off the layouts of another ``SHARDS``
    that the site's processes have written in, which a switch back would show again. Either way
    the request waits on nothing (with ``FLUSH_INTERVAL`` 0, it writes as it always did). What
    this process last read still lists them: the next page it renders reads again.
    """
    if request is not None:
        from django.contrib.auth.models import AnonymousUser

        state_of(request).logged_in_as = AnonymousUser()
    snapshots.invalidate()
    if user is None or not user.is_authenticated:
        return
    pk = users.pk_text(user)
    recent().forget([user_person_key(pk)])
    flusher.current().forget([user_person_key(pk)])
    config = get_config()
    now = time.time()
    guest = None if request is None else state_of(request).guest(config, now)
    if guest is None:
        flusher.current().add_job(
            Job(
                lambda client, config: users.remove_user(client, config, pk, now=now),
                keyspace.user_shard(config, pk),
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


def forget_deleted_user(sender: object, instance: AbstractBaseUser, **kwargs: Any) -> None:
    """Receives ``post_delete`` of a user: a deleted account has nothing left to show; it is
    erased rather than listed as a dangling name."""
    api.forget_user(instance)


def _leave_other_layouts(client: Client, config: Config, pk: str, now: float) -> None:
    """Take the user off the layouts of another ``SHARDS`` that may hold them (a site that
    changed it, whose processes each register the layout they write in): a switch back would
    otherwise show them online again. The caller skips it on a site that never changed it, as
    the process's flushes tell."""
    for shards in keyspace.layouts_known(client, config)[1:]:
        users.remove_user(client, config, pk, now=now, shards=shards)
