"""What a request costs the site's whole process (the request thread and the flusher thread),
over no middleware, against the naive ZADD middleware's.

A worker process per checkout serves requests through Django's WSGI handler (no server), with
sessions (local-memory cache) and auth and a view that asks whether its user is logged in: with
no middleware, the naive one, whos_online throttled, and whos_online recording every request (a
new client each time), for IPv4 guests, IPv6 guests and logged-in users. A cell's CPU is the
process's (``time.process_time``) from its first request to the end of a flush after its last.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import redis

from bench.harness import servers
from bench.harness.clients import BROWSER
from bench.harness.report import Section, Target, ratio, table
from bench.harness.rounds import Spread, interleaved, minus, ratios

KINDS: Final = ("IPv4 guests", "IPv6 guests", "logged-in users")
#: The middlewares served; the first is the baseline of its kind of client.
MIDDLEWARES: Final = {
    "bare": "no middleware (sessions and auth only)",
    "naive": "the naive middleware (one ZADD per request)",
    "throttled": "whos_online, throttle cookie present",
    "recorded": "whos_online, every request recorded (a new client each time)",
}
#: The goals: a recorded request's CPU over no middleware, and a throttled one's, as shares of
#: the naive middleware's (shares, so that the goal holds on a faster or slower machine).
RECORDED_VS_NAIVE: Final = 0.5
THROTTLED_VS_NAIVE: Final = 0.065
#: A cell: (the checkout's label, middleware, kind of client).
Cell = tuple[str, str, str]


@dataclass(frozen=True)
class Options:
    requests: int = 400
    rounds: int = 15
    #: Another checkout whose whos_online cells a second worker serves, interleaved.
    against: Path | None = None


QUICK = Options(requests=50, rounds=1)


def view(request: Any) -> Any:
    from django.http import HttpResponse

    # As a page that shows whether its visitor is logged in: the user is loaded.
    return HttpResponse("in" if request.user.is_authenticated else "")


def __getattr__(name: str) -> Any:
    """The worker's ``ROOT_URLCONF`` is this module."""
    if name == "urlpatterns":
        from django.urls import path

        return [path("", view)]
    raise AttributeError(name)


@dataclass
class Client:
    """A browser: its address, and its session and throttle cookies."""

    address: str
    session: str = ""
    throttle: str = ""

    def environ(self) -> dict[str, Any]:
        cookies = (("sessionid", self.session), ("whos_online", self.throttle))
        cookie = "; ".join(f"{name}={value}" for name, value in cookies if value)
        return {
            "REQUEST_METHOD": "GET", "PATH_INFO": "/", "SCRIPT_NAME": "", "QUERY_STRING": "",
            "SERVER_NAME": "testserver", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "testserver",
            "HTTP_X_FORWARDED_FOR": self.address, "HTTP_ACCEPT": "text/html",
            "HTTP_USER_AGENT": BROWSER,
            "HTTP_SEC_FETCH_DEST": "document", "HTTP_COOKIE": cookie,
            "wsgi.input": io.BytesIO(), "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr,
        }  # fmt: skip


def clients(kind: str, start: int, count: int) -> list[Client]:
    """Browsers of ``kind``: an IPv4 address each, a /64 each, or a logged-in user each."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.cache import SessionStore

    if kind == "IPv4 guests":
        return [
            Client(f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}")
            for n in range(start, start + count)
        ]
    made = [
        Client(f"2001:db8:{n >> 16:x}:{n & 0xFFFF:x}:a1b2:c3d4:e5f6:{n % 9973:x}")
        for n in range(start, start + count)
    ]
    if kind == "logged-in users":
        unusable = "!"  # a password no one logs in with: the sessions say who is logged in
        named = [User(username=f"bench{start + n}", password=unusable) for n in range(count)]
        users = User.objects.bulk_create(named)
        for client, user in zip(made, users, strict=True):
            session = SessionStore()
            session[SESSION_KEY] = str(user.pk)
            session[HASH_SESSION_KEY] = user.get_session_auth_hash()
            session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
            session.create()
            client.session = str(session.session_key)
    return made


@dataclass
class Worker:
    """Every cell of one checkout, served in this process."""

    requests: int
    rounds: int
    handlers: dict[str, Any] = field(default_factory=dict)
    cookies_at: float = 0.0
    redis: redis.Redis = field(
        default_factory=lambda: redis.Redis.from_url(os.environ["REDIS_URL"])
    )

    def __post_init__(self) -> None:
        from django.core.handlers.wsgi import WSGIHandler
        from django.test import override_settings

        base = [
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
        ]
        chains = {
            "bare": [],
            "naive": ["bench.naive.NaiveZaddMiddleware"],
            "whos_online": ["whos_online.middleware.WhosOnlineMiddleware"],
        }
        for name, chain in chains.items():
            with override_settings(MIDDLEWARE=base + chain):
                self.handlers[name] = WSGIHandler()
        # Per kind: a fixed set carrying throttle cookies, and new clients for recorded requests.
        self.fixed = {kind: clients(kind, 0, self.requests) for kind in KINDS}
        self.fresh = {
            kind: iter(clients(kind, self.requests, self.requests * (self.rounds + 1)))
            for kind in KINDS
        }

    def commands(self) -> int:
        """Scripts Redis ran since the last reset: a recorded visit runs one."""
        found = self.redis.info("commandstats")
        return sum(
            int(found.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval")
        )

    def serve(self, handler: str, client: Client) -> Any:
        response = self.handlers[handler](client.environ(), lambda status, headers, *_: None)
        response.close()
        if response.status_code != 200:
            raise RuntimeError(f"the view answered {response.status_code}")
        return response

    def settle_cookies(self) -> None:
        """Give each fixed client the throttle cookie a browser would hold: written afresh, and
        renewed once the process knows its shard's epoch; until a pass hands out none."""
        import whos_online
        from bench.internals import forget_recent_clients

        forget_recent_clients()  # its memory would hand out cookies running from older visits
        for client in (c for clients in self.fixed.values() for c in clients):
            client.throttle = ""
        for _pass in range(4):
            handed = 0
            for client in (c for clients in self.fixed.values() for c in clients):
                if (
                    cookie := self.serve("whos_online", client).cookies.get("whos_online")
                ) is not None:
                    client.throttle, handed = cookie.value, handed + 1
            whos_online.flush()
            if not handed:
                self.cookies_at = time.monotonic()
                return
        raise RuntimeError("the throttle cookies are still renewed after four passes")

    def cell(self, middleware: str, kind: str) -> dict[str, float]:
        """Serve one cell: CPU seconds per request of the process and of this thread."""
        import whos_online

        if middleware == "throttled" and time.monotonic() - self.cookies_at > 30:
            self.settle_cookies()
        batch = (
            [next(self.fresh[kind]) for _ in range(self.requests)]
            if middleware == "recorded"
            else self.fixed[kind]
        )
        handler = middleware if middleware in {"bare", "naive"} else "whos_online"
        self.redis.config_resetstat()
        started, thread = time.process_time(), time.thread_time()
        for client in batch:
            self.serve(handler, client)
        thread = time.thread_time() - thread
        if not whos_online.flush():
            raise RuntimeError("a flush failed on a healthy Redis")
        if middleware == "throttled" and self.commands():
            raise RuntimeError("a throttled request was recorded: its cookie did not spare it")
        return {"cpu": (time.process_time() - started) / len(batch), "thread": thread / len(batch)}


def work(redis_url: str, checkout: Path, requests: int, rounds: int) -> None:
    """The worker: a line of JSON in (a cell to serve), a line of JSON out."""
    import django
    from django.conf import settings
    from django.core.management import call_command

    os.environ["REDIS_URL"] = redis_url  # the naive middleware reads it
    import bench.naive  # noqa: F401 (from this checkout, before whos_online from the other)

    sys.path.insert(0, str(checkout))
    apps = ["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions"]
    cache = "django.core.cache.backends.locmem.LocMemCache"
    settings.configure(
        SECRET_KEY="whos-online-bench-only",  # noqa: S106 (a throw-away site)
        ALLOWED_HOSTS=["testserver"],
        USE_TZ=True,
        ROOT_URLCONF="bench.process_cpu",
        INSTALLED_APPS=[*apps, "whos_online"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES={"default": {"BACKEND": cache, "OPTIONS": {"MAX_ENTRIES": 1_000_000}}},
        SESSION_ENGINE="django.contrib.sessions.backends.cache",
        LOGGING_CONFIG=None,
        WHOS_ONLINE={
            "REDIS_URL": redis_url,
            "KEY_PREFIX": f"cpu-{os.getpid()}",
            "TRUSTED_PROXY_COUNT": 1,
        },
    )
    django.setup()
    call_command("migrate", verbosity=0)
    import whos_online

    if not Path(whos_online.__file__).resolve().is_relative_to(checkout.resolve()):
        raise RuntimeError(f"whos_online came from {whos_online.__file__}, not {checkout}")
    worker = Worker(requests, rounds)
    worker.settle_cookies()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(json.dumps(worker.cell(*json.loads(line))), flush=True)


class Process:
    """A worker process, handed cells one at a time."""

    def __init__(self, checkout: Path, redis_url: str, options: Options) -> None:
        argv = [redis_url, str(checkout), str(options.requests), str(options.rounds)]
        env = {**os.environ, "PYTHONPATH": str(servers.ROOT), "PYTHONHASHSEED": "0"}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        command = [sys.executable, "-m", "bench.process_cpu", *argv]
        self.process = subprocess.Popen(
            command,
            cwd=servers.ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ask(None)

    def ask(self, cell: tuple[str, str] | None) -> dict[str, float]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        if cell is not None:
            self.process.stdin.write(json.dumps(cell) + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"a worker ended: exit {self.process.wait()}")
        return dict(json.loads(line))


def microseconds(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def over(
    measured: dict[Cell, list[dict[str, float]]], cell: Cell, what: str = "cpu"
) -> list[float]:
    """Per round: the cell's CPU per request less no middleware's (same checkout and kind)."""
    bare = measured[cell[0], "bare", cell[2]]
    return minus([m[what] for m in measured[cell]], [b[what] for b in bare])


def report(
    measured: dict[Cell, list[dict[str, float]]], checkouts: dict[str, Path]
) -> tuple[list[list[str]], list[str]]:
    show = microseconds
    rows, notes = [], []
    for label, checkout in checkouts.items():
        for kind in KINDS:
            naive = over(measured, ("this", "naive", kind))
            for middleware in MIDDLEWARES:
                cell = (label, middleware, kind)
                if cell not in measured:
                    continue
                cpu, thread = over(measured, cell), over(measured, cell, "thread")
                name = MIDDLEWARES[middleware] + ("" if label == "this" else f", from {checkout}")
                times = "" if middleware == "bare" else ratios(cpu, naive).show(ratio)
                cells = [
                    Spread.of([m["cpu"] for m in measured[cell]]).show(show),
                    Spread.of(cpu).show(show),
                ]
                rows.append(
                    [
                        kind,
                        name,
                        *cells,
                        show(Spread.of(thread).median),
                        show(Spread.of(minus(cpu, thread)).median),
                        times,
                    ]
                )
                if label != "this" and middleware != "bare":
                    ours = over(measured, ("this", middleware, kind))
                    notes.append(
                        f"{name}, {kind}: {show(Spread.of(ours).median)} µs over no middleware "
                        f"against {show(Spread.of(cpu).median)}, {ratios(ours, cpu).show(ratio)} "
                        "× in the same rounds"
                    )
    return rows, notes


def targets(measured: dict[Cell, list[dict[str, float]]]) -> list[Target]:
    def of_naive(middleware: str) -> dict[str, Spread]:
        return {
            kind: ratios(
                over(measured, ("this", middleware, kind)), over(measured, ("this", "naive", kind))
            )
            for kind in KINDS
        }

    recorded, throttled = of_naive("recorded"), of_naive("throttled")
    return [
        Target(
            f"a recorded request's process CPU over no middleware ≤ {RECORDED_VS_NAIVE:g} × the "
            "naive middleware's",
            "; ".join(f"{kind}: {spread.show(ratio)} ×" for kind, spread in recorded.items()),
            all(spread.median <= RECORDED_VS_NAIVE for spread in recorded.values()),
        ),
        Target(
            f"a throttled request's process CPU over no middleware ≤ {THROTTLED_VS_NAIVE:g} × the "
            "naive middleware's",
            "; ".join(f"{kind}: {spread.show(ratio)} ×" for kind, spread in throttled.items()),
            all(spread.median <= THROTTLED_VS_NAIVE for spread in throttled.values()),
        ),
    ]


def run(options: Options) -> Section:
    checkouts = {"this": servers.ROOT} | (
        {} if options.against is None else {"against": options.against.resolve()}
    )
    with servers.redis_server() as server:
        workers = {
            label: Process(checkout, server.url, options) for label, checkout in checkouts.items()
        }
        try:
            cells = [
                (label, m, kind)
                for label in checkouts
                for m in MIDDLEWARES
                for kind in KINDS
                if label == "this" or m in {"bare", "throttled", "recorded"}
            ]
            for cell in cells:  # a round to warm up, not counted
                workers[cell[0]].ask(cell[1:])
            measured = interleaved(
                cells,
                options.rounds,
                lambda c: workers[c[0]].ask(c[1:]),
                label="process CPU",
                step=5,
            )
        finally:
            for worker in workers.values():
                assert worker.process.stdin is not None
                worker.process.stdin.close()
                worker.process.wait(timeout=60)
    rows, notes = report(measured, checkouts)
    return Section(
        "A request's CPU in the site's process",
        f"{options.rounds} rounds of {options.requests} requests per cell, every cell once per "
        "round in a rotating order, one worker process per checkout; CPU of the whole process "
        "(every thread: the flusher's share counts) per request, over no middleware: less the "
        "same kind of clients' CPU with no middleware in the same round. Median (min–max) over "
        "the rounds; µs.",
        [
            table(
                "clients | middleware | process CPU µs per request | over no middleware | of "
                "which serving the requests (their thread) | the rest: writing them (the "
                "flusher's work) | × the naive middleware's (over no middleware)",
                rows,
            )
        ],
        notes=notes,
        targets=targets(measured),
    )


if __name__ == "__main__":
    work(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
