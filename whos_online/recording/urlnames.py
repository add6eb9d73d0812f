"""The URL names of the site's URLconf, each with the keyword arguments its view is passed: what
``ROOMS`` patterns may be formatted with, for the system check that reads them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.urls import URLResolver, get_resolver

if TYPE_CHECKING:
    from collections.abc import Iterable

    from django.urls import URLPattern


def url_keywords(urlconf: str | None = None) -> dict[str, frozenset[str]]:
    """``{name: keyword arguments}`` for every named URL, the name as ``reverse()`` takes it
    (instance namespaces joined by ':').

    A URL's view is passed what its route captures (its own and its includes'), and the extra
    ``kwargs`` of its ``path()``. A name several routes share keeps only the arguments all of
    them pass: a room pattern must work whichever of them a request matched.
    """
    found: dict[str, frozenset[str]] = {}
    _walk(get_resolver(urlconf).url_patterns, (), frozenset(), found)
    return found


def _walk(
    patterns: Iterable[URLPattern | URLResolver],
    namespaces: tuple[str, ...],
    captured: frozenset[str],
    found: dict[str, frozenset[str]],
) -> None:
    for entry in patterns:
        keywords = captured | set(entry.pattern.regex.groupindex)
        if isinstance(entry, URLResolver):
            keywords |= set(entry.default_kwargs)
            inner = (*namespaces, entry.namespace) if entry.namespace else namespaces
            _walk(entry.url_patterns, inner, keywords, found)
        elif entry.name:
            keywords |= set(entry.default_args)
            name = ":".join((*namespaces, entry.name))
            found[name] = found[name] & keywords if name in found else frozenset(keywords)
