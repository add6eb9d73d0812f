"""A live widget: its options, the URL that carries them, and the tag rendered for a refresh.

Each option is one field of ``WidgetOptions``, from which the tag's argument, the widget URL's
query and the views' reading of it are derived, so that a new option is one field.
"""

from __future__ import annotations

import functools
import inspect
import json
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar
from urllib.parse import urlencode

from django.conf import settings
from django.http import QueryDict
from django.template import Context, Engine, Template
from django.utils import translation

from whos_online.reading import snapshots, viewer
from whos_online.reading.viewer import may_see_names
from whos_online.recording import rooms
from whos_online.store.results import EMPTY_SNAPSHOT

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from dataclasses import Field

    from django.http import HttpRequest

    from whos_online.config.settings import Config
    from whos_online.reading.viewer import Reader

    Pairs = list[tuple[str, str]]

#: The longest refresh= a widget URL may ask for: a day.
MAX_REFRESH: Final = 86_400

_Tag = TypeVar("_Tag", bound="Callable[..., Any]")


@dataclass(frozen=True)
class Carried:
    """How an option travels in the widget's URL: ``write(name, value, request)`` gives its
    query items (none: left out), ``read(name, text)`` takes it back (a ValueError says what is
    wrong). ``in_tag``: whether the tag takes it (the page's language it finds itself)."""

    write: Callable[[str, Any, HttpRequest | None], Pairs]
    read: Callable[[str, str], Any]
    in_tag: bool = True


def option(
    default: object,
    write: Callable[[str, Any, HttpRequest | None], Pairs],
    read: Callable[[str, str], Any],
    *,
    in_tag: bool = True,
) -> Any:
    """A field of ``WidgetOptions``: its default, and how the URL carries it."""
    return field(default=default, metadata={"carried": Carried(write, read, in_tag)})


def _write_flag(name: str, value: object, request: HttpRequest | None) -> Pairs:
    return [(name, "1" if value else "0")]


def _write_if_set(name: str, value: object, request: HttpRequest | None) -> Pairs:
    return [(name, "1")] if value else []


def _read_flag(name: str, text: str) -> bool:
    if text not in {"0", "1"}:
        msg = f"{name} must be 0 or 1."
        raise ValueError(msg)
    return text == "1"


def _write_number(name: str, value: object, request: HttpRequest | None) -> Pairs:
    return [] if value is None else [(name, str(value))]


def _read_refresh(name: str, text: str) -> int:
    if text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_REFRESH:
        return int(text)
    msg = f"{name} must be a whole number of seconds from 1 to {MAX_REFRESH}."
    raise ValueError(msg)


def _write_language(name: str, value: object, request: HttpRequest | None) -> Pairs:
    return [(name, str(value or translation.get_language() or settings.LANGUAGE_CODE))]


def _read_language(name: str, text: str) -> str | None:
    """The page's language, if this site still offers it, as the page had it (``en-us``, not
    the ``en`` it falls back to), so that the refresh carries the page's own URL. One the site
    no longer offers (a page left open across a deploy) is no error: the widget is rendered in
    the request's language, as any page would be."""
    if not text or not translation.check_for_language(text):
        return None
    if text == settings.LANGUAGE_CODE:
        return text
    try:
        translation.get_supported_language_variant(text)
    except LookupError:
        return None
    return text


def _write_room(name: str, value: object, request: HttpRequest | None) -> Pairs:
    """A room, and its token for the viewer of ``request``."""
    if value is None:
        return []
    room = str(value)
    return [(name, room), ("token", viewer.room_token(room, request))]


def _read_room(name: str, text: str) -> str:
    return rooms.check_room(text)


@dataclass(frozen=True)
class WidgetOptions:
    """What a live widget shows, as its tag was given it and its URL carries it; the fields'
    order is the URL's. A new option is a field here (and a line of docs/templates.md)."""

    peak: bool = option(True, _write_flag, _read_flag)
    visitors: bool = option(False, _write_flag, _read_flag)
    #: Seconds between two refreshes; None: ``REFRESH_INTERVAL``.
    refresh: int | None = option(None, _write_number, _read_refresh)
    #: The page's language; None in the tag: the current one.
    lang: str | None = option(None, _write_language, _read_language, in_tag=False)
    #: The room shown; None: the site.
    room: str | None = option(None, _write_room, _read_room)
    #: With a room, the site's list below the room's.
    site: bool = option(False, _write_if_set, _read_flag)

    @classmethod
    def from_query(cls, query: QueryDict) -> WidgetOptions:
        """The options a widget's URL carries (others are left alone); a ValueError says what
        is wrong."""
        return cls(
            **{
                one.name: carried(one).read(one.name, text)
                for one in fields(cls)
                if (text := query.get(one.name)) is not None
            }
        )

    def query(self, request: HttpRequest | None) -> str:
        """The query string of the widget's URL, for the viewer of ``request``."""
        return urlencode(
            [
                pair
                for one in fields(self)
                for pair in carried(one).write(one.name, getattr(self, one.name), request)
            ]
        )

    def tag_arguments(self) -> dict[str, Any]:
        """The tag's keyword arguments for these options."""
        return {name: getattr(self, name) for name in TAG_OPTIONS}

    def rooms_shown(self) -> list[str]:
        """What the widget lists: its room ("" for the site), and the site beside it."""
        room = self.room or ""
        return [room, ""] if room and self.site else [room]


def carried(option: Field[Any]) -> Carried:
    """How the URL carries a field of ``WidgetOptions``."""
    found: Carried = option.metadata["carried"]
    return found


#: The options the tag takes as keyword arguments.
TAG_OPTIONS: Final = tuple(one.name for one in fields(WidgetOptions) if carried(one).in_tag)
#: The tag as the widget views render it, with the options of the refreshed widget.
WIDGET_SOURCE: Final = (
    "{% load whos_online %}{% whos_online live=True "
    + " ".join(f"{name}={name}" for name in TAG_OPTIONS)
    + " %}"
)


def with_options(tag: _Tag) -> _Tag:
    """``tag``, whose ``**options`` are those of ``WidgetOptions``, taking each as a keyword
    argument: Django reads a tag's arguments from its signature, and so refuses one it does not
    take when the template is compiled."""
    own = inspect.signature(tag).parameters.values()
    tag.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [one for one in own if one.kind is not inspect.Parameter.VAR_KEYWORD]
        + [
            inspect.Parameter(one.name, inspect.Parameter.KEYWORD_ONLY, default=one.default)
            for one in fields(WidgetOptions)
            if carried(one).in_tag
        ]
    )
    return tag


def presence_query(request: HttpRequest | None, room: str) -> str:
    """The query string of the presence view for ``room``, for the viewer of ``request``."""
    return urlencode({"room": room, "token": viewer.room_token(room, request)})


def stay_interval(config: Config) -> int:
    """How often, in seconds, a room's page says its reader is still there: once the throttle
    cookie that spares the write has run out, and no more often than the widgets refresh."""
    return max(config.throttle + 1, config.refresh_interval)


@functools.lru_cache(maxsize=4)
def _template(engine: Engine) -> Template:
    """Compiled once per template engine (a change of TEMPLATES makes a new default engine)."""
    return Template(WIDGET_SOURCE, engine=engine)


def render(request: HttpRequest, engine: Engine, options: WidgetOptions) -> tuple[str, str]:
    """The tag rendered for a refresh, in the page's language: its HTML and that language."""
    language = options.lang or translation.get_language()
    with translation.override(language):
        context = Context(
            {"request": request, **options.tag_arguments()}, autoescape=engine.autoescape
        )
        return _template(engine).render(context), language


class Accepted(NamedTuple):
    """A widget of a refresh that is answered: its answer (its HTML is added once every
    snapshot is read), its query and options, and when its room token was issued."""

    answer: dict[str, Any]
    query: QueryDict
    options: WidgetOptions
    issued: int | None


def widget_answers(
    request: HttpRequest, config: Config, queries: Iterable[str]
) -> tuple[list[dict[str, Any]], list[Accepted]]:
    """The answer of each widget a refresh asks for (its status alone for now: 400 or 403, or
    200 for those accepted, whose answers ``render_answers`` completes), and those accepted."""
    answers: list[dict[str, Any]] = []
    accepted: list[Accepted] = []
    for raw in queries:
        query = QueryDict(raw)
        try:
            options = WidgetOptions.from_query(query)
        except ValueError as error:
            answers.append({"status": 400, "error": str(error)})
            continue
        room = options.room or ""
        viewer.use_issued(request, None)
        if room and not viewer.may_read(request, room, config, token=query.get("token", "")):
            answers.append({"status": 403})
            continue
        answers.append({"status": 200})
        accepted.append(Accepted(answers[-1], query, options, viewer.issued(request)))
    return answers, accepted


def rooms_of(accepted: Iterable[Accepted]) -> list[str]:
    """The rooms the accepted widgets show ("" for the site), in order, with repeats."""
    return [room for widget in accepted for room in widget.options.rooms_shown()]


def render_answers(request: HttpRequest, accepted: Iterable[Accepted], unread: set[str]) -> None:
    """Complete the answers of the accepted widgets with their HTML, from the snapshots kept on
    ``request`` (``unread``: the rooms whose snapshot could not be read)."""
    engine = Engine.get_default()
    for widget in accepted:
        viewer.use_issued(request, widget.issued)  # its URLs keep its token's issue time
        widget.answer["ok"] = not unread.intersection(widget.options.rooms_shown())
        widget.answer["html"] = render(request, engine, widget.options)[0]


#: "<", ">" and "&" written as JSON escapes, as Django's json_script does: names are anyone's
#: text, and the document must stay inert even if something renders it as HTML.
HTML_SAFE: Final = {ord("<"): "\\u003C", ord(">"): "\\u003E", ord("&"): "\\u0026"}
#: The most widgets one request of ``widgets`` refreshes (live.js asks for more in several).
MAX_WIDGETS: Final = 32


def read_for_widgets(
    request: HttpRequest,
    config: Config,
    rooms: Iterable[str],
    *,
    names: bool,
    reader: Reader | None = None,
) -> set[str]:
    """Read the snapshots of ``rooms`` in one round trip (``viewer.read_shown``) and keep them
    on the request, where the tag rendered for the poll finds them (with or without names, as
    read here); the rooms that could not be read (kept as zeros) are returned."""
    found = viewer.read_shown(request, config, rooms, names=names, reader=reader)
    for room, one in found.items():
        snapshots.keep_on_request(request, EMPTY_SNAPSHOT if one is None else one, room)
    return {room for room, one in found.items() if one is None}


class WidgetsRead(NamedTuple):
    """The widgets of a refresh, answered: every answer, those accepted, whether names are
    shown, the rooms read and the page's reader."""

    answers: list[dict[str, Any]]
    accepted: list[Accepted]
    names: bool
    shown: list[str]
    reader: Reader | None


def answer_widgets(request: HttpRequest, config: Config, queries: list[str]) -> WidgetsRead:
    """Check every widget query, read their rooms in one round trip and render the accepted
    ones: a refresh of a page's widgets and the first state of its stream alike."""
    answers, accepted = widget_answers(request, config, queries)
    names = may_see_names(request, config)
    shown = rooms_of(accepted)
    reader = viewer.reader_of(request, config, shown)
    unread = (
        read_for_widgets(request, config, shown, names=names, reader=reader) if shown else set()
    )
    render_answers(request, accepted, unread)
    return WidgetsRead(answers, accepted, names, shown, reader)


def answers_body(answers: list[dict[str, Any]]) -> str:
    """The JSON document of ``widgets``: ``{"widgets": answers}``, inert as HTML."""
    return json.dumps({"widgets": answers}).translate(HTML_SAFE)
