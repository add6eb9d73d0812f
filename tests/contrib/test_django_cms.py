"""``whos_online.contrib.django_cms`` on a real django CMS 5 site: pages as rooms, private pages
left out, and an editor in edit mode or preview counted in the page's room, once.

The site runs in a process of its own (django CMS in ``INSTALLED_APPS``, its middleware, its
URLs, a database in memory, the session's real redis-server), so that nothing of it leaks into
the test settings. The script prints what it saw as JSON; each test reads one part of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import coverage
import pytest
import redis

pytest.importorskip("cms", reason="django CMS is a test dependency")

ROOT = Path(__file__).resolve().parent.parent.parent

SCRIPT = r"""
import json
import os
import sys
import types

import django
from django.conf import settings

from whos_online.contrib import django_cms

PAGE = (
    "{% load cms_tags sekizai_tags whos_online %}<!DOCTYPE html><html><head>"
    "<title>{% page_attribute 'page_title' %}</title>{% render_block 'css' %}</head>"
    "<body>{% cms_toolbar %}<main>{% placeholder 'content' %}</main>"
    "{% whos_online here=True peak=False %}{% render_block 'js' %}</body></html>"
)
urls = types.ModuleType("cms_site_urls")
sys.modules["cms_site_urls"] = urls
settings.configure(
    SECRET_KEY="a django CMS site for the tests",
    ALLOWED_HOSTS=["testserver"],
    SITE_ID=1,
    INSTALLED_APPS=[
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "django.contrib.staticfiles",
        "django.contrib.sites",
        "cms",
        "menus",
        "treebeard",
        "sekizai",
        "whos_online",
    ],
    MIDDLEWARE=[
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.locale.LocaleMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
        "whos_online.middleware.WhosOnlineMiddleware",
        "cms.middleware.user.CurrentUserMiddleware",
        "cms.middleware.page.CurrentPageMiddleware",
        "cms.middleware.toolbar.ToolbarMiddleware",
        "cms.middleware.language.LanguageCookieMiddleware",
    ],
    ROOT_URLCONF="cms_site_urls",
    TEMPLATES=[
        {
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "OPTIONS": {
                "loaders": [
                    ("django.template.loaders.locmem.Loader", {"page.html": PAGE}),
                    "django.template.loaders.app_directories.Loader",
                ],
                "context_processors": [
                    "django.template.context_processors.request",
                    "django.contrib.auth.context_processors.auth",
                    "django.contrib.messages.context_processors.messages",
                    "django.template.context_processors.i18n",
                    "sekizai.context_processors.sekizai",
                    "cms.context_processors.cms_settings",
                ],
            },
        }
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    LANGUAGE_CODE="en",
    LANGUAGES=[("en", "English")],
    USE_TZ=True,
    STATIC_URL="/static/",
    DEFAULT_AUTO_FIELD="django.db.models.AutoField",
    CMS_TEMPLATES=[("page.html", "Page")],
    CMS_CONFIRM_VERSION4=True,
    CMS_PERMISSION=True,
    LOGIN_URL="admin:login",
    WHOS_ONLINE={"REDIS_URL": os.environ["REDIS_URL"], "ROOMS": django_cms.ROOMS},
)
django.setup()

from django.contrib import admin
from django.contrib.auth.models import AnonymousUser, Group, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import transaction
from django.test import Client, RequestFactory
from django.test.utils import override_settings
from django.urls import include, path, resolve

urls.urlpatterns = [
    path("admin/", admin.site.urls),
    path("online/", include("whos_online.urls")),
    path("", include("cms.urls")),
]

from cms.api import create_page
from cms.models import PageContent, PagePermission
from cms.utils.urlutils import admin_reverse

import whos_online
from whos_online.checks import check_room_urls
from whos_online.config.settings import get_config
from whos_online.store import snapshot
from whos_online.backend.clients import admin_client

call_command("migrate", verbosity=0)
home = create_page("Home", "page.html", "en")
with transaction.atomic():
    home.set_as_homepage()
about = create_page("About us", "page.html", "en", slug="about")
members = create_page("Members", "page.html", "en", slug="members", login_required=True)
secret = create_page("Secret", "page.html", "en", slug="secret")
insiders = Group.objects.create(name="insiders")
PagePermission.objects.create(page=secret, group=insiders, can_view=True)
member = User.objects.create_user("member")
insider = User.objects.create_user("insider")
insider.groups.add(insiders)
editor = User.objects.create_superuser("editor")

PAGE_VIEW = {"HTTP_SEC_FETCH_DEST": "document", "HTTP_SEC_FETCH_MODE": "navigate"}
seen = {}


def room(page):
    return list(whos_online.online_counts(room=f"page:{page.pk}"))


def browser(address, user=None):
    client = Client(REMOTE_ADDR=address)
    if user is not None:
        client.force_login(user)
    return client


def check_messages(rooms):
    with override_settings(WHOS_ONLINE={**settings.WHOS_ONLINE, "ROOMS": rooms}):
        return [message.id for message in check_room_urls()]


seen["checks"] = check_messages(django_cms.ROOMS)
seen["checks_by_position"] = check_messages({"pages-details-by-slug": "page:{0}"})
seen["checks_by_keyword"] = check_messages(
    {"pages-details-by-slug": "page:{slug}", "pages-root": "page:{slug}"}
)

guest = browser("192.0.2.1")
seen["guest_about"] = [guest.get("/about/", **PAGE_VIEW).status_code, room(about)]
seen["title"] = snapshot.room_titles(admin_client(), get_config(), [f"page:{about.pk}"])
seen["guest_home"] = [guest.get("/", **PAGE_VIEW).status_code, room(home), room(about)]
answer = guest.get("/members/", **PAGE_VIEW)
seen["guest_members"] = [answer.status_code, answer["Location"], room(members), room(home)]

logged_in = browser("192.0.2.2", member)
seen["member_members"] = [logged_in.get("/members/", **PAGE_VIEW).status_code, room(members)]
seen["member_secret"] = [logged_in.get("/secret/", **PAGE_VIEW).status_code, room(secret)]
seen["insider_secret"] = [
    browser("192.0.2.3", insider).get("/secret/", **PAGE_VIEW).status_code,
    room(secret),
]

content = about.get_content_obj("en")
content_type = ContentType.objects.get_for_model(PageContent)
ids = (content_type.pk, content.pk)
editing = browser("192.0.2.4", editor)
edit = admin_reverse("cms_placeholder_render_object_edit", args=ids)
preview = admin_reverse("cms_placeholder_render_object_preview", args=ids)
seen["editor_edit"] = [edit, editing.get(edit, **PAGE_VIEW).status_code, room(about)]
seen["editor_preview"] = [preview, editing.get(preview, **PAGE_VIEW).status_code, room(about)]
seen["site"] = list(whos_online.online_counts())
readers = whos_online.online_users(room=f"page:{about.pk}")
seen["about_readers"] = sorted(user.name for user in readers)

# The function itself, on requests the CMS's view did not answer with a redirect or a 404.
def asked(path, user, page, *, resolved=True):
    request = RequestFactory().get(path)
    if user is not None:
        request.user = user
    request.resolver_match = resolve(path) if resolved else None
    if page is not None:
        request.current_page = page
    return django_cms.page_room(request)


seen["function"] = {
    "about": asked("/about/", AnonymousUser(), about),
    "members_anonymous": asked("/members/", AnonymousUser(), members),
    "members_member": asked("/members/", member, members),
    "secret_member": asked("/secret/", member, secret),
    "secret_insider": asked("/secret/", insider, secret),
    "no_page": asked("/nowhere/", AnonymousUser(), None),
    # Served from the CMS's page cache, on a site without its CurrentPageMiddleware.
    "cached_about": asked("/about/", AnonymousUser(), None),
    "unresolved": asked("/about/", AnonymousUser(), about, resolved=False),
    "no_user": asked("/about/", None, about),
    "edit_of_no_type": asked(
        admin_reverse("cms_placeholder_render_object_edit", args=(99999, content.pk)),
        editor,
        None,
    ),
    "edit": asked(edit, editor, None),
    "edit_of_no_page": asked(
        admin_reverse(
            "cms_placeholder_render_object_edit",
            args=(ContentType.objects.get_for_model(User).pk, editor.pk),
        ),
        editor,
        None,
    ),
}
seen["ids"] = {"home": home.pk, "about": about.pk, "members": members.pk, "secret": secret.pk}
print(json.dumps(seen))
"""


def measured() -> dict[str, str]:
    """What has the site's process measure its coverage as this one does, if it does: the same
    configuration, and a data file of its own that the run combines with the others."""
    if (
        coverage.Coverage.current() is None
    ):  # pragma: no cover - a run that measures coverage never comes here
        return {}
    return {"COVERAGE_PROCESS_START": str(ROOT / "pyproject.toml")}


@pytest.fixture(scope="module")
def site(real_redis_url: str) -> dict[str, Any]:
    """What the django CMS site saw, run once for this module's tests."""
    redis.Redis.from_url(real_redis_url).flushdb()
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={**os.environ, "REDIS_URL": real_redis_url, **measured()},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    seen: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


GUEST = [0, 1, 0, 1]
USER = [1, 0, 0, 1]
NOBODY = [0, 0, 0, 0]

pytestmark = pytest.mark.slow


def test_the_rooms_setting_fits_django_cms_s_urls(site):
    assert site["checks"] == []


def test_django_cms_captures_the_page_s_path_by_keyword_not_by_position(site):
    assert site["checks_by_position"] == ["whos_online.E032"]
    assert site["checks_by_keyword"] == []


def test_a_page_is_a_room_named_by_its_key_and_titled_by_its_title(site):
    about = site["ids"]["about"]
    assert site["guest_about"] == [200, GUEST]
    assert site["title"] == {f"page:{about}": "About us"}
    assert site["guest_home"] == [200, GUEST, NOBODY]  # the home page too; the guest moved


def test_a_page_that_needs_a_login_sends_a_guest_to_login_url_and_no_room(site):
    status, location, members, home = site["guest_members"]
    assert (status, location) == (302, "/admin/login/?next=/members/")
    assert members == NOBODY
    assert home == GUEST  # a redirect moves nobody
    assert site["member_members"] == [200, USER]


def test_a_page_its_viewer_may_not_see_is_no_room_of_theirs(site):
    assert site["member_secret"] == [404, NOBODY]
    assert site["insider_secret"] == [200, USER]


def test_an_editor_in_edit_mode_and_in_preview_is_in_the_page_s_room_once(site):
    about = site["ids"]["about"]
    edit, status, readers = site["editor_edit"]
    assert "/edit/" in edit
    assert (status, readers) == (200, USER)
    preview, status, readers = site["editor_preview"]
    assert "/preview/" in preview
    assert (status, readers) == (200, USER)
    assert site["about_readers"] == ["editor"]
    assert site["site"] == [3, 1, 0, 4]  # the member, the insider, the editor; the guest
    assert site["function"]["edit"] == [f"page:{about}", "About us"]


def test_the_function_respects_login_and_view_restrictions_whatever_the_response(site):
    ids = site["ids"]
    function = site["function"]
    assert function["about"] == [f"page:{ids['about']}", "About us"]
    assert function["members_anonymous"] is None
    assert function["members_member"] == [f"page:{ids['members']}", "Members"]
    assert function["secret_member"] is None
    assert function["secret_insider"] == [f"page:{ids['secret']}", "Secret"]
    assert function["no_page"] is None
    assert function["cached_about"] == [f"page:{ids['about']}", "About us"]
    assert function["unresolved"] is None
    assert function["no_user"] is None
    assert function["edit_of_no_page"] is None
    assert function["edit_of_no_type"] is None
