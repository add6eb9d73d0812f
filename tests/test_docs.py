"""The documentation (docs/, built by ``nox -s docs``) names everything a site can use.

Read from the Markdown sources, so that this runs without Sphinx: every setting, check id,
template tag, signal and public API name, and the management command, must appear in the pages;
and the README stays a short front page that sends readers there.
"""

from __future__ import annotations

import ast
import inspect
import logging
import logging.config
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from django.dispatch import Signal

import whos_online
from whos_online import signals
from whos_online.backend.connection import CircuitBreaker
from whos_online.config.settings import DEFAULTS
from whos_online.live.widget import TAG_OPTIONS, WidgetOptions
from whos_online.templatetags import whos_online as tags
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


#: The head of the table of ``{% whos_online %}``'s options in docs/templates.md.
OPTIONS_TABLE = "| option | default | in the widget's URL | what it does |"


def table_of_options() -> dict[str, tuple[str, str]]:
    """Each row of that table: the option, its default and how the widget's URL carries it."""
    text = (DOCS / "templates.md").read_text()
    rows = text.split(OPTIONS_TABLE, 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    return {name.strip("`"): (default.strip("`"), url) for name, default, url, _ in cells}


def test_the_table_of_options_is_the_tags():
    """A row for each keyword argument of the tag, with its default; those of ``WidgetOptions``
    (what a live widget's URL carries) are the rows whose URL column names them."""
    parameters = list(inspect.signature(tags.whos_online).parameters.values())[1:]
    table = table_of_options()

    assert {name: default for name, (default, _) in table.items()} == {
        one.name: repr(one.default) for one in parameters
    }
    assert {name for name, (_, url) in table.items() if f"`{name}=" in url} == set(TAG_OPTIONS)
    assert "`lang`" in (DOCS / "templates.md").read_text()
    assert set(TAG_OPTIONS) < set(WidgetOptions.__dataclass_fields__)


#: What docs/development.md shows to take the edits it names.
RECIPES = ("Adding a tag option", "Adding a setting", "Adding a counter kind")


def recipe(title: str) -> str:
    text = (DOCS / "development.md").read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("title", RECIPES)
def test_each_recipe_names_files_and_names_that_exist(title):
    """Every file a recipe names exists, and each name it places "in" a file is in it: a move
    or a rename that leaves the recipe behind fails here."""
    text = recipe(title)
    files = set(re.findall(r"`((?:whos_online|tests|docs)/[\w/.-]+\.\w+)`", text))
    placed = re.findall(r"`([A-Za-z_][\w.]*)` in `([\w/.-]+\.\w+)`", text)

    assert files
    assert sorted(path for path in files if not (ROOT / path).is_file()) == []
    assert placed
    assert [
        (name, path)
        for name, path in placed
        if name.rsplit(".", 1)[-1] not in (ROOT / path).read_text()
    ] == []


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


# The commands the docs give, and the code they show

#: Where the docs give commands: the pages, the README, and the docstrings of what they run.
COMMAND_SOURCES = [README, *sorted(DOCS.glob("*.md")), *sorted((ROOT / "bench").glob("*.py"))]
#: A command that runs Python: an interpreter, by name or by path, and what it runs.
PYTHON_COMMAND = re.compile(
    r"(?:^|(?<=[\s`(=\"']))(?P<python>(?:[\w.~/-]*/)?python[\d.]*) (?P<what>-m \S+|\S+\.py)\b",
    re.MULTILINE,
)
#: A crontab line, where a virtual environment's Python must be named by its absolute path.
CRONTAB_LINE = re.compile(r"^(?:\S+ ){5}cd /")


def nox_sessions() -> set[str]:
    source = (ROOT / "noxfile.py").read_text()
    return set(re.findall(r"@nox\.session(?:\([^)]*\))?\n(?:@.*\n)*def (\w+)\(", source))


def dev_commands() -> set[str]:
    """What ``python3 scripts/dev.py`` takes first."""
    source = (ROOT / "scripts" / "dev.py").read_text()
    found = re.search(r"^SESSIONS = (\{.*\})$", source, re.MULTILINE)
    assert found
    return {*ast.literal_eval(found.group(1)), "nox"}


def interpreter_problems(text: str) -> list[str]:
    """Each Python command of ``text`` whose interpreter the documented workflow does not
    create: the reader's own Python by name (``python``, ``python3``); a nox session's
    environment, ``.nox/<session>/bin/python``; ``.venv-tools``, where ``scripts/dev.py`` puts
    nox; a virtual environment that the same text creates (``python3 -m venv .venv``); and, in a
    crontab line, the absolute path of the site's own."""
    created = set(re.findall(r"-m venv (\S+)", text))
    problems = []
    for found in PYTHON_COMMAND.finditer(text):
        python, what = found.group("python"), found.group("what")
        line = text[text.rfind("\n", 0, found.start()) + 1 : text.find("\n", found.end())]
        directory = python.removesuffix("/bin/python").removesuffix("/bin/python3")
        session = re.fullmatch(r"\.nox/(\w+)", directory)
        fine = (
            "/" not in python
            or (session is not None and session.group(1) in nox_sessions())
            or directory in {".venv-tools", *created}
            or (python.startswith("/") and CRONTAB_LINE.match(line.strip().strip("`")) is not None)
        )
        if not fine:
            problems.append(f"{python} {what}")
        dev = re.match(r"scripts/dev\.py ([\w-]+)", text[found.start("what") :])
        if dev and dev.group(1) not in dev_commands():
            problems.append(f"{python} scripts/dev.py {dev.group(1)}")
    return problems


def test_the_commands_name_an_interpreter_the_documented_workflow_creates():
    problems = {
        str(path.relative_to(ROOT)): found
        for path in COMMAND_SOURCES
        if (found := interpreter_problems(path.read_text()))
    }
    assert problems == {}


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        ("Run `.venv/bin/python bench/failover.py`.", [".venv/bin/python bench/failover.py"]),
        ("python3 -m venv .venv\n.venv/bin/python manage.py migrate\n", []),
        ("`.nox/example/bin/python manage.py whos_online_cleanup`", []),
        ("`.nox/nonesuch/bin/python manage.py check`", [".nox/nonesuch/bin/python manage.py"]),
        ("* * * * * cd /srv/site && /srv/site/.venv/bin/python manage.py x", []),
        ("then `/srv/site/.venv/bin/python manage.py x`", ["/srv/site/.venv/bin/python manage.py"]),
        ("python3 scripts/dev.py bench failover", []),
        ("python3 scripts/dev.py benchmark", ["python3 scripts/dev.py benchmark"]),
        ("python -m pip install whos-online; Python 3.10 and `python` alone", []),
    ],
)
def test_what_counts_as_an_interpreter_the_workflow_creates(text, problems):
    assert interpreter_problems(text) == problems


def code_blocks(language: str) -> list[tuple[str, str]]:
    """Every fenced block of ``language`` in the README and the pages, with where it is."""
    found = []
    for path in [README, *sorted(DOCS.glob("*.md"))]:
        for block in re.findall(rf"^ *```{language}\n(.*?)^ *```", path.read_text(), re.M | re.S):
            found.append((path.name, textwrap.dedent(block)))
    return found


def test_the_python_snippets_parse_and_none_is_a_stray_tuple():
    """A snippet such as ``(path("online/", include(...)),)`` parses, but means nothing."""
    blocks = code_blocks("python")
    assert len(blocks) > 10
    for page, block in blocks:
        tree = ast.parse(block)
        stray = [node for node in tree.body if isinstance(node, ast.Expr)]
        assert not [node for node in stray if isinstance(node.value, ast.Tuple)], (page, block)


def test_the_documented_logging_shows_an_outage_and_the_recovery(capsys):
    """The ``LOGGING`` of the failure page makes both lines of an outage appear, the INFO too."""
    [snippet] = [block for page, block in code_blocks("python") if "LOGGING" in block]
    namespace: dict[str, Any] = {}
    exec(snippet, namespace)
    logger = logging.getLogger("whos_online")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    breaker = CircuitBreaker()
    try:
        logging.config.dictConfig(namespace["LOGGING"])
        generation = breaker.generation("redis://docs")
        breaker.failed("redis://docs", ConnectionError("refused"), 1.0)
        breaker.succeeded("redis://docs", breaker.generation("redis://docs"))
        assert generation < breaker.generation("redis://docs")
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved

    lines = capsys.readouterr().err.splitlines()
    assert [line.split(";")[0] for line in lines] == [
        "Redis at redis://docs is unavailable (ConnectionError: refused)",
        "Redis at redis://docs answers again",
    ]


def test_the_tutorials_base_template_fits_a_phone():
    templates = [block for page, block in code_blocks("django") if page == "tutorial.md"]
    base = next(block for block in templates if "<html" in block)
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in base
