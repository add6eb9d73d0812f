from __future__ import annotations

import time
from datetime import datetime, timezone
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.template import Context, Template, TemplateSyntaxError
from django.test import RequestFactory
from django.utils.functional import SimpleLazyObject

import whos_online
from tests.support.helpers import configure, override_widget_template, render, widget_text

TAG = "{% load whos_online %}{% whos_online %}"


def _users(*names: str) -> list[User]:
    """Create users and record them online, the last one newest."""
    now = time.time()
    users = []
    for age, name in enumerate(reversed(names)):
        user = User.objects.create_user(name)
        whos_online.record_user(user, now=now - 10 - age)
        users.append(user)
    return users[::-1]


def _guests(count: int, *, bot: bool = False) -> None:
    for index in range(count):
        whos_online.record_guest(f"198.51.100.{index + 1}", bot=bot)


# {% whos_online %}


def test_nobody_online(backend):
    markup = render(TAG)

    assert widget_text(markup) == "Who's online: nobody"
    assert 'data-users="0" data-guests="0" data-bots="0" data-total="0"' in markup


def test_user_and_guests(backend, db):
    _users("alice")
    _guests(2)

    markup = render(TAG)

    assert widget_text(markup) == "Who's online: alice and 2 guests"
    assert 'data-users="1" data-guests="2" data-bots="0" data-total="3"' in markup
    assert '<span class="whos-online-user" dir="auto">alice</span>' in markup


@pytest.mark.parametrize(
    ("guests", "expected"),
    [(1, "Who's online: 1 guest"), (3, "Who's online: 3 guests")],
)
def test_guests_only(backend, guests, expected):
    _guests(guests)

    assert widget_text(render(TAG)) == expected


def test_names_newest_first(backend, db):
    _users("alice", "bob", "carol")

    assert widget_text(render(TAG)) == "Who's online: carol, bob and alice"


def test_names_guests_and_bots(backend, db):
    _users("alice", "bob")
    _guests(2)
    _guests(1, bot=True)

    assert widget_text(render(TAG)) == "Who's online: bob, alice, 2 guests and 1 bot"


@pytest.mark.parametrize(
    ("bots", "expected"), [(1, "Who's online: 1 bot"), (2, "Who's online: 2 bots")]
)
def test_bots_are_shown_apart(backend, bots, expected):
    _guests(bots, bot=True)

    markup = render(TAG)

    assert widget_text(markup) == expected
    assert f'data-bots="{bots}" data-total="0"' in markup


def test_display_limit_adds_n_more(backend, settings, db):
    configure(settings, DISPLAY_LIMIT=2)
    _users("alice", "bob", "carol", "dave")

    assert widget_text(render(TAG)) == "Who's online: dave, carol and 2 more"

    _guests(1)
    assert widget_text(render(TAG)) == "Who's online: dave, carol, 2 more and 1 guest"


def test_display_limit_zero_names_nobody(backend, settings, db):
    configure(settings, DISPLAY_LIMIT=0)
    _users("alice", "bob")

    assert widget_text(render(TAG)) == "Who's online: 2 more"


def test_hidden_users_are_counted_not_named(backend, settings, db):
    configure(settings, HIDE_USER="tests.support.helpers.hide_bob", DISPLAY_LIMIT=1)
    _users("alice", "bob", "carol")
    _guests(1)

    markup = render(TAG)

    assert widget_text(markup) == "Who's online: carol, 1 more and 1 guest"
    assert "bob" not in markup
    assert 'data-users="3" data-guests="1" data-bots="0" data-total="4"' in markup


@pytest.mark.parametrize(
    ("names", "expected"),
    [(["bob"], "Who's online: 1 person"), (["bob", "bobby"], "Who's online: 2 people")],
)
def test_only_hidden_users(backend, settings, db, names, expected):
    configure(settings, HIDE_USER=lambda user: True)
    _users(*names)

    markup = render(TAG)

    assert widget_text(markup) == expected
    assert f'data-total="{len(names)}"' in markup


def test_names_are_escaped(backend, alice):
    alice.username = "<script>alert('x')</script> & co"
    whos_online.record_user(alice)

    markup = render(TAG)

    assert "<script>" not in markup
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; co" in markup
    assert widget_text(markup) == "Who's online: <script>alert('x')</script> & co"


def test_unicode_names_are_rendered_as_they_are(backend, alice, bob):
    alice.username = "Zoë 👩\u200d💻"
    bob.username = "مرحبا"
    whos_online.record_user(alice, now=time.time() - 20)
    whos_online.record_user(bob, now=time.time() - 10)

    assert widget_text(render(TAG)) == "Who's online: مرحبا and Zoë 👩\u200d💻"


def test_user_with_a_profile_gets_a_link(backend, monkeypatch, alice, bob):
    monkeypatch.setattr(User, "get_absolute_url", lambda self: f"/people/{self.pk}/", raising=False)
    whos_online.record_user(alice)

    markup = render(TAG)

    assert f'<a class="whos-online-user" href="/people/{alice.pk}/" dir="auto">alice</a>' in markup


def test_profile_url_is_escaped(backend, monkeypatch, alice):
    monkeypatch.setattr(User, "get_absolute_url", lambda self: '/people/?a=1&b="><x', raising=False)
    whos_online.record_user(alice)

    markup = render(TAG)

    assert 'href="/people/?a=1&amp;b=&quot;&gt;&lt;x"' in markup


def test_template_can_be_overridden(backend, settings, tmp_path, db):
    override_widget_template(
        settings,
        tmp_path,
        "{{ counts.total }} here:{% for user in users %} {{ user.name }}{% endfor %};"
        " more={{ more }}",
    )
    _users("alice", "bob")
    _guests(1)

    assert render(TAG) == "3 here: bob alice; more=0"


def test_render_is_one_round_trip_and_no_query(backend, redis_calls, django_assert_num_queries, db):
    _users("alice", "bob")
    _guests(1)
    render(TAG)  # loads the script into a fresh server
    redis_calls.clear()

    with django_assert_num_queries(0):
        markup = render(TAG)

    assert redis_calls.trips == [["EVALSHA"]]
    assert widget_text(markup) == "Who's online: bob, alice and 1 guest"


def test_tags_on_one_page_share_one_round_trip(backend, redis_calls, db):
    _users("alice")
    _guests(2)
    _guests(1, bot=True)
    page = (
        "{% load whos_online %}{% whos_online %}|{% online_count %}|{% online_count 'users' %}"
        "|{% online_count 'bots' %}"
    )
    render(page)
    redis_calls.clear()

    markup = render(page)

    assert redis_calls.trips == [["EVALSHA"]]
    assert widget_text(markup) == "Who's online: alice, 2 guests and 1 bot |3|1|1"


def test_snapshot_is_kept_on_the_request(backend, redis_calls, db):
    _users("alice")
    request = RequestFactory().get("/")
    render(TAG)
    redis_calls.clear()

    first = render(TAG, request=request)
    assert redis_calls.trips == [["EVALSHA"]]
    _users("bob")
    redis_calls.clear()

    second = render("{% load whos_online %}{% online_count %}", request=request)

    assert widget_text(first) == "Who's online: alice"
    assert second == "1"
    assert redis_calls.trips == []
    assert render("{% load whos_online %}{% online_count %}") == "2"


def test_render_without_request(backend, db):
    _users("alice")

    markup = Template(TAG).render(Context({}))

    assert widget_text(markup) == "Who's online: alice"


# {% online_count %}


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("{% online_count %}", "4"),
        ("{% online_count 'total' %}", "4"),
        ('{% online_count "users" %}', "2"),
        ('{% online_count "guests" %}', "2"),
        ('{% online_count "bots" %}', "1"),
        ("{% online_count kind %}", "2"),
        ("{% online_count 'users' as n %}[{{ n }}]", "[2]"),
    ],
)
def test_online_count(backend, hiding_bob, db, tag, expected):
    _users("alice", "bob")
    _guests(2)
    _guests(1, bot=True)

    assert render("{% load whos_online %}" + tag, {"kind": "guests"}) == expected


def test_online_count_when_nobody_is_online(backend):
    assert render("{% load whos_online %}{% online_count %}") == "0"


@pytest.mark.parametrize("kind", ["people", "Users", ""])
def test_online_count_rejects_an_unknown_kind(backend, kind):
    with pytest.raises(TemplateSyntaxError) as excinfo:
        render("{% load whos_online %}{% online_count kind %}", {"kind": kind})

    assert str(excinfo.value) == (
        f"online_count takes one of users, guests, bots, total, not {kind!r}."
    )


# {% last_seen %}

SEEN = datetime(2027, 3, 3, 12, 0, tzinfo=timezone.utc)


def test_last_seen_renders_a_localized_date(backend, settings, alice):
    settings.TIME_ZONE = "Europe/Paris"
    whos_online.record_user(alice, now=SEEN)

    # As Django renders any datetime: in the current time zone, in DATETIME_FORMAT.
    markup = render("{% load whos_online %}{% last_seen user %}", {"user": alice})

    assert markup == "March 3, 2027, 1 p.m."


def test_last_seen_as_renders_like_any_datetime(backend, settings, alice):
    settings.TIME_ZONE = "Europe/Paris"
    whos_online.record_user(alice, now=SEEN)

    markup = render("{% load whos_online %}{% last_seen user as seen %}{{ seen }}", {"user": alice})

    assert markup == "March 3, 2027, 1 p.m."


def test_last_seen_as_gives_a_datetime(backend, alice):
    whos_online.record_user(alice, now=SEEN)

    markup = render(
        "{% load whos_online %}{% last_seen user as seen %}{{ seen.isoformat }}"
        "|{{ seen|date:'Y-m-d H:i e' }}",
        {"user": alice},
    )

    assert markup == "2027-03-03T12:00:00+00:00|2027-03-03 06:00 CST"


@pytest.mark.parametrize("who", ["anonymous", "never-seen", "none", "missing"])
def test_last_seen_is_empty_for_nobody(backend, alice, who):
    context: dict[str, Any] = {
        "anonymous": {"user": AnonymousUser()},
        "never-seen": {"user": alice},
        "none": {"user": None},
        "missing": {},
    }[who]

    assert render("{% load whos_online %}[{% last_seen user %}]", context) == "[]"
    assert (
        render(
            "{% load whos_online %}{% last_seen user as seen %}"
            "{% if seen %}seen{% else %}never{% endif %}",
            context,
        )
        == "never"
    )


@pytest.fixture
def hidden_bob_seen(backend, settings, bob):
    """bob is hidden (``HIDE_USER``) and was seen at ``SEEN``."""
    configure(settings, HIDE_USER="tests.support.helpers.hide_bob")
    whos_online.record_user(bob, now=SEEN)
    return bob


def _viewed_by(viewer: Any) -> Any:
    request = RequestFactory().get("/profile/bob/")
    if viewer is not None:
        request.user = viewer
    return request


LAST_SEEN_BOTH_WAYS = (
    "{% load whos_online %}[{% last_seen shown %}]"
    "{% last_seen shown as seen %}{% if seen %}seen{% else %}never{% endif %}"
)


@pytest.mark.parametrize("viewer", ["no-user", "anonymous", "another-user", "inactive-staff"])
def test_last_seen_shows_nothing_of_a_hidden_user_to_others(hidden_bob_seen, alice, viewer):
    others = {
        "no-user": None,
        "anonymous": AnonymousUser(),
        "another-user": alice,
        "inactive-staff": User.objects.create_user("ex", is_staff=True, is_active=False),
    }

    markup = render(
        LAST_SEEN_BOTH_WAYS, {"shown": hidden_bob_seen}, request=_viewed_by(others[viewer])
    )

    assert markup == "[]never"


def test_last_seen_of_a_hidden_user_outside_a_request_shows_nothing(hidden_bob_seen):
    markup = Template(LAST_SEEN_BOTH_WAYS).render(Context({"shown": hidden_bob_seen}))

    assert markup == "[]never"


@pytest.mark.parametrize("viewer", ["themselves", "staff"])
def test_last_seen_of_a_hidden_user_is_shown_to_them_and_to_staff(hidden_bob_seen, staff, viewer):
    who = hidden_bob_seen if viewer == "themselves" else staff

    markup = render(LAST_SEEN_BOTH_WAYS, {"shown": hidden_bob_seen}, request=_viewed_by(who))

    assert markup == "[March 3, 2027, 6 a.m.]seen"


def test_last_seen_of_a_hidden_user_ignores_a_context_user_variable(hidden_bob_seen):
    # A profile view often passes the profile's owner as ``user``: it is not the viewer.
    markup = render(
        LAST_SEEN_BOTH_WAYS,
        {"shown": hidden_bob_seen, "user": hidden_bob_seen},
        request=_viewed_by(AnonymousUser()),
    )

    assert markup == "[]never"


def test_last_seen_of_a_visible_user_does_not_load_the_viewer(backend, settings, alice):
    configure(settings, HIDE_USER="tests.support.helpers.hide_bob")
    whos_online.record_user(alice, now=SEEN)
    request = RequestFactory().get("/")
    # As AuthenticationMiddleware sets it: loaded (from the session) when first looked at.
    request.user = SimpleLazyObject(  # type: ignore [assignment]
        lambda: pytest.fail("the viewer was loaded")
    )

    assert render("{% load whos_online %}{% last_seen shown %}", {"shown": alice}, request)


# A room and the site in one tag

BOTH = '{% load whos_online %}{% whos_online room="topic:1" site=True %}'


def _in_the_room_and_out(alice: User, bob: User) -> None:
    """alice reads topic:1, bob another page, and a guest is online."""
    now = time.time()
    whos_online.record_user(bob, now=now - 2)
    whos_online.record_guest("198.51.100.1", now=now - 1)
    whos_online.record_user(alice, room="topic:1", now=now)


def test_site_shows_the_site_s_list_below_the_room_s(backend, alice, bob):
    _in_the_room_and_out(alice, bob)

    markup = render(BOTH)

    assert widget_text(markup) == "Here now: alice Who's online: alice, bob and 1 guest"
    assert 'data-users="1" data-guests="0" data-bots="0" data-total="1"' in markup
    assert (
        '<div class="whos-online-site" data-users="2" data-guests="1" data-bots="0" '
        'data-total="3">' in markup
    )
    # The peak is the site's, shown as on the site's widget; a room alone has none.
    assert "Most people ever online was 3" in widget_text(markup, peak=True)
    assert "whos-online-peak" not in render(
        '{% load whos_online %}{% whos_online room="topic:1" %}'
    )


def test_the_room_and_the_site_are_one_round_trip(
    backend, redis_calls, django_assert_num_queries, alice, bob
):
    _in_the_room_and_out(alice, bob)
    render(BOTH)  # loads the script into a fresh server
    request = RequestFactory().get("/")
    redis_calls.clear()

    with django_assert_num_queries(0):
        render(BOTH, request=request)
        counted = render(
            '{% load whos_online %}{% online_count %}/{% online_count room="topic:1" %}',
            request=request,
        )

    assert redis_calls.trips == [["EVALSHA", "EVALSHA"]]
    assert counted == "3/1"


def test_site_takes_the_site_s_visitors(backend, alice, bob):
    _in_the_room_and_out(alice, bob)

    markup = render(
        '{% load whos_online %}{% whos_online room="topic:1" site=True visitors=True peak=False %}'
    )

    assert widget_text(markup).endswith(
        "Who's online: alice, bob and 1 guest 3 unique visitors today"
    )
    assert "whos-online-peak" not in markup


def test_site_beside_the_site_is_shown_once(backend, alice, bob):
    _in_the_room_and_out(alice, bob)

    assert render("{% load whos_online %}{% whos_online site=True %}") == render(TAG)


def test_an_overriding_template_is_given_the_site_s_list(backend, settings, tmp_path, alice, bob):
    override_widget_template(
        settings,
        tmp_path,
        "{{ counts.total }} here ({{ names }}), {{ site.counts.total }} on the site:"
        "{% for user in site.users %} {{ user.name }}{% endfor %}; more={{ site.more }}",
    )
    _in_the_room_and_out(alice, bob)

    assert render(BOTH) == (
        '1 here (<span class="whos-online-user" dir="auto">alice</span>), 3 on the site:'
        " alice bob; more=0"
    )


# Failing open


def test_tags_fail_open_while_redis_is_down(redis_down, alice):
    page = (
        "{% load whos_online %}{% whos_online %}|{% online_count %}|{% online_count 'bots' %}"
        "|[{% last_seen user %}]"
    )

    markup = render(page, {"user": alice})

    assert widget_text(markup) == "Who's online: nobody |0|0|[]"
    assert 'data-total="0"' in markup
    assert widget_text(render(BOTH)) == "Here now: nobody Who's online: nobody"


# Lines of their own


class _Lines(HTMLParser):
    """The element of each class among ``wanted``, with its parent's class: (tag, parent)."""

    def __init__(self, wanted: set[str]) -> None:
        super().__init__()
        self.wanted = wanted
        self.open: list[str] = []
        self.found: dict[str, tuple[str, str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        for name in self.wanted.intersection(classes):
            self.found[name] = (tag, self.open[-1] if self.open else "")
        self.open.append(" ".join(classes))

    def handle_endtag(self, tag: str) -> None:
        self.open.pop()


@pytest.mark.parametrize(
    "source",
    [
        "{% whos_online visitors=True %}",
        "{% whos_online live=True visitors=True %}",
        "{% whos_online here=True visitors=True %}",  # a page in no room: the site's list
        "{% whos_online here=True site=True visitors=True live=True %}",
        '{% whos_online room="topic:1" site=True visitors=True %}',
    ],
)
def test_the_visitors_and_the_peak_are_lines_of_their_own_in_every_form(
    backend, alice, bob, source
):
    """Blocks of the widget itself, after the list (and the site's list, when shown): never
    inline after the names, whatever the site's CSS."""
    _in_the_room_and_out(alice, bob)
    lines = _Lines({"whos-online-visitors", "whos-online-peak"})

    lines.feed(render("{% load whos_online %}" + source))

    assert lines.found == {
        "whos-online-visitors": ("div", "whos-online"),
        "whos-online-peak": ("div", "whos-online"),
    }
