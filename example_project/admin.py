"""The site's user admin, with whos_online's "online now" and "last seen" columns and filter."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model

from whos_online.admin import OnlineUserAdminMixin

User = get_user_model()

admin.site.unregister(User)


@admin.register(User)
class UserAdmin(OnlineUserAdminMixin, auth_admin.UserAdmin):  # type: ignore [type-arg]
    pass
