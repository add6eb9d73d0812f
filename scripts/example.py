"""Run the example site (``python3 scripts/dev.py example``, which runs it in nox's ``example``
session): migrate, seed the demo, and serve it with uvicorn, which carries the chat's WebSockets
too (``example_project/asgi.py``).

Unless ``REDIS_URL`` is set, a throw-away redis-server (the one the test session uses, from the
``server`` dependency group) runs on a free loopback port for as long as the site does. Its URL is
given to the site's process only, so the cleanup command to run by hand is printed with it.
An argument gives the address to serve on, as runserver takes it (default ``127.0.0.1:8000``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.redis_server import RedisServer  # noqa: E402 - after the root is importable


def manage(*arguments: str, env: dict[str, str]) -> int:
    return subprocess.call([sys.executable, "manage.py", *arguments], cwd=ROOT, env=env)


def serve(arguments: list[str], env: dict[str, str]) -> int:
    for step in (["migrate", "--noinput"], ["whos_online_demo"]):
        code = manage(*step, env=env)
        if code:
            return code
    host, _, port = (arguments[0] if arguments else "127.0.0.1:8000").rpartition(":")
    command = [sys.executable, "-m", "uvicorn", "example_project.asgi:application"]
    command += ["--host", host or "127.0.0.1", "--port", port]
    print(f"example: serving http://{host or '127.0.0.1'}:{port}/", flush=True)
    try:
        return subprocess.call(command, cwd=ROOT, env=env)
    except KeyboardInterrupt:
        return 0


def main() -> int:
    env = dict(os.environ)
    if env.get("REDIS_URL"):
        return serve(sys.argv[1:], env)
    server = RedisServer()
    server.start()
    try:
        python = Path(sys.executable)
        if python.is_relative_to(ROOT):
            python = python.relative_to(ROOT)
        command = shlex.join([str(python), "manage.py", "whos_online_cleanup"])
        print(f"example: redis-server is listening at {server.url}", flush=True)
        print(f"example: to clean it up: REDIS_URL={server.url} {command}", flush=True)
        return serve(sys.argv[1:], {**env, "REDIS_URL": server.url})
    finally:
        server.close()


if __name__ == "__main__":
    sys.exit(main())
