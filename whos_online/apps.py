from __future__ import annotations

import atexit
import logging
from typing import TYPE_CHECKING

from django.apps import AppConfig
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.core.checks import Tags, register
from django.db.models.signals import post_delete

if TYPE_CHECKING:
    from collections.abc import Sequence

logger = logging.getLogger("whos_online")


class WhosOnlineConfig(AppConfig):
    name = "whos_online"
    verbose_name = "Who's online"

    def ready(self) -> None:
        from whos_online import checks, receivers
        from whos_online.config import process
        from whos_online.flushing import stopping

        register(Tags.compatibility)(checks.check_settings)
        register(Tags.compatibility)(checks.check_middleware)
        register(Tags.urls)(checks.check_room_urls)
        register(Tags.compatibility, deploy=True)(checks.check_cleanup_runs)
        register(Tags.compatibility, deploy=True)(checks.check_own_database)
        register(Tags.compatibility, deploy=True)(checks.check_redis_reachable)
        user_logged_in.connect(receivers.record_login, dispatch_uid="whos_online.record_login")
        user_logged_out.connect(receivers.remove_logout, dispatch_uid="whos_online.remove_logout")
        post_delete.connect(
            receivers.forget_deleted_user,
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
    from whos_online.backend import connection, keyspace

    for prefix in prefixes:
        try:
            removed = keyspace.remove_prefix(connection.request_client(), prefix)
        except connection.REDIS_ERRORS as error:
            logger.warning(
                "whos_online could not remove the keys of this test process (%s): %s. "
                "Remove them with: redis-cli --scan --pattern '%s' | xargs redis-cli unlink",
                prefix,
                error,
                keyspace.prefix_pattern(prefix),
            )
        else:
            logger.debug("whos_online removed %d keys of this test process (%s)", removed, prefix)
