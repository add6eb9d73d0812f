"""Which requests are page views (``whos_online.recording.pageviews``), told from the request and
its response alone. What a page view does (rooms, hits) is tested through the middleware in
``tests/recording/test_real_site_rooms.py``."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpResponse, JsonResponse
from django.test import RequestFactory

from whos_online.recording import pageviews

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

    assert pageviews.is_page_view(request, HttpResponse("<p>page</p>"))


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
    ],
    ids=["prefetch", "prerender", "anonymous", "purpose", "x-moz", "x-purpose", "x-prefetch"],
)
def test_a_page_fetched_ahead_of_time_is_no_page_view(headers):
    request = RequestFactory().get("/", **headers)

    assert pageviews.is_speculative(request)
    assert not pageviews.may_be_page_view(request)
    assert not pageviews.is_page_view(request, HttpResponse("<p>page</p>"))


@pytest.mark.parametrize("destination", ["iframe", "frame", "IFrame"])
def test_a_frame_of_the_site_s_own_page_is_part_of_that_page_not_a_page_view(destination):
    """A CMS's preview panel, a widget the site embeds in its own admin."""
    request = RequestFactory().get(
        "/", HTTP_SEC_FETCH_DEST=destination, HTTP_SEC_FETCH_SITE="same-origin"
    )

    assert not pageviews.is_page_view(request, HttpResponse("<p>page</p>"))


@pytest.mark.parametrize("headers", [DOCUMENT, {}], ids=["document", "no-fetch-metadata"])
def test_head_is_no_page_view(headers):
    request = RequestFactory().head("/", **headers)

    assert not pageviews.is_page_view(request, HttpResponse("<p>page</p>"))


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

    assert not pageviews.is_page_view(request, response)
