"""The URL names of the site's URLconf, each with what its view is passed: what ``ROOMS``
patterns may be formatted with, for the system check that reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.urls import URLResolver, get_resolver

if TYPE_CHECKING:
    from collections.abc import Iterable

    from django.urls import URLPattern


@dataclass(frozen=True)
class Captures:
    """What a URL passes its view: keyword arguments by name, and how many positional ones."""

    keywords: frozenset[str]
    positional: int

    def fields(self) -> frozenset[str]:
        """The fields a room pattern may name: the keywords, and the positions by number."""
        return self.keywords | {str(index) for index in range(self.positional)}

    def __and__(self, other: Captures) -> Captures:
        return Captures(self.keywords & other.keywords, min(self.positional, other.positional))


def url_captures(urlconf: str | None = None) -> dict[str, Captures]:
    """``{name: captures}`` for every named URL, the name as ``reverse()`` takes it (instance
    namespaces joined by ':').

    A URL's view is passed what its route captures (its own and its includes'), and the extra
    ``kwargs`` of its ``path()``; as Django does, a route that captures any keyword passes its
    unnamed groups to no one, and only one that captures none passes them, by position. A name
    several routes share keeps only what all of them pass: a room pattern must work whichever
    of them a request matched.
    """
    found: dict[str, Captures] = {}
    _walk(get_resolver(urlconf).url_patterns, (), frozenset(), 0, found)
    return found


def _walk(
    patterns: Iterable[URLPattern | URLResolver],
    namespaces: tuple[str, ...],
    captured: frozenset[str],
    positional: int,
    found: dict[str, Captures],
) -> None:
    for entry in patterns:
        regex = entry.pattern.regex
        keywords = captured | set(regex.groupindex)
        unnamed = positional + regex.groups - len(regex.groupindex)
        if isinstance(entry, URLResolver):
            keywords |= set(entry.default_kwargs)
            inner = (*namespaces, entry.namespace) if entry.namespace else namespaces
            _walk(entry.url_patterns, inner, keywords, unnamed, found)
        elif entry.name:
            keywords |= set(entry.default_args)
            captures = Captures(frozenset(keywords), 0 if keywords else unnamed)
            name = ":".join((*namespaces, entry.name))
            found[name] = found[name] & captures if name in found else captures
