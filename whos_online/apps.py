from __future__ import annotations

import atexit
import multiprocessing.util

from django.apps import AppConfig
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.core.checks import Tags, register
from django.db.models.signals import post_delete


class WhosOnlineConfig(AppConfig):
    name = "whos_online"
    verbose_name = "Who's online"

    def ready(self) -> None:
        from whos_online import checks, receivers, stopping

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
        # Queued visits and buffered page hits are written when the process exits normally. A
        # process that multiprocessing started ends with os._exit once its finalizers have run,
        # skipping atexit: a finalizer writes them there. (uvicorn's processes, single or
        # --workers, end on their own re-raised SIGTERM, which neither survives: the middleware
        # writes from that SIGTERM on instead; see whos_online.stopping.)
        atexit.register(stopping.flush_at_exit)
        multiprocessing.util.Finalize(None, stopping.flush_at_exit, exitpriority=10)
