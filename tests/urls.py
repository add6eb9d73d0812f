from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model, login, logout
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import URLPattern, URLResolver, include, path

from whos_online.admin import OnlineUserAdminMixin
from whos_online.decorators import in_room, not_recorded


class Page:
    """A page's template, compiled by the template engine of the moment at each render: one
    compiled at import would keep the engine of whichever test imported this module first
    (one whose TEMPLATES override whos_online/online.html, say) for every test after it."""

    def __init__(self, source: str) -> None:
        self.source = source

    def render(self, context: dict[str, Any], request: HttpRequest) -> str:
        return engines["django"].from_string(self.source).render(context, request)


PAGE = Page("{% load whos_online %}<main>page</main>{% whos_online %}")
LIVE_PAGE = Page(
    '{% load whos_online %}<!DOCTYPE html><html lang="en"><head><title>live</title></head>'
    "<body><main>live</main>{% whos_online live=True visitors=True %}</body></html>"
)


TOPIC_PAGE = Page(
    '{% load whos_online %}<!DOCTYPE html><html lang="en"><head><title>topic</title></head>'
    "<body><main>topic {{ pk }}</main>{% whos_online live=True room=room %}</body></html>"
)


@in_room("topic:{pk}")
def topic(request: HttpRequest, pk: int) -> HttpResponse:
    """A forum topic: its readers are in its room, and it shows who they are, live."""
    return HttpResponse(TOPIC_PAGE.render({"pk": pk, "room": f"topic:{pk}"}, request))


THREE_WIDGETS_PAGE = Page(
    '{% load whos_online %}<!DOCTYPE html><html lang="en"><head><title>three</title></head>'
    "<body><main>topic {{ pk }}</main>"
    '<aside id="room">{% whos_online live=True here=True %}</aside>'
    '<aside id="site">{% whos_online live=True refresh=60 %}</aside>'
    '<aside id="both">{% whos_online live=True here=True site=True %}</aside></body></html>'
)


@in_room("topic:{pk}")
def three_widgets(request: HttpRequest, pk: int) -> HttpResponse:
    """A topic page with three live widgets: its room's, the site's (refreshed less often), and
    both in one."""
    return HttpResponse(THREE_WIDGETS_PAGE.render({"pk": pk}, request))


FORUM_TOPIC_PAGE = Page(
    '{% load whos_online %}<!DOCTYPE html><html lang="en"><head><title>forum topic</title>'
    '<script src="/forum-topic.js" defer></script></head>'
    "<body><main>topic {{ pk }}</main>{% whos_online live=True here=True %}</body></html>"
)
#: What a forum's topic page runs once loaded: it marks the topic read, in the background.
FORUM_TOPIC_SCRIPT = (
    'fetch(location.pathname + "read/", {method: "POST", credentials: "same-origin"})'
    '.then(function () { document.body.setAttribute("data-marked-read", ""); });'
)


SPA_PAGE = Page(
    '{% load whos_online %}<!DOCTYPE html><html lang="en"><head><title>spa</title></head>'
    '<body><main data-next-room="{{ next }}" data-next-token="{{ token }}">topic {{ pk }}</main>'
    "{% whos_online live=True here=True navigations=navigations %}</body></html>"
)


def spa_page(request: HttpRequest, pk: int, *, navigations: bool) -> HttpResponse:
    """A topic of a site whose script goes to other pages without a reload: it knows the next
    topic's room and token (as a single-page app's API would give them)."""
    import whos_online

    whos_online.set_room(request, f"topic:{pk}")
    following = f"topic:{pk + 1}"
    context = {
        "pk": pk,
        "next": following,
        "token": whos_online.room_token(following, request),
        "navigations": navigations,
    }
    return HttpResponse(SPA_PAGE.render(context, request))


def spa(request: HttpRequest, pk: int) -> HttpResponse:
    return spa_page(request, pk, navigations=False)


def spa_following(request: HttpRequest, pk: int) -> HttpResponse:
    """The same, with ``navigations=True``: the page announces its changes of address itself."""
    return spa_page(request, pk, navigations=True)


def spa_no_room(request: HttpRequest) -> HttpResponse:
    """A page of the same site in no room."""
    return HttpResponse(LIVE_PAGE.render({}, request))


def forum_topic(request: HttpRequest, pk: int) -> HttpResponse:
    """A topic page of an app the site did not write: undecorated, its room comes from
    ``ROOMS``, and its own script sends a request as soon as it has loaded."""
    return HttpResponse(FORUM_TOPIC_PAGE.render({"pk": pk}, request))


def forum_topic_script(request: HttpRequest) -> HttpResponse:
    return HttpResponse(FORUM_TOPIC_SCRIPT, content_type="text/javascript")


def mark_read(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse('{"read": true}', content_type="application/json")


def page(request: HttpRequest) -> HttpResponse:
    return HttpResponse(PAGE.render({}, request))


def live_page(request: HttpRequest) -> HttpResponse:
    return HttpResponse(LIVE_PAGE.render({}, request))


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("plain")


def log_in(request: HttpRequest, username: str) -> HttpResponse:
    login(request, get_user_model().objects.get(username=username))
    return HttpResponse("logged in")


def log_out(request: HttpRequest) -> HttpResponse:
    logout(request)
    return HttpResponse("logged out")


async def async_plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("async")


@not_recorded
def poll(request: HttpRequest) -> HttpResponse:
    return HttpResponse("poll")


@not_recorded
async def async_poll(request: HttpRequest) -> HttpResponse:
    return HttpResponse("async poll")


class UserAdmin(OnlineUserAdminMixin, auth_admin.UserAdmin):  # type: ignore [type-arg]
    """A site's own user admin, with whos_online's columns and filter."""


admin_site = admin.AdminSite(name="tests_admin")
admin_site.register(get_user_model(), UserAdmin)


urlpatterns: list[URLPattern | URLResolver] = [
    path("", page),
    path("live/", live_page),
    path("topics/<int:pk>/", topic),
    path("three/<int:pk>/", three_widgets),
    path("spa/<int:pk>/", spa),
    path("spa-following/<int:pk>/", spa_following),
    path("spa-following/", spa_no_room),
    path("forum-topics/<int:pk>/", forum_topic, name="forum-topic"),
    path("forum-topics/<int:pk>/read/", mark_read),
    path("forum-topic.js", forum_topic_script),
    path("plain/", plain),
    path("async/", async_plain),
    path("poll/", poll),
    path("async-poll/", async_poll),
    path("login/<str:username>/", log_in),
    path("logout/", log_out),
    path("static/app.css", plain),
    path("online/", include("whos_online.urls")),
    path("admin/", admin_site.urls),
]
