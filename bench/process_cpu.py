"""What a request costs the site's process, whole: the request thread and the flusher thread.

Run from the repository root: ``python3 scripts/dev.py bench process_cpu`` (``--help`` for the
options), or with the other parts: ``python3 scripts/dev.py bench --only process-cpu``.

One worker process serves requests through Django's WSGI handler (a direct call, no server), with
sessions and auth and a view that does nothing, once per middleware: none at all, the naive one
(one ZADD per request, ``bench.naive``), whos_online with its throttle cookie present, and
whos_online recording every request (a new client each time: a new IPv4 or IPv6 address, a user
never recorded before, so that no cookie and no memory spares the write). Each middleware serves
three kinds of clients: guests on IPv4, guests on IPv6 (each in a /64 of its own) and logged-in
users (sessions in Django's local-memory cache, so that loading one costs little). A real
redis-server on loopback takes the writes.

Rounds of ``--requests`` requests per cell, every cell once per round in a rotating order; a
cell's CPU is the process's (``time.process_time``: every thread, so the flusher thread's share
of encoding batches and reading replies counts), from its first request to the end of a flush
made after its last one. Per round, each cell's CPU per request over no middleware (the same kind
of client, in the same round), and its ratio to the naive middleware's: the medians of those
and their range are the figures.

``--against CHECKOUT`` serves the whos_online cells from another checkout of the project too (a
``git worktree`` or ``git archive`` of another commit), in a second worker process, its cells
interleaved with this one's in every round, to compare two versions of the code.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bench import stats
from bench.report import Section, Target, targets_table

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

ROOT: Final = Path(__file__).resolve().parent.parent
KINDS: Final = ("IPv4 guests", "IPv6 guests", "logged-in users")
#: (name, label) of each middleware served; the first is the baseline of its kind of client.
MIDDLEWARES: Final = (
    ("bare", "no middleware (sessions and auth only)"),
    ("naive", "the naive middleware (one ZADD per request)"),
    ("throttled", "whos_online, throttle cookie present"),
    ("recorded", "whos_online, every request recorded (a new client each time)"),
)
#: The targets: a recorded request's CPU over no middleware, as a share of the naive
#: middleware's; a throttled request's CPU over no middleware, in µs.
RECORDED_VS_NAIVE: Final = 0.5
THROTTLED_US: Final = 3.0
REQUESTS: Final = 400
ROUNDS: Final = 15
SECRET: Final = "whos-online-bench-only"  # noqa: S105 (a throw-away site in this process)


# The worker: one process that serves every cell of one checkout.


def _view(request: Any) -> Any:
    from django.http import HttpResponse

    # As any page that shows its visitor whether they are logged in: the user is loaded.
    return HttpResponse("in" if request.user.is_authenticated else "")


def _urlpatterns() -> list[Any]:
    from django.urls import path

    return [path("", _view)]


#: The worker's ROOT_URLCONF is this module: Django reads ``urlpatterns`` from it.
def __getattr__(name: str) -> Any:
    if name == "urlpatterns":
        return _urlpatterns()
    raise AttributeError(name)


def _configure(redis_url: str, prefix: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY=SECRET,
        DEBUG=False,
        ALLOWED_HOSTS=["testserver"],
        USE_TZ=True,
        ROOT_URLCONF="bench.process_cpu",
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "whos_online",
        ],
        MIDDLEWARE=[],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES={
            "default": {
                "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                "OPTIONS": {"MAX_ENTRIES": 1_000_000},
            }
        },
        SESSION_ENGINE="django.contrib.sessions.backends.cache",
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
        STATIC_URL="/static/",
        WHOS_ONLINE={"REDIS_URL": redis_url, "KEY_PREFIX": prefix, "TRUSTED_PROXY_COUNT": 1},
        LOGGING_CONFIG=None,
    )
    django.setup()


@dataclass
class Client:
    """One browser: its address, and its session and throttle cookies."""

    address: str
    session: str = ""
    throttle: str = ""

    def environ(self) -> dict[str, Any]:
        from django.conf import settings

        cookies = []
        if self.session:
            cookies.append(f"{settings.SESSION_COOKIE_NAME}={self.session}")
        if self.throttle:
            cookies.append(f"whos_online={self.throttle}")
        return {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": "/",
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "SERVER_NAME": "testserver",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "testserver",
            "HTTP_X_FORWARDED_FOR": self.address,
            "HTTP_USER_AGENT": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 "
            "Firefox/128.0",
            "HTTP_ACCEPT": "text/html",
            "HTTP_SEC_FETCH_DEST": "document",
            "HTTP_COOKIE": "; ".join(cookies),
            "wsgi.input": io.BytesIO(),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "wsgi.version": (1, 0),
        }


def _address(kind: str, number: int) -> str:
    if kind == "IPv4 guests":
        return f"10.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"
    # A /64 of its own each, with an address inside it as privacy extensions pick them.
    return f"2001:db8:{number >> 16:x}:{number & 0xFFFF:x}:a1b2:c3d4:e5f6:{number % 9973:x}"


class Worker:
    """Every cell of one checkout, served in this process."""

    def __init__(self, requests: int, rounds: int) -> None:
        import redis
        from django.core.handlers.wsgi import WSGIHandler
        from django.core.management import call_command
        from django.test import override_settings

        call_command("migrate", verbosity=0)
        self.requests = requests
        base = [
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
        ]
        chains = {
            "bare": base,
            "naive": [*base, "bench.naive.NaiveZaddMiddleware"],
            "whos_online": [*base, "whos_online.middleware.WhosOnlineMiddleware"],
        }
        self.handlers: dict[str, WSGIHandler] = {}
        for name, chain in chains.items():
            with override_settings(MIDDLEWARE=chain):
                self.handlers[name] = WSGIHandler()
        # Clients of each kind: a fixed set that carries throttle cookies (also served with no
        # middleware and the naive one), and new ones for every recorded request.
        self.fixed = {kind: self._clients(kind, 0, requests) for kind in KINDS}
        fresh = requests * (rounds + 1)
        self.fresh = {kind: iter(self._clients(kind, requests, fresh)) for kind in KINDS}
        self.cookies_at = 0.0
        self.admin = redis.Redis.from_url(os.environ["REDIS_URL"])

    def _clients(self, kind: str, start: int, count: int) -> list[Client]:
        clients = [Client(_address(kind, start + n)) for n in range(count)]
        if kind == "logged-in users":
            for client, session in zip(clients, _sessions(start, count), strict=True):
                client.session = session
        return clients

    def serve(self, handler: Callable[..., Any], environ: dict[str, Any]) -> Any:
        response = handler(environ, _start_response)
        response.close()
        return response

    def settle_cookies(self) -> None:
        """Give each fixed client the throttle cookie a browser would hold: recorded, written,
        and renewed once the process knows its shard's epoch; until a pass hands out none."""
        from whos_online import flush
        from whos_online.recording import throttle

        handler = self.handlers["whos_online"]
        # Written afresh, for cookies that run THROTTLE from now: neither an old cookie nor the
        # process's memory of recent visitors (which hands out a cookie running from the visit
        # it remembers) spares the first pass.
        for clients in self.fixed.values():
            for client in clients:
                client.throttle = ""
        throttle.recent.clear()
        for _pass in range(4):
            handed_out = 0
            for clients in self.fixed.values():
                for client in clients:
                    cookie = self.serve(handler, client.environ()).cookies.get("whos_online")
                    if cookie is not None:
                        client.throttle = cookie.value
                        handed_out += 1
            flush()
            if not handed_out:
                self.cookies_at = time.monotonic()
                return
        raise RuntimeError("the throttle cookies are still renewed after four passes")

    def cell(self, middleware: str, kind: str) -> dict[str, float]:
        """Serve one cell; CPU seconds per request of the process and of this thread."""
        from whos_online import flush

        if middleware == "throttled" and time.monotonic() - self.cookies_at > 30:
            self.settle_cookies()
        if middleware == "recorded":
            fresh = self.fresh[kind]
            clients = [next(fresh) for _ in range(self.requests)]
        else:
            clients = self.fixed[kind]
        environs = [client.environ() for client in clients]
        commands = self._commands()
        handler = self.handlers[
            "whos_online" if middleware in {"throttled", "recorded"} else middleware
        ]
        serve = self.serve
        started, thread_started = time.process_time(), time.thread_time()
        for environ in environs:
            serve(handler, environ)
        thread = time.thread_time() - thread_started
        written = flush()
        cpu = time.process_time() - started
        if not written:
            raise RuntimeError("a flush failed on a healthy Redis")
        if middleware == "throttled" and self._commands() - commands > 1:
            raise RuntimeError("a throttled request was recorded: its cookie did not spare it")
        return {"cpu": cpu / len(environs), "thread": thread / len(environs)}

    def _commands(self) -> int:
        """Commands Redis ran so far (the INFO that asks counts once it has run)."""
        return int(self.admin.info("stats")["total_commands_processed"])


def _start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
    if not status.startswith("200"):
        raise RuntimeError(f"the view answered {status}")


def _sessions(start: int, count: int) -> list[str]:
    """Users ``bench<start>`` … logged in, one session each: their session keys."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.cache import SessionStore

    unusable = "!"  # a password no one can log in with: the sessions say who is logged in
    made = User.objects.bulk_create(
        [User(username=f"bench{start + n}", password=unusable) for n in range(count)]
    )
    keys = []
    for user in made:
        session = SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        assert session.session_key is not None
        keys.append(session.session_key)
    return keys


def work(redis_url: str, prefix: str, checkout: Path, requests: int, rounds: int) -> int:
    """The worker's loop: a line of JSON in (a cell to serve), a line of JSON out."""
    os.environ["REDIS_URL"] = redis_url  # the naive middleware reads it
    if checkout != ROOT:
        # whos_online from the other checkout; the bench's own modules are imported already.
        import bench.naive  # noqa: F401

        sys.path.insert(0, str(checkout))
    _configure(redis_url, prefix)
    import whos_online

    if not Path(whos_online.__file__).resolve().is_relative_to(checkout.resolve()):
        raise RuntimeError(f"whos_online came from {whos_online.__file__}, not {checkout}")
    worker = Worker(requests, rounds)
    worker.settle_cookies()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        asked = json.loads(line)
        print(json.dumps(worker.cell(asked["middleware"], asked["kind"])), flush=True)
    return 0


# The parent: starts a redis-server and a worker per checkout, and hands them cells in turns.


class _Process:
    def __init__(self, label: str, checkout: Path, redis_url: str, requests: int, rounds: int):
        self.label = label
        command = [
            sys.executable,
            "-m",
            "bench.process_cpu",
            "--worker",
            "--redis-url",
            redis_url,
            "--prefix",
            f"cpu-{label}",
            "--checkout",
            str(checkout),
            "--requests",
            str(requests),
            "--rounds",
            str(rounds),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self._read()

    def _read(self) -> dict[str, float]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker of {self.label} ended: exit {self.process.wait()}")
        return json.loads(line)  # type: ignore [no-any-return]

    def cell(self, middleware: str, kind: str) -> dict[str, float]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"middleware": middleware, "kind": kind}) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


#: A cell: (the checkout's label, middleware, kind of client).
Cell = tuple[str, str, str]


def measure(
    checkouts: Sequence[tuple[str, Path]], requests: int, rounds: int
) -> dict[Cell, list[dict[str, float]]]:
    from bench import servers

    measured: dict[Cell, list[dict[str, float]]] = defaultdict(list)
    with servers.redis_server() as server:
        workers = {}
        try:
            for label, checkout in checkouts:
                workers[label] = _Process(label, checkout, server.url, requests, rounds)
            cells: list[Cell] = [
                (label, middleware, kind)
                for label, _checkout in checkouts
                for middleware, _ in MIDDLEWARES
                for kind in KINDS
            ]
            for cell in cells:  # a round to warm up, not counted
                workers[cell[0]].cell(cell[1], cell[2])
            for round_number in range(rounds):
                progress(f"round {round_number + 1} of {rounds}…")
                for cell in stats.rotated(cells, round_number * 5):
                    measured[cell].append(workers[cell[0]].cell(cell[1], cell[2]))
        finally:
            for worker in workers.values():
                worker.close()
    return measured


def _over(
    measured: dict[Cell, list[dict[str, float]]], cell: Cell, what: str = "cpu"
) -> list[float]:
    """Per round: the cell's CPU per request less no middleware's (same checkout and kind)."""
    bare = measured[(cell[0], "bare", cell[2])]
    return [value[what] - base[what] for value, base in zip(measured[cell], bare, strict=True)]


def report(
    measured: dict[Cell, list[dict[str, float]]],
    checkouts: Sequence[tuple[str, Path]],
    requests: int,
    rounds: int,
) -> Section:
    ours = checkouts[0][0]
    labels = dict(MIDDLEWARES)
    rows = []
    for label, checkout in checkouts:
        for kind in KINDS:
            naive_over = _over(measured, (label, "naive", kind))
            for middleware, _ in MIDDLEWARES:
                if label != ours and middleware in {"bare", "naive"}:
                    continue
                cell = (label, middleware, kind)
                cpu = [value["cpu"] for value in measured[cell]]
                over = _over(measured, cell)
                thread_over = _over(measured, cell, "thread")
                name = labels[middleware] + ("" if label == ours else f", from {checkout}")
                rows.append(
                    [
                        kind,
                        name,
                        stats.Spread.of(cpu).show(_us),
                        stats.Spread.of(over).show(_us),
                        _us(statistics.median(thread_over)),
                        _us(
                            statistics.median(
                                [a - b for a, b in zip(over, thread_over, strict=True)]
                            )
                        ),
                        ""
                        if middleware == "bare"
                        else stats.ratios(over, naive_over).show(stats.ratio),
                    ]
                )
    table = stats.table(
        [
            "clients",
            "middleware",
            "process CPU µs per request",
            "over no middleware",
            "of which serving the requests (their thread)",
            "the rest: writing them (the flusher's work)",
            "× the naive middleware's (over no middleware)",
        ],
        rows,
    )
    notes = []
    if len(checkouts) > 1:
        for kind in KINDS:
            for middleware in ("throttled", "recorded"):
                now = _over(measured, (ours, middleware, kind))
                then = _over(measured, (checkouts[1][0], middleware, kind))
                notes.append(
                    f"{labels[middleware]}, {kind}: {_us(statistics.median(now))} µs over no "
                    f"middleware against {_us(statistics.median(then))} from "
                    f"{checkouts[1][1]}, {stats.ratios(now, then).show(stats.ratio)} × "
                    "in the same rounds"
                )
    return Section(
        title="A request's CPU in the site's process",
        intro=(
            f"{rounds} rounds of {requests} requests per cell, every cell once per round in a "
            "rotating order, through Django's WSGI handler with sessions (in the local-memory "
            "cache) and auth and a view that does nothing, in one process per checkout; a "
            "real redis-server on loopback. CPU of the whole process (every thread: the "
            "flusher's share counts) per request, from the cell's first request to the end of "
            "a flush after its last; over no middleware: less the same kind of clients' CPU "
            "with no middleware in the same round. Median (min–max) over the rounds; µs."
        ),
        tables=[table],
        notes=notes,
        targets=targets(measured, ours),
    )


def targets(measured: dict[Cell, list[dict[str, float]]], ours: str) -> list[Target]:
    found = []
    recorded, throttled = [], []
    for kind in KINDS:
        ratio = stats.ratios(
            _over(measured, (ours, "recorded", kind)), _over(measured, (ours, "naive", kind))
        )
        recorded.append((kind, ratio))
        throttled.append((kind, stats.Spread.of(_over(measured, (ours, "throttled", kind)))))
    found.append(
        Target(
            f"a recorded request's process CPU over no middleware ≤ {RECORDED_VS_NAIVE:g} × the "
            "naive middleware's",
            "; ".join(f"{kind}: {ratio.show(stats.ratio)} ×" for kind, ratio in recorded),
            all(ratio.median <= RECORDED_VS_NAIVE for _, ratio in recorded),
        )
    )
    found.append(
        Target(
            f"a throttled request's process CPU ≤ {THROTTLED_US:g} µs over no middleware",
            "; ".join(f"{kind}: {spread.show(_us)} µs" for kind, spread in throttled),
            all(spread.median * 1e6 <= THROTTLED_US for _, spread in throttled),
        )
    )
    return found


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def run(against: Path | None = None, requests: int = REQUESTS, rounds: int = ROUNDS) -> Section:
    """The part of ``python -m bench``."""
    checkouts = [("this", ROOT)]
    if against is not None:
        checkouts.append(("against", against.resolve()))
    measured = measure(checkouts, requests, rounds)
    return report(measured, checkouts, requests, rounds)


def progress(message: str) -> None:
    print(f"process-cpu: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.process_cpu", description=__doc__)
    parser.add_argument("--requests", type=int, default=REQUESTS, help="requests per cell")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of every cell")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="CHECKOUT",
        help="also serve the whos_online cells from this other checkout, interleaved",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--checkout", type=Path, default=ROOT, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        return work(
            options.redis_url, options.prefix, options.checkout, options.requests, options.rounds
        )
    started = time.monotonic()
    section = run(options.against, options.requests, options.rounds)
    print(section.markdown() + "\n")
    print(targets_table(section.targets))
    print(f"The whole run took {time.monotonic() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
