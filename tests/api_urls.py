"""A site's API beside its pages, written as apps and single-page sites call one: Django REST
framework and django-ninja views behind a token, a view of the site's own that assigns
``request.user``, and a headless login in the manner of django-allauth's app API (a POST that logs
in and answers a session token, then that token in a header on every later request).

None of these views knows of whos_online: the middleware alone must record whoever they
authenticate (tests/recording/test_api_clients.py)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from importlib import import_module
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import aauthenticate, alogin, authenticate, login, logout
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.utils.functional import empty
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.security import HttpBearer
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.decorators import (
    api_view,
    authentication_classes,
    permission_classes,
    renderer_classes,
)
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import StaticHTMLRenderer
from rest_framework.response import Response

import whos_online

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.urls import URLPattern, URLResolver
    from rest_framework.request import Request

#: The header of allauth's app API that carries the session token.
SESSION_TOKEN_HEADER = "X-Session-Token"


def user_of_token(key: str) -> AbstractBaseUser | None:
    """The user of one of Django REST framework's tokens, as the site's own code finds it."""
    token = Token.objects.select_related("user").filter(key=key).first()
    return None if token is None else token.user


# Django REST framework


@api_view(["GET"])
@authentication_classes([TokenAuthentication, SessionAuthentication])
@permission_classes([IsAuthenticated])
def drf_me(request: Request) -> Response:
    return Response({"username": request.user.get_username()})


@api_view(["GET"])
@authentication_classes([TokenAuthentication])
def drf_token_only(request: Request) -> Response:
    """An API that knows tokens only: a browser's session is an AnonymousUser to it."""
    return Response({"authenticated": request.user.is_authenticated})


@api_view(["GET"])
@renderer_classes([StaticHTMLRenderer])
def drf_topic(request: Request, pk: int) -> Response:
    """A page that Django REST framework renders, in a room: ``set_room`` is given DRF's
    ``Request``, which wraps Django's."""
    whos_online.set_room(request, f"topic:{pk}")
    return Response(f"<main>topic {pk}</main>")


# django-ninja


class BearerToken(HttpBearer):
    """Returns the user, which django-ninja keeps as ``request.auth``."""

    def authenticate(self, request: HttpRequest, token: str) -> AbstractBaseUser | None:
        return user_of_token(token)


class BearerTokenAssigningUser(HttpBearer):
    """Assigns ``request.user`` as well, as Django's own authentication would."""

    def authenticate(self, request: HttpRequest, token: str) -> AbstractBaseUser | None:
        user = user_of_token(token)
        if user is not None:
            request.user = user  # type: ignore [assignment]
        return user


class BearerTokenKey(HttpBearer):
    """Returns the token itself, as django-ninja's own guide does: no user."""

    def authenticate(self, request: HttpRequest, token: str) -> str | None:
        return token if user_of_token(token) is not None else None


ninja_api = NinjaAPI(urls_namespace="tests-api")


@ninja_api.get("/me", auth=BearerToken())
def ninja_me(request: HttpRequest) -> dict[str, str]:
    return {"username": request.auth.get_username()}  # type: ignore [attr-defined]


@ninja_api.get("/async-me", auth=BearerToken())
async def ninja_async_me(request: HttpRequest) -> dict[str, str]:
    return {"username": request.auth.get_username()}  # type: ignore [attr-defined]


@ninja_api.get("/assigning-me", auth=BearerTokenAssigningUser())
def ninja_assigning_me(request: HttpRequest) -> dict[str, str]:
    return {"username": request.user.get_username()}


@ninja_api.get("/token-key", auth=BearerTokenKey())
def ninja_token_key(request: HttpRequest) -> dict[str, bool]:
    return {"authenticated": request.user.is_authenticated}


# A view of the site's own


def own_token_view(request: HttpRequest) -> HttpResponse:
    """Reads the header itself and assigns ``request.user``."""
    user = user_of_token(request.headers.get("Authorization", "").removeprefix("Token "))
    if user is None:
        return JsonResponse({"detail": "no token"}, status=401)
    request.user = user  # type: ignore [assignment]
    return JsonResponse({"username": user.get_username()})


# A headless login, as django-allauth's app API makes it


@contextmanager
def session_of_token(request: HttpRequest) -> Iterator[None]:
    """What allauth's app API runs each of its views in (its ``authentication_context``): the
    session that the ``X-Session-Token`` header names, or a new one, with the user it holds;
    the request's own session and user put back after the view.

    The user "put back" is the middleware's lazy object itself, which was loaded again from the
    token's session meanwhile: after a login it holds the AnonymousUser of the new session it was
    loaded from before the login; after a token request, the token's user; after a logout, the
    user who logged out."""
    own_user, own_session = request.user, request.session
    engine = import_module(settings.SESSION_ENGINE)
    request.session = engine.SessionStore(request.headers.get(SESSION_TOKEN_HEADER))
    for cached in ("_cached_user", "_acached_user"):
        request.__dict__.pop(cached, None)
    request.user._wrapped = empty  # type: ignore [union-attr]
    request.user.pk  # noqa: B018 (loads it from the token's session, as allauth does)
    try:
        yield
    finally:
        if request.session.modified and not request.session.is_empty():
            request.session.save()
        request.user = own_user
        request.session = own_session


def app_view(view: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], Any]:
    @csrf_exempt
    def wrapped(request: HttpRequest) -> HttpResponse:
        with session_of_token(request):
            return view(request)

    return wrapped


@app_view
def app_login(request: HttpRequest) -> HttpResponse:
    user = authenticate(request, **json.loads(request.body))
    assert user is not None
    login(request, user)
    return JsonResponse({"meta": {"session_token": request.session.session_key}})


@app_view
def app_session(request: HttpRequest) -> HttpResponse:
    if request.method == "DELETE":
        logout(request)
        return JsonResponse({"status": 401}, status=401)
    return JsonResponse({"data": {"user": {"username": request.user.get_username()}}})


@csrf_exempt
async def async_login(request: HttpRequest) -> HttpResponse:
    """An async view that asks who the visitor is before it logs them in: the request's
    ``auser()`` keeps answering the AnonymousUser it found first."""
    assert not (await request.auser()).is_authenticated
    user = await aauthenticate(request, **json.loads(request.body))
    assert user is not None
    await alogin(request, user)
    return JsonResponse({"meta": {"session_token": request.session.session_key}})


urlpatterns: list[URLPattern | URLResolver] = [
    path("api/drf/me/", drf_me),
    path("api/drf/token-only/", drf_token_only),
    path("api/drf/topics/<int:pk>/", drf_topic),
    path("api/ninja/", ninja_api.urls),
    path("api/own/me/", own_token_view),
    path("_allauth/app/v1/auth/login", app_login),
    path("_allauth/app/v1/auth/session", app_session),
    path("api/async-login/", async_login),
    path("online/", include("whos_online.urls")),
]
