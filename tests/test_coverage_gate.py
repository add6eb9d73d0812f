"""The coverage gate of ``nox -s tests`` fails the run whenever its summary says it failed.

pytest-cov decides the exit code with coverage.py's ``should_fail_under``, which compares the
total rounded to ``[tool.coverage.report] precision``, but prints its "FAIL Required test
coverage" line from the unrounded total. At coverage.py's default precision of 0, a total of
96.91 % rounds to 97: the summary said FAIL and the run exited 0. These tests run pytest, with
the project's coverage configuration and the session's gate, over a throw-away module whose
coverage is known, and check that the exit code and the summary agree.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def session_gate() -> int:
    """``COVERAGE_FLOOR`` of the noxfile, read without importing nox (not installed here)."""
    text = (ROOT / "noxfile.py").read_text()
    match = re.search(r"^COVERAGE_FLOOR = (\d+)$", text, re.MULTILINE)
    assert match, "noxfile.py declares no whole COVERAGE_FLOOR"
    return int(match[1])


def module_source(statements_run: int, functions_never_called: int) -> str:
    """A module without branches: each function adds a line that runs (its ``def``) and one
    that does not (its body), so the coverage is known before the run."""
    lines = [f"value_{n} = {n}" for n in range(statements_run)]
    for n in range(functions_never_called):
        lines += [f"def never_{n}():", f"    return {n}"]
    return "\n".join(lines) + "\n"


def run_gated(tmp_path: Path, module: str) -> subprocess.CompletedProcess[str]:
    """pytest over ``module`` as ``nox -s tests`` runs the suite: the project's coverage
    configuration and ``--cov-fail-under`` at the session's gate, with nothing else of the
    project's pytest configuration (its own ini file, no Django)."""
    (tmp_path / "measured.py").write_text(module)
    (tmp_path / "test_measured.py").write_text("import measured\n\ndef test_it():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COV_", "COVERAGE_"))}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:django",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "--cov=measured",
        f"--cov-config={ROOT / 'pyproject.toml'}",
        "--cov-report=term",
        f"--cov-fail-under={session_gate()}",
    ]
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=120
    )


def test_the_cases_here_are_those_of_the_session_gate():
    """The cases below are chosen around a gate of 97 %; a new gate needs new cases."""
    assert session_gate() == 97


@pytest.mark.parametrize(
    ("statements_run", "functions_never_called", "total"),
    [
        (30, 1, "96.88"),  # 31 of 32 lines: rounds to 97 at a precision of 0
        (20, 1, "95.45"),  # 21 of 22 lines: under 97 at any precision
    ],
)
def test_a_total_under_the_gate_fails_the_run(
    tmp_path, statements_run, functions_never_called, total
):
    result = run_gated(tmp_path, module_source(statements_run, functions_never_called))
    output = result.stdout + result.stderr

    assert f"FAIL Required test coverage of 97% not reached. Total coverage: {total}%" in output
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, output


def test_a_total_at_the_gate_passes(tmp_path):
    """97 of 100 lines: exactly the gate, which is reached."""
    result = run_gated(tmp_path, module_source(94, 3))
    output = result.stdout + result.stderr

    assert "Required test coverage of 97% reached. Total coverage: 97.00%" in output
    assert result.returncode == pytest.ExitCode.OK, output
