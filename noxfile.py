"""The project's sessions: lint, the tests (on one interpreter, the supported matrix, or the oldest
dependencies), the docs, the example site and the benchmarks. ``nox -l`` lists them.

Each session installs the project with the dependency groups of ``pyproject.toml``, in a virtual
environment of its own under ``.nox/``, with uv where it is installed (pip otherwise). A session
whose interpreter cannot be found fails instead of being skipped: a matrix that silently shrinks
is not a matrix.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["lint", "tests", "docs"]

#: The Python versions each Django release supports, as the test matrix runs them.
DJANGO_PYTHONS = {
    "5.2": ("3.10", "3.11", "3.12", "3.13", "3.14"),
    "6.0": ("3.12", "3.13", "3.14"),
    "6.1": ("3.12", "3.13", "3.14"),
}
MATRIX = [
    nox.param(python, django, id=f"{python}-django{django}")
    for django, pythons in DJANGO_PYTHONS.items()
    for python in pythons
]
#: The oldest redis-py and django-redis that ``pyproject.toml`` accepts, run by ``floor``.
FLOOR = ("django>=5.2,<5.3", "redis==5.0.*", "django-redis==5.4.*")
LINTED = ["whos_online", "tests", "example_project", "scripts", "bench", "manage.py", "noxfile.py"]
#: The hosted CI's workflows, checked by the lint session.
WORKFLOWS = ".github/workflows"
#: Branch coverage (of the package and the tests) that a run of the whole suite must reach,
#: compared to the decimals of ``[tool.coverage.report] precision`` in pyproject.toml.
COVERAGE_FLOOR = 97


def install(
    session: nox.Session, *groups: str, extras: tuple[str, ...] = (), pins: tuple[str, ...] = ()
) -> None:
    """The project (editable, with ``extras``), the given dependency groups, and ``pins`` over
    them."""
    arguments = ["-e", f".[{','.join(extras)}]" if extras else "."]
    for group in groups:
        arguments += ["--group", group]
    session.install(*arguments)
    if pins:
        session.install(*pins)


#: pytest-xdist's workers: one per core, at most four (each starts its own redis-server, and the
#: servers and browsers of its tests); a test file stays on one worker, so that a module's cluster
#: or Sentinel group is started once. ``-n 0`` among the session's arguments runs in one process.
WORKERS = ("-n", "auto", "--maxprocesses", "4", "--dist", "loadfile")


def pytest(session: nox.Session, *arguments: str) -> None:
    # pytest exits with 5 when it collected no test: only 0 counts as success here.
    session.run("python", "-m", "pytest", *WORKERS, *arguments, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format) and mypy, which reads the test dependencies' types too; and the
    hosted workflows, which cannot run here: GitHub's schema (as check-jsonschema vendors it)
    and zizmor's audits, offline (no GitHub token, no request)."""
    install(session, "test", "lint", "tools")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy", *LINTED)
    workflows = sorted(str(path) for path in Path(WORKFLOWS).glob("*.yml"))
    session.run("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *workflows)
    session.run("zizmor", "--offline", "--no-progress", WORKFLOWS)


@nox.session
def tests(session: nox.Session) -> None:
    """The whole suite on the current interpreter and the newest dependencies, with the branch
    coverage gate. Arguments after ``--`` go to pytest (``-m "not slow"`` for a quick run)."""
    install(session, "test")
    coverage = ["--cov", "--cov-report=term:skip-covered"]
    if not session.posargs:  # a run of some tests only covers some of the code
        coverage.append(f"--cov-fail-under={COVERAGE_FLOOR}")
    pytest(session, *coverage)


@nox.session
@nox.parametrize(("python", "django"), MATRIX)
def matrix(session: nox.Session, django: str) -> None:
    """The suite on one supported pair of Python and Django."""
    install(session, "test", pins=(f"django~={django}.0",))
    pytest(session, "-p", "no:randomly")


@nox.session(python="3.10")
def floor(session: nox.Session) -> None:
    """The suite on the oldest Python, Django, redis-py and django-redis the package accepts."""
    install(session, "test", pins=FLOOR)
    pytest(session, "-p", "no:randomly")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site, with every Sphinx warning an error."""
    install(session, "docs")
    session.run(
        "sphinx-build", "-W", "--keep-going", "-n", "-b", "html", "docs", "docs/_build/html"
    )


@nox.session
def package(session: nox.Session) -> None:
    """Build the wheel and the sdist as a release would, and have twine check them."""
    session.install("build", "twine")
    out = Path(session.create_tmp()) / "dist"
    shutil.rmtree(out, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", str(out))
    session.run("twine", "check", "--strict", *sorted(str(path) for path in out.iterdir()))


@nox.session
def example(session: nox.Session) -> None:
    """The example site, on a throw-away redis-server unless ``REDIS_URL`` is set, served by
    uvicorn with its chat's Channels (the ``example`` group); its /metrics page needs the
    ``prometheus`` extra."""
    install(session, "server", "example", extras=("prometheus",))
    session.run("python", "scripts/example.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks (``python -m bench``); wrk, lua5.1 and valgrind come from Debian's archive
    when missing.

    Arguments go to ``python -m bench``: ``scripts/dev.py bench capacity --repeats 3`` runs the
    capacity part alone, ``scripts/dev.py bench --quick`` every default part, small.
    """
    parts = list(itertools.takewhile(lambda word: not word.startswith("-"), session.posargs))
    wants_wrk = not parts or bool({"throughput", "streams_requests"} & set(parts))
    if wants_wrk and shutil.which("wrk") is None:
        _install_debian(session, "wrk")
    if "lua_replay" in parts and shutil.which("lua5.1") is None:
        _install_debian(session, "lua5.1")
    if "instructions" in parts and shutil.which("valgrind") is None:
        _install_debian(session, "valgrind")
    install(session, "bench", "test")
    session.run("python", "-m", "bench", *session.posargs)


def _install_debian(session: nox.Session, program: str) -> None:
    """wrk, lua5.1 and valgrind are C programs, not Python packages: take them from Debian's
    archive when allowed."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get")):
        session.error(
            f"bench needs {program}: install Debian's package (apt-get install {program})"
        )
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    session.run("apt-get", "update", "-q", env=env, external=True)
    session.run("apt-get", "install", "-y", "-q", program, env=env, external=True)
