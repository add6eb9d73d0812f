"""The bench site's ASGI applications, as uvicorn's ``--factory`` makes them: Django's own, and
the same in ``whos_online.asgi.LiveStreams``, as a site that installs it serves it. Each notes
its worker's pauses (``pauses``): when its event loop ran late, and each full pass of the
garbage collector, as the benches that ask see them from the worker itself.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    Application = Callable[..., Any]

#: Seconds between two looks at the event loop, and how late one must be to be noted.
EVERY: Final = 0.02
LATE: Final = 0.05
#: The garbage collector's oldest generation, which a full pass collects.
OLDEST: Final = 2


class Pause(NamedTuple):
    #: "late" (the event loop) or "collection" (a full pass of the garbage collector); when it
    #: ended (Unix time), and how long it was.
    kind: str
    ended: float
    seconds: float


def pauses_file(directory: Path) -> Path:
    """Where the worker of the site served from ``directory`` (its database's, its log's)
    notes its pauses."""
    return directory / "pauses.log"


def pauses(directory: Path) -> Iterator[Pause]:
    found = pauses_file(directory)
    if found.exists():
        for line in found.read_text().splitlines():
            kind, ended, seconds = line.split()
            yield Pause(kind, float(ended), float(seconds))


# The site's modules are imported by the worker alone: this one's pauses are read elsewhere too.


def django() -> Application:
    from django.core.asgi import get_asgi_application

    return Watched(get_asgi_application())


def live_streams() -> Application:
    from django.core.asgi import get_asgi_application

    from whos_online.asgi import LiveStreams

    return Watched(LiveStreams(get_asgi_application()))


class Watched:
    """``application``, with its worker's pauses noted from its first call (uvicorn's lifespan
    call, at start-up) in ``pauses_file``."""

    def __init__(self, application: Application) -> None:
        self.application = application
        self._notes = pauses_file(Path(os.environ["WHOS_ONLINE_BENCH_DB"]).parent).open(
            "a", buffering=1
        )
        self._watching: asyncio.Task[None] | None = None
        self._collecting = 0.0
        gc.callbacks.append(self._collected)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._watching is None:
            self._watching = asyncio.ensure_future(self._watch())
        await self.application(scope, receive, send)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(EVERY)
            late = loop.time() - before - EVERY
            if late >= LATE:
                self._note("late", late)

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != OLDEST:
            return
        if phase == "start":
            self._collecting = time.perf_counter()
        else:
            self._note("collection", time.perf_counter() - self._collecting)

    def _note(self, kind: str, seconds: float) -> None:
        self._notes.write(f"{kind} {time.time():.3f} {seconds:.4f}\n")
