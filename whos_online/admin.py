"""Who is online, in a site's own user admin: columns and a filter for its ``UserAdmin``.

A mixin for the site's ``UserAdmin`` rather than an admin of its own, since a site has one
already (docs/admin-and-metrics.md). The columns read Redis once per changelist page and fail
open: if Redis cannot be read, nobody is online.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Final

from django.contrib import admin
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.timesince import timesince
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from whos_online import api

if TYPE_CHECKING:
    from django.contrib.admin.views.main import ChangeList
    from django.db.models import Model, QuerySet
    from django.http import HttpRequest
    from django.utils.safestring import SafeString

#: Where the changelist leaves each row's presence for the columns to read.
PRESENCE_ATTRIBUTE: Final = "_whos_online_presence"
#: Most users the "online now" filter looks for. Reading who is online costs Redis time in
#: proportion to how many are asked for; a site with more users online than this at once
#: sees the newest of them.
FILTER_LIMIT: Final = 10_000


class OnlineNowFilter(admin.SimpleListFilter):
    title = _("online now")
    parameter_name = "online_now"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, Any]]:
        return [("yes", _("Yes")), ("no", _("No"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() not in {"yes", "no"}:
            return queryset
        online = api.online_user_pks(FILTER_LIMIT) or []  # None: Redis failed, nobody is known
        if self.value() == "yes":
            return queryset.filter(pk__in=online)
        return queryset.exclude(pk__in=online)


if TYPE_CHECKING:
    UserModelAdmin = admin.ModelAdmin[Any]
else:  # ModelAdmin takes no type parameter at run time (django-stubs gives it one)
    UserModelAdmin = admin.ModelAdmin


class OnlineUserAdminMixin(UserModelAdmin):
    """Adds "online now" and "last seen" columns, and an "online now" filter, to a user admin.

    Put it before the admin it extends (``class UserAdmin(OnlineUserAdminMixin,
    auth_admin.UserAdmin)``); the columns come after that admin's own ``list_display``, the
    filter after its ``list_filter``. Their headings wrap (``admin.css``), and the last-seen
    column says how long ago, so that they fit beside Django's own ``UserAdmin`` columns on a
    laptop's screen.
    """

    class Media:
        css: ClassVar = {"all": ("whos_online/admin.css",)}

    def get_list_display(self, request: HttpRequest) -> tuple[Any, ...]:
        return (*super().get_list_display(request), "online_now", "last_seen")

    def get_list_filter(self, request: HttpRequest) -> tuple[Any, ...]:
        return (*super().get_list_filter(request), OnlineNowFilter)

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)
        found = api.presence(rows)
        for user in rows:
            setattr(user, PRESENCE_ATTRIBUTE, found[user.pk])
        return changelist

    @admin.display(description=_("online now"), boolean=True)
    def online_now(self, user: Model) -> bool:
        return _presence_of(user).online

    @admin.display(description=_("last seen"))
    def last_seen(self, user: Model) -> SafeString | None:
        """How long ago, as the dashboard says it ("just now", "3 hours ago"), with the time in
        full as the ``<time>`` element's title: short enough for the column to fit."""
        seen = _presence_of(user).last_seen
        if seen is None:
            return None
        now = timezone.now()
        if now - seen < timedelta(minutes=1):
            ago = gettext("just now")
        else:
            ago = gettext("%(ago)s ago") % {"ago": timesince(seen, now, depth=1)}
        full = formats.date_format(timezone.localtime(seen), "DATETIME_FORMAT")
        return format_html('<time datetime="{}" title="{}">{}</time>', seen.isoformat(), full, ago)


def _presence_of(user: Model) -> api.Presence:
    found: api.Presence | None = getattr(user, PRESENCE_ATTRIBUTE, None)
    if found is None:
        # Shown outside a changelist (say, as a read-only field of the change form): one read.
        found = api.presence([user])[user.pk]
    return found
