"""``ROOMS``: what a URL name's entry says, checked and made into a rule the middleware applies.

An entry is a pattern, a dict with a title, or a function (docs/rooms.md); one that makes no room
name puts the request in no room rather than failing it.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.http import HttpRequest
    from django.urls import ResolverMatch

#: What a ``ROOMS`` function returns: a room, a room and its title, or None for no room.
RoomAnswer = str | tuple[str, str] | None

#: The keys a dict entry may have.
ENTRY_KEYS: Final = frozenset({"room", "title", "call"})


def pattern_fields(pattern: str) -> list[str]:
    """The fields a pattern is formatted with (``"topic:{pk}"``: ``["pk"]``, ``"page:{0}"``:
    ``["0"]``); ValueError if it is no format string."""
    return [
        field.split(".", 1)[0].split("[", 1)[0]
        for _, field, _, _ in string.Formatter().parse(pattern)
        if field is not None
    ]


def _pattern_problem(pattern: object, what: str) -> str | None:
    if not isinstance(pattern, str) or not pattern:
        return f"{what} is not a non-empty string: {pattern!r}"
    try:
        fields = pattern_fields(pattern)
    except ValueError as exc:
        return f"{what} {pattern!r} is not a format string: {exc}"
    odd = [field for field in fields if not (field.isidentifier() or field.isdigit())]
    if odd:
        return (
            f"{what} {pattern!r} names {odd[0]!r}, which is neither a keyword argument's name "
            "nor a positional capture's number"
        )
    return None


def callable_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a function or a function's dotted path, if anything: a
    rule's ``call`` and the settings that name a function (``HIDE_USER``…) are checked alike."""
    if callable(value):
        return None
    if not isinstance(value, str):
        return f"must be a dotted path or a callable, not {value!r}"
    try:
        imported = import_string(value)
    except Exception as exc:  # any import-time failure is a settings problem to report
        return f"{value!r} cannot be imported: {exc}"
    return None if callable(imported) else f"names {value!r}, which is not callable"


def _call_problem(value: object) -> str | None:
    problem = callable_problem(value)
    return None if problem is None else f"'call' {problem}"


def entry_problems(entry: object) -> list[str]:
    """What is wrong with one entry of ``ROOMS`` (each a phrase that follows its URL name)."""
    if callable(entry):
        return []
    if isinstance(entry, str):
        problems = [_pattern_problem(entry, "the pattern")]
    elif not isinstance(entry, Mapping):
        problems = [f"is not a pattern, a dict or a function: {entry!r}"]
    else:
        problems = _dict_problems(entry)
    return [problem for problem in problems if problem]


def _dict_problems(entry: Mapping[Any, Any]) -> list[str | None]:
    unknown = sorted(set(entry) - ENTRY_KEYS, key=str)
    if unknown:
        return [f"has keys it does not know: {', '.join(map(repr, unknown))}"]
    if ("call" in entry) == ("room" in entry):
        return ["must have either 'room' (a pattern) or 'call' (a function)"]
    if "call" in entry:
        if "title" in entry:
            return ["takes no 'title' with 'call' (the function returns the title)"]
        return [_call_problem(entry["call"])]
    problems = [_pattern_problem(entry["room"], "'room'")]
    if "title" in entry:
        problems.append(_pattern_problem(entry["title"], "'title'"))
    return problems


def entry_fields(entry: object) -> list[str]:
    """The captures the patterns of a (valid) entry are formatted with; none for a function."""
    if isinstance(entry, str):
        return pattern_fields(entry)
    if isinstance(entry, Mapping) and "room" in entry:
        return pattern_fields(entry["room"]) + pattern_fields(entry.get("title", ""))
    return []


@dataclass(frozen=True)
class RoomRule:
    """One checked entry of ``ROOMS``: ``room(request, match)`` is the room (or "") and its
    title (or "") of a request resolved to the entry's URL name."""

    pattern: str = ""
    title: str = ""
    call: Callable[[HttpRequest], RoomAnswer] | None = None

    def room(self, request: HttpRequest, match: ResolverMatch) -> tuple[str, str]:
        if self.call is not None:
            answer = self.call(request)
            if answer is None:
                return "", ""
            return (answer, "") if isinstance(answer, str) else answer
        room = _format(self.pattern, match)
        return room, _format(self.title, match) if room and self.title else ""


def _format(pattern: str, match: ResolverMatch) -> str:
    try:
        return pattern.format(*match.args, **match.kwargs)
    except (KeyError, IndexError, ValueError, AttributeError):
        return ""


def rules_of(value: Mapping[str, Any]) -> dict[str, RoomRule]:
    """The rules of a (valid) ``ROOMS``."""
    rules: dict[str, RoomRule] = {}
    for name, entry in value.items():
        if isinstance(entry, str):
            rules[name] = RoomRule(pattern=entry)
        elif callable(entry):
            rules[name] = RoomRule(call=entry)
        elif "call" in entry:
            call = entry["call"]
            rules[name] = RoomRule(call=call if callable(call) else import_string(call))
        else:
            rules[name] = RoomRule(pattern=entry["room"], title=entry.get("title", ""))
    return rules
