"""What the middleware's own Python costs a request, and what each of its microseconds buys.

The middlewares run in this process around a view that answers at once, so that only their own
work counts: the naive ZADD middleware, whos_online's for a browser whose throttle cookie spares
the write, and whos_online's for a new IPv4 guest each time (the visit queued; the flusher's
thread, which writes it later, is not counted in it: ``process_cpu`` counts it). Then each step of
the recorded request and of the throttled one alone, on fresh requests taken through the steps
before it, so that the table says what each buys; and the Python the flusher's thread spends on
a visit before its round trip (its entry, its share of a call of ``FLUSHED``, the call packed as
redis-py sends it).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast
from unittest import mock

import redis.connection
import redis.utils
from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse
from django.test import RequestFactory, override_settings
from django.urls import resolve
from redis._parsers.encoders import Encoder

import whos_online
from bench import internals as whos
from bench.harness import servers
from bench.harness.clients import BROWSER, address
from bench.harness.report import Section, Target, fixed, table
from bench.harness.rounds import Spread, interleaved, ratios
from bench.naive import NaiveZaddMiddleware
from whos_online.middleware import WhosOnlineMiddleware

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.http import HttpRequest
    from django.http.response import HttpResponseBase

#: The goals of issue 40, as shares of the naive middleware's CPU in the same round.
RECORDED_VS_NAIVE: Final = 0.5
THROTTLED_VS_NAIVE: Final = 0.065
#: The view's answer, one for every request timed, so that making it costs the timing nothing.
PAGE_TYPE: Final = "text/html; charset=utf-8"
PAGE: Final = HttpResponse("", content_type=PAGE_TYPE)
WHOLE: Final = "the whole throttled request (`WhosOnlineMiddleware`)"
RECORDED: Final = "the whole recorded request, a new guest (its visit queued)"


@dataclass(frozen=True)
class Options:
    requests: int = 400
    rounds: int = 15


QUICK = Options(requests=50, rounds=2)


class Browsers:
    """Requests of ``count`` IPv4 guests, with the throttle cookies a browser would hold."""

    def __init__(self, count: int) -> None:
        self.addresses = [address(n, "198.18") for n in range(count)]
        self.cookies = [""] * count
        self.fresh = 0
        #: What Django's handler puts on a request before its view runs: ``ROOMS`` reads it.
        self.match = resolve("/")
        ours = WhosOnlineMiddleware(lambda _: HttpResponse("", content_type=PAGE["Content-Type"]))
        for _pass in range(4):  # written, then renewed once the process knows the epochs
            answers = [cast("HttpResponseBase", ours(request)) for request in self.requests()]
            whos_online.flush()
            handed = [answer.cookies.get(whos.COOKIE_NAME) for answer in answers]
            if not any(handed):
                return
            self.cookies = [
                c.value if c else old for c, old in zip(handed, self.cookies, strict=True)
            ]
        raise RuntimeError("the throttle cookies are still renewed after four passes")

    def prepared(self, given: str, config: Any) -> list[HttpRequest]:
        """The requests, with what a step is given of them worked out already."""
        made = self.requests()
        if given == "state":
            for request in made:
                whos.state_of(request)
        return made

    def requests(self) -> list[HttpRequest]:
        return [
            self._request(at, cookie)
            for at, cookie in zip(self.addresses, self.cookies, strict=True)
        ]

    def new_guests(self) -> list[HttpRequest]:
        count = len(self.addresses)
        self.fresh += count
        return [self._request(address(self.fresh + n, "100.64"), "") for n in range(count)]

    def new_prepared(self, stage: str, config: Any) -> list[NewGuest]:
        """New guests' requests taken through the recorded request's steps up to ``stage``
        ("request", "before", "after", "visitor" or "recorded"), before the clock starts."""
        now, made = time.time(), []
        for request in self.new_guests():
            guest = NewGuest(request, now)
            if stage != "request":
                whos.requests.before_view(request, config, now)
            if stage in {"after", "visitor", "recorded"}:
                placement = whos.requests.after_view(
                    guest.state, PAGE, config, now, whos.requests.Decision.RECORD
                )
                assert placement is not None
                guest.placement = placement
            if stage in {"visitor", "recorded"}:
                guest.state.visitor(config, now)
            if stage == "recorded":
                guest.recorded = whos.requests.record_request(
                    guest.state, config, now, guest.placement
                )
            made.append(guest)
        return made

    def _request(self, at: str, cookie: str) -> HttpRequest:
        request = RequestFactory().get(
            "/", HTTP_ACCEPT="text/html", HTTP_X_FORWARDED_FOR=at, HTTP_USER_AGENT=BROWSER
        )
        if cookie:
            request.COOKIES[whos.COOKIE_NAME] = cookie
        request.user = AnonymousUser()
        request.resolver_match = self.match
        return request


@dataclass
class NewGuest:
    """A new guest's request, and what the recorded request's steps before the one timed made
    of it."""

    request: HttpRequest
    now: float
    placement: whos.Placement = whos.STAYS_PUT
    recorded: whos.requests.Recorded | None = None
    #: The view's answer, one per request: the cookie is set on it.
    response: HttpResponse = field(default_factory=lambda: HttpResponse("", content_type=PAGE_TYPE))

    @property
    def state(self) -> whos.RequestState:
        """The request's state, made by ``before_view`` (not before it, for the step that
        times it)."""
        return whos.state_of(self.request)


def recorded_steps(config: Any) -> dict[str, tuple[str, Callable[[NewGuest], object]]]:
    """The recorded request's steps for a new guest, each on its own, in the order the
    middleware takes them, by name: (the stage it is given, what it does)."""

    def record(guest: NewGuest) -> object:
        return whos.requests.record_request(guest.state, config, guest.now, guest.placement)

    def queue(guest: NewGuest) -> object:
        visitor = guest.state.visitor(config, guest.now)
        assert visitor is not None
        visit = whos.visits.visit_of(visitor, config, guest.now, guest.placement, "")
        whos.visits.queue(config, visit, visitor.shard, room_tag="")
        return whos.flusher.after_recording(config)

    def cookie(guest: NewGuest) -> None:
        assert guest.recorded is not None
        whos.requests.hand_out_cookie(guest.state, guest.response, config, guest.recorded)

    return {
        "before the view, no cookie (`requests.before_view`)": (
            "request",
            lambda g: whos.requests.before_view(g.request, config, g.now),
        ),
        "after the view: a page view, its room, its page hit counted": (
            "before",
            lambda g: whos.requests.after_view(
                g.state, PAGE, config, g.now, whos.requests.Decision.RECORD
            ),
        ),
        "who they are: the bot check, the keyed pseudonym, their shard": (
            "after",
            lambda g: g.state.visitor(config, g.now),
        ),
        "recording them (`requests.record_request`)": ("visitor", record),
        "of which the visit made and queued, the flusher told": ("visitor", queue),
        "the throttle cookie made and set on the response": ("recorded", cookie),
    }


#: A step: what it is given of each request (the request, or its state made), and what it
#: does.
Step = tuple[str, "Callable[[HttpRequest], object]"]


def steps(config: Any, sample: HttpRequest) -> dict[str, Step]:
    """The throttled request's steps, each on its own, in the order ``requests.before_view``
    and ``after_view`` take them, and the whole of it; ``sample`` is one of the requests.
    The last two are what a site with rooms adds after the view."""
    now = time.time()
    if config.rooms or config.count_hits:
        raise RuntimeError("the throttled steps are those of a site without rooms or hits")
    read = whos.state_of(sample).sent_cookie(config, now)
    if read is None:
        raise RuntimeError("the browsers' throttle cookies are not genuine")
    throttled = whos.requests.Decision.THROTTLED

    def after(request: HttpRequest) -> object:
        state = whos.state_of(request)
        state.cookie = read
        return whos.requests.after_view(state, PAGE, config, now, throttled)

    return {
        "the request's state, made": ("request", whos.state_of),
        "`IGNORE_PATHS` searched": (
            "request",
            lambda r: [p.search(r.path_info) for p in config.ignore_paths],
        ),
        "what the browser sent: its address and its cookie checked, looked up together": (
            "state",
            lambda r: whos.state_of(r).sent_cookie(config, now),
        ),
        "the shards' epochs: Redis lost nothing since": (
            "request",
            lambda r: whos.epochs.current().outdated(read.epoch, config, now),
        ),
        "before the view, all (`requests.before_view`)": (
            "request",
            lambda r: whos.requests.before_view(r, config, now),
        ),
        "after the view, all: nothing to count, no room (`requests.after_view`)": (
            "state",
            after,
        ),
        WHOLE: ("request", WhosOnlineMiddleware(lambda _: PAGE)),
        "with rooms: a page view? (status, media type, headers)": (
            "request",
            lambda r: whos.rooms.is_page_view(r, PAGE),
        ),
        "with rooms: its room (`ROOMS`)": ("state", lambda r: whos.rooms.room_of(whos.state_of(r))),
    }


#: Visits a flush writes at once in the flusher's row: the batches' call of ``bench batching``.
FLUSHED: Final = 20
FLUSHER: Final = (
    f"the flusher's share of a new guest's visit: its entry, its call of {FLUSHED} (with its "
    "page view's room), the call in RESP"
)


def flushes(config: Any, count: int) -> list[list[whos.Visit]]:
    """``count`` new guests' page views in a room, as the request path queues them, in flushes
    of ``FLUSHED``."""
    now, fresh = time.time(), time.time_ns()
    visits = [
        whos.visits.member_visit("guests", f"{fresh}-{n}", now, room=f"topic:{n % 7}")
        for n in range(count)
    ]
    return [visits[start : start + FLUSHED] for start in range(0, count, FLUSHED)]


FLUSHER_ONE_BY_ONE: Final = (
    "the same, its entry sent as one recorded one by one (14 values, not 6: as before the plain "
    "visits)"
)


def flush(config: Any, visits: list[whos.Visit], *, one_by_one: bool = False) -> object:
    """What the flusher's thread does with ``visits`` before the round trip: their entries, the
    calls, and the calls as redis-py sends them; ``one_by_one`` sends every entry as one the
    script records one by one."""
    entries = [entry for visit in visits for entry in whos.items.entries_of(config, visit)]
    shard = whos.keyspace.layout(config)[0]
    general = mock.patch.object(
        whos.record, "_lanes", lambda given: whos.record._Lanes(list(given), [], [])
    )
    with general if one_by_one else contextlib.nullcontext():
        made = whos.record.batch_calls(config, shard, entries, now=visits[-1].seen_at, epoch="-")
    return [
        PACK("EVALSHA", whos.scripts.sha1_of(call.source), len(call.keys), *call.keys, *call.args)
        for call in made.calls
    ]


def _packer() -> Callable[..., object]:
    """How redis-py packs a command into RESP: hiredis's packer when installed, as the
    flusher's connections do."""
    if redis.utils.HIREDIS_AVAILABLE:
        return cast("Callable[..., object]", redis.connection.HiredisRespSerializer().pack)
    encoder = Encoder("utf-8", "strict", False)  # type: ignore[no-untyped-call]
    return cast(
        "Callable[..., object]", redis.connection.PythonRespSerializer(65536, encoder.encode).pack
    )


PACK: Final = _packer()


def timed(make: Callable[[], list[Any]], step: Callable[[Any], object]) -> float:
    """This thread's CPU per request for ``step``, on requests made before the clock starts."""
    batch = make()
    started = time.thread_time()
    for request in batch:
        step(request)
    return (time.thread_time() - started) / len(batch)


def measure(options: Options) -> dict[str, list[float]]:
    browsers, config = Browsers(options.requests), whos.get_config()
    naive = NaiveZaddMiddleware(lambda _: PAGE)
    ours = WhosOnlineMiddleware(lambda _: PAGE)
    cells: dict[str, tuple[Callable[[], list[Any]], Callable[[Any], object]]] = {
        "naive": (browsers.requests, naive),
        RECORDED: (browsers.new_guests, ours),
        **{
            name: (functools.partial(browsers.new_prepared, stage, config), step)
            for name, (stage, step) in recorded_steps(config).items()
        },
        **{
            name: (functools.partial(browsers.prepared, given, config), step)
            for name, (given, step) in steps(config, browsers.requests()[0]).items()
        },
        FLUSHER: (
            functools.partial(flushes, config, options.requests),
            functools.partial(flush, config),
        ),
        FLUSHER_ONE_BY_ONE: (
            functools.partial(flushes, config, options.requests),
            functools.partial(flush, config, one_by_one=True),
        ),
    }

    def serve(name: str) -> float:
        spent = timed(*cells[name])
        whos_online.flush()  # the new guests' visits, written between the cells
        return spent / FLUSHED if name in {FLUSHER, FLUSHER_ONE_BY_ONE} else spent

    return interleaved(list(cells), options.rounds, serve, label="request parts")


def run(options: Options) -> Section:
    settings = {"TRUSTED_PROXY_COUNT": 1}
    with servers.redis_server() as redis_server:
        url = redis_server.url
        with (
            mock.patch.dict(os.environ, REDIS_URL=url),
            override_settings(WHOS_ONLINE={"REDIS_URL": url, **settings}),
        ):
            measured = measure(options)
    naive = measured.pop("naive")
    micro = fixed(2)
    rows = [
        [
            name,
            Spread.of([v * 1e6 for v in values]).show(micro),
            ratios(values, naive).show(fixed(3)),
        ]
        for name, values in measured.items()
    ]
    recorded, throttled = ratios(measured[RECORDED], naive), ratios(measured[WHOLE], naive)
    return Section(
        "What the middleware's microseconds buy",
        f"{options.requests} IPv4 guests per round (`TRUSTED_PROXY_COUNT` 1, a throttle cookie "
        f"each, or a new guest each time for `recorded`), {options.rounds} interleaved rounds, "
        "the view answering at once. This thread's CPU µs per request, median (min–max), and its "
        f"ratio to the naive middleware's in the same round; the naive middleware: "
        f"{Spread.of([v * 1e6 for v in naive]).show(micro)} µs.",
        [table("step | CPU µs per request | × the naive middleware's", rows)],
        targets=[
            Target(
                f"a recorded request's middleware ≤ {RECORDED_VS_NAIVE:g} × the naive one's "
                "(its thread; the flusher's share apart)",
                f"{recorded.show(fixed(3))} ×",
                recorded.median <= RECORDED_VS_NAIVE,
            ),
            Target(
                f"a throttled request's middleware ≤ {THROTTLED_VS_NAIVE:g} × the naive one's",
                f"{throttled.show(fixed(3))} ×",
                throttled.median <= THROTTLED_VS_NAIVE,
            ),
        ],
    )
