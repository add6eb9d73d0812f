"""Which requests are page views (``whos_online.recording.rooms``), told from the request and
its response alone. What a page view does (rooms, hits) is tested through the middleware in
``tests/recording/test_real_site_rooms.py``."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpResponse, JsonResponse
from django.test import RequestFactory
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from whos_online.recording import rooms

DOCUMENT: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "document"}


@pytest.mark.parametrize(
    "headers",
    [
        DOCUMENT,
        {"HTTP_SEC_FETCH_DEST": "iframe"},
        {"HTTP_SEC_FETCH_DEST": "iframe", "HTTP_SEC_FETCH_SITE": "cross-site"},
        {},
        {"HTTP_SEC_PURPOSE": "something-else"},
    ],
    ids=["document", "iframe", "framed-elsewhere", "no-fetch-metadata", "another-purpose"],
)
def test_a_get_answered_with_a_page_is_a_page_view(headers):
    request = RequestFactory().get("/", **headers)

    assert rooms.is_page_view(request, HttpResponse("<p>page</p>"))


@pytest.mark.parametrize(
    "headers",
    [
        {**DOCUMENT, "HTTP_SEC_PURPOSE": "prefetch"},  # speculation rules, <link rel=prefetch>
        {**DOCUMENT, "HTTP_SEC_PURPOSE": "prefetch;prerender"},
        {**DOCUMENT, "HTTP_SEC_PURPOSE": "Prefetch; anonymous-client-ip"},
        {"HTTP_PURPOSE": "prefetch"},  # Chrome before Sec-Purpose
        {"HTTP_X_MOZ": "prefetch"},  # Firefox before it
        {"HTTP_X_PURPOSE": "preview"},  # Safari's Top Sites
        {"HTTP_X_PURPOSE": "prefetch"},
        # Turbo 8's prefetch of the link under the pointer, whose visit then sends nothing.
        {
            "HTTP_X_SEC_PURPOSE": "prefetch",
            "HTTP_X_TURBO_REQUEST_ID": "1",
            "HTTP_ACCEPT": "text/html",
        },
        # htmx's preload extension, of a boosted link.
        {"HTTP_HX_REQUEST": "true", "HTTP_HX_BOOSTED": "true", "HTTP_HX_PRELOADED": "true"},
    ],
    ids=[
        "prefetch",
        "prerender",
        "anonymous",
        "purpose",
        "x-moz",
        "x-purpose",
        "x-prefetch",
        "turbo-prefetch",
        "htmx-preload",
    ],
)
def test_a_page_fetched_ahead_of_time_is_no_page_view(headers):
    request = RequestFactory().get("/", **headers)

    assert rooms.is_speculative(request)
    assert not rooms.may_be_page_view(request)
    assert not rooms.is_page_view(request, HttpResponse("<p>page</p>"))


@pytest.mark.parametrize("destination", ["iframe", "frame", "IFrame"])
def test_a_frame_of_the_site_s_own_page_is_part_of_that_page_not_a_page_view(destination):
    """A CMS's preview panel, a widget the site embeds in its own admin."""
    request = RequestFactory().get(
        "/", HTTP_SEC_FETCH_DEST=destination, HTTP_SEC_FETCH_SITE="same-origin"
    )

    assert not rooms.is_page_view(request, HttpResponse("<p>page</p>"))


@pytest.mark.parametrize("headers", [DOCUMENT, {}], ids=["document", "no-fetch-metadata"])
def test_head_is_no_page_view(headers):
    request = RequestFactory().head("/", **headers)

    assert not rooms.is_page_view(request, HttpResponse("<p>page</p>"))


@pytest.mark.parametrize(
    ("method", "headers", "response"),
    [
        ("get", {"HTTP_SEC_FETCH_DEST": "empty"}, HttpResponse("<p>part</p>")),
        ("get", {"HTTP_X_REQUESTED_WITH": "XMLHttpRequest"}, HttpResponse("<p>part</p>")),
        ("get", {"HTTP_HX_REQUEST": "true"}, HttpResponse("<p>part</p>")),
        ("post", {}, HttpResponse("<p>page</p>")),
        ("get", DOCUMENT, JsonResponse({})),
        ("get", DOCUMENT, HttpResponse("gone", status=404)),
    ],
    ids=["fetch", "xhr", "htmx", "post-without-fetch-metadata", "json", "404"],
)
def test_other_requests_are_no_page_views(method, headers, response):
    request = getattr(RequestFactory(), method)("/", **headers)

    assert not rooms.is_page_view(request, response)


FETCH: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "empty", "HTTP_SEC_FETCH_MODE": "cors"}
TURBO_7_ACCEPT = "text/html, application/xhtml+xml"


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("get", {**FETCH, "HTTP_HX_REQUEST": "true", "HTTP_HX_BOOSTED": "true"}),
        ("post", {**FETCH, "HTTP_HX_REQUEST": "true", "HTTP_HX_BOOSTED": "True"}),
        ("get", {**FETCH, "HTTP_HX_HISTORY_RESTORE_REQUEST": "true"}),
        ("get", {**FETCH, "HTTP_X_TURBO_REQUEST_ID": "1", "HTTP_ACCEPT": TURBO_7_ACCEPT}),
        ("get", {**FETCH, "HTTP_ACCEPT": TURBO_7_ACCEPT}),
        ("get", {**FETCH, "HTTP_ACCEPT": f"text/vnd.turbo-stream.html, {TURBO_7_ACCEPT}"}),
    ],
    ids=["htmx-boosted", "htmx-boosted-form", "htmx-history", "turbo-8", "turbo-7", "turbo-7-form"],
)
def test_a_navigation_a_library_makes_without_a_reload_is_a_page_view(method, headers):
    request = getattr(RequestFactory(), method)("/", **headers)

    assert rooms.is_navigation(request)
    assert rooms.is_page_view(request, HttpResponse("<p>page</p>"))
    assert not rooms.is_page_view(request, HttpResponse("gone", status=404))
    assert not rooms.is_page_view(request, HttpResponse(status=303))


@pytest.mark.parametrize("fetch_metadata", [FETCH, {}], ids=["fetch-metadata", "none"])
@pytest.mark.parametrize(
    "headers",
    [
        {"HTTP_HX_REQUEST": "true", "HTTP_HX_BOOSTED": "false"},
        {"HTTP_TURBO_FRAME": "comments", "HTTP_ACCEPT": TURBO_7_ACCEPT},
        {"HTTP_TURBO_FRAME": "comments", "HTTP_X_TURBO_REQUEST_ID": "1"},
        {"HTTP_X_TURBO_REQUEST_ID": "1", "HTTP_ACCEPT": "*/*"},
        {"HTTP_X_UP_VERSION": "3.14.2", "HTTP_X_UP_TARGET": "main", "HTTP_X_UP_MODE": "root"},
        {"HTTP_X_REQUESTED_WITH": "XMLHttpRequest", "HTTP_ACCEPT": TURBO_7_ACCEPT},
    ],
    ids=["htmx", "turbo-7-frame", "turbo-8-frame", "turbo-8-fetch", "unpoly", "xhr"],
)
def test_a_library_s_other_requests_are_no_page_views(headers, fetch_metadata):
    request = RequestFactory().get("/", **fetch_metadata, **headers)

    assert not rooms.is_navigation(request)
    assert not rooms.is_page_view(request, HttpResponse("<p>part</p>"))


#: The headers the page-view check reads, and values that mean something to one of them.
READ_HEADERS = sorted(
    {
        *rooms.SPECULATIVE,
        *rooms.LIBRARY_REQUESTS,
        "HTTP_HX_BOOSTED",
        "HTTP_HX_HISTORY_RESTORE_REQUEST",
        "HTTP_X_REQUESTED_WITH",
        "HTTP_ACCEPT",
        "HTTP_SEC_FETCH_DEST",
        "HTTP_SEC_FETCH_SITE",
    }
)
MEANINGFUL = [
    "true",
    "prefetch",
    "preview",
    "document",
    "iframe",
    "empty",
    "same-origin",
    "XMLHttpRequest",
    rooms.TURBO_7_ACCEPT,
    f"{rooms.TURBO_STREAM}, {rooms.TURBO_7_ACCEPT}",
]


def read_the_long_way(request) -> bool:
    """``may_be_page_view`` as it reads without its one look for script headers: every check
    in turn."""
    if request.method == "HEAD" or rooms.is_speculative(request):
        return False
    if rooms.is_navigation(request):
        return True
    destination = request.META.get("HTTP_SEC_FETCH_DEST")
    if destination is not None:
        if destination.lower() in rooms.FRAMES:
            site: str = request.META.get("HTTP_SEC_FETCH_SITE", "")
            return site.lower() != "same-origin"
        return destination.lower() in rooms.PAGE_DESTINATIONS
    return (
        request.method == "GET"
        and "HTTP_X_REQUESTED_WITH" not in request.META
        and not any(header in request.META for header in rooms.LIBRARY_REQUESTS)
    )


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    method=st.sampled_from(["GET", "POST", "HEAD"]),
    headers=st.dictionaries(st.sampled_from(READ_HEADERS), st.sampled_from(MEANINGFUL)),
)
def test_the_one_look_for_script_headers_decides_as_every_check_in_turn(method, headers):
    request = RequestFactory().generic(method, "/", **headers)

    assert rooms.may_be_page_view(request) is read_the_long_way(request)
