"""The documentation (docs/, built by ``nox -s docs``) names everything a site can use.

Read from the Markdown sources, so that this runs without Sphinx: every setting, check id,
template tag, signal and public API name, and the management command, must appear in the pages;
and the README stays a short front page that sends readers there.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.dispatch import Signal

import whos_online
from whos_online import signals
from whos_online.defaults import DEFAULTS
from whos_online.templatetags.whos_online import register

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
#: PyPI shows the README as the project's page: it stays a front page, not the manual.
README_LIMIT = 15_000


def documentation() -> str:
    return "\n".join(page.read_text() for page in sorted(DOCS.glob("*.md")))


def undocumented(names: set[str]) -> list[str]:
    text = documentation()
    return sorted(name for name in names if name not in text)


def check_ids() -> set[str]:
    source = "\n".join(path.read_text() for path in (ROOT / "whos_online").rglob("*.py"))
    return set(re.findall(r"whos_online\.[EW]\d{3}", source))


def missing_from(page: str, needles: set[str]) -> list[str]:
    text = (DOCS / page).read_text()
    return sorted(needle for needle in needles if needle not in text)


def test_every_setting_has_its_section():
    assert missing_from("settings.md", {f"## `{key}: " for key in DEFAULTS}) == []


def test_every_check_id_is_in_the_table_of_checks():
    ids = check_ids()
    assert len(ids) > 30  # E001–E028 and the warnings: the search itself works
    assert missing_from("checks.md", {f"| `{check_id}` |" for check_id in ids}) == []


def test_every_template_tag_is_documented():
    assert missing_from("templates.md", {f"{{% {tag}" for tag in register.tags}) == []


def test_every_signal_is_documented():
    names = {name for name, value in vars(signals).items() if isinstance(value, Signal)}
    assert names
    assert undocumented(names) == []


def test_every_public_api_name_is_documented():
    assert missing_from("api.md", {f"`{name}" for name in whos_online.__all__}) == []


def test_the_cleanup_command_is_documented():
    assert undocumented({"whos_online_cleanup", "--dry-run", "--every", "--reset-peak"}) == []


def test_every_page_is_in_the_table_of_contents():
    index = (DOCS / "index.md").read_text()
    pages = {page.stem for page in DOCS.glob("*.md")} - {"index"}
    assert sorted(page for page in pages if f"\n{page}\n" not in index) == []


def test_the_readme_is_a_front_page_that_links_to_the_docs():
    text = README.read_text()
    assert len(text.encode()) <= README_LIMIT
    assert "https://whos-online.readthedocs.io/" in text
    # PyPI shows no image given by a relative path.
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert images
    assert all(image.startswith("https://") for image in images)
    assert "python3 scripts/dev.py test" in text
