"""What the wheel and the sdist hold, built as a release would build them.

The wheel must carry every file of the package (templates, static files and ``py.typed`` are not
Python, so a build configuration can drop them silently) and nothing else; the sdist must carry
what rebuilding the wheel and running the tests need.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from whos_online.store import lua

if TYPE_CHECKING:
    from email.message import Message

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "whos_online"


def package_files() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-d", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    [wheel] = out.glob("*.whl")
    [sdist] = out.glob("*.tar.gz")
    return wheel, sdist


def metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(name).decode())


def test_the_wheel_holds_the_package_and_its_license_only(built):
    wheel, _ = built
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    dist_info = {name for name in names if ".dist-info/" in name}

    assert names - dist_info == package_files()
    assert {name.split("/", 1)[1] for name in dist_info} == {
        "METADATA",
        "RECORD",
        "WHEEL",
        "licenses/LICENSE",
    }
    assert "whos_online/py.typed" in names
    assert "whos_online/templates/whos_online/online.html" in names
    assert "whos_online/static/whos_online/live.js" in names
    assert {
        "whos_online/store/lua/record.lua",
        "whos_online/store/lua/includes/counters.lua",
    } <= names


def test_the_wheel_loads_its_lua_scripts(built, tmp_path):
    """Imported straight from the wheel (a zip, as zipimport reads it), the scripts are the ones
    of the source tree: the ``.lua`` files, and every file they include, are found inside it."""
    wheel, _ = built
    program = (
        "import sys; sys.path.insert(0, sys.argv[1]); from whos_online.store import lua; "
        "print(lua.__file__); print(lua.RECORD + lua.UPDATE_COUNTERS, end='')"
    )
    loaded = subprocess.run(
        [sys.executable, "-I", "-c", program, str(wheel)],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    where, _, sources = loaded.partition("\n")

    assert where.startswith(str(wheel))
    assert sources == lua.RECORD + lua.UPDATE_COUNTERS


def test_the_sdist_can_rebuild_the_wheel_and_run_the_tests(built):
    _, sdist = built
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}

    assert package_files() <= names
    assert {"pyproject.toml", "README.md", "CHANGELOG.md", "LICENSE", "tests/conftest.py"} <= names
    assert not any(name.startswith((".venv", "example_project/", "bench/")) for name in names)


def test_the_metadata_declares_license_dependencies_and_readme(built):
    wheel, _ = built
    found = metadata(wheel)

    assert found["Name"] == "whos-online"
    assert found["License-Expression"] == "MIT"
    assert found["Requires-Python"] == ">=3.10"
    requirements = found.get_all("Requires-Dist") or []
    for needed in ("asgiref>=3.8", "django>=5.2", "django-redis>=5.4", "redis>=5"):
        assert needed in requirements
    assert found["Description-Content-Type"] == "text/markdown"
    urls = dict(url.split(", ", 1) for url in found.get_all("Project-URL") or [])
    assert urls["Documentation"] == "https://whos-online.readthedocs.io/"
    assert {"Homepage", "Source", "Issues", "Changelog"} <= set(urls)
    description = found.get_payload()
    assert isinstance(description, str)
    assert description.strip() == (ROOT / "README.md").read_text().strip()
