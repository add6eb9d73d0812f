"""The Lua scripts as files: how they are loaded, and what their headers and locals promise."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

from whos_online.store import lua, record

SCRIPT_NAMES = sorted(
    path.name.removesuffix(".lua") for path in files(lua).iterdir() if path.name.endswith(".lua")
)


def test_every_script_file_is_loaded_at_import():
    assert len(SCRIPT_NAMES) == 10
    for name in SCRIPT_NAMES:
        assert getattr(lua, name.upper()) == lua.load(name)


def named_in(header: str, kind: str) -> set[int]:
    """The indexes of ``kind`` ("KEYS" or "ARGV") that a header names: ``KEYS[5]``,
    ``KEYS[1..4]``, or ``ARGV[7…]`` for all from 7 on (up to a bound no script reaches)."""
    found: set[int] = set()
    for first, last, onwards in re.findall(rf"{kind}\[(\d+)(?:\.\.(\d+))?(…)?\]", header):
        end = 100 if onwards else int(last or first)
        found.update(range(int(first), end + 1))
    return found


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_each_script_opens_with_what_it_takes_and_returns(name):
    source = lua.load(name)
    header = source[: source.index("]]")]

    assert header.startswith("--[[\n")
    assert "Input" in header
    assert "Output:" in header
    assert "@include" not in source
    # Every KEYS[i] and ARGV[i] the body reads by number is named in the header.
    body = source[len(header) :]
    for kind in ("KEYS", "ARGV"):
        used = {int(index) for index in re.findall(rf"\b{kind}\[(\d+)\]", body)}
        assert used <= named_in(header, kind), f"{name}.lua reads {kind} it does not name"


def test_the_record_script_reads_its_arguments_in_the_order_python_sends_them():
    source = lua.load("record")
    header = source[: source.index("  Output:")]
    named = re.findall(r"^    ARGV\[(\d+)\]\s+(\w+):", header, re.MULTILINE)
    entry = re.findall(r"^ {16}(\w+)(?:, (\w+))? {2,}", header, re.MULTILINE)

    assert [name for _, name in named] == list(record.HEADER_ARGUMENTS)
    assert [int(index) for index, _ in named] == list(range(1, len(record.HEADER_ARGUMENTS) + 1))
    assert [name for pair in entry for name in pair if name] == list(record.ENTRY_ARGUMENTS)
    assert f"\nlocal FIELDS = {record.ENTRY_FIELDS}\n" in source
    assert f"\nlocal first = {len(record.HEADER_ARGUMENTS) + 1}\n" in source


def test_the_record_script_replies_with_what_python_reads_back():
    source = lua.load("record")
    output = source[source.index("  Output:") : source.index("]]")]
    fields = re.findall(r"^    (\w+) {2,}", output, re.MULTILINE)
    change = re.findall(r"^ {17}(\w+) {2,}", output, re.MULTILINE)

    assert fields == list(record.REPLY_FIELDS)
    assert f"{{{', '.join(record.REPLY_FIELDS)}}}" in output
    assert change == list(record.CHANGE_FIELDS)
    assert f"\nreturn {{{', '.join(record.REPLY_FIELDS)}}}\n" in source


def test_an_include_is_expanded_once_however_often_it_is_named(tmp_path):
    (tmp_path / "includes").mkdir()
    a, b = "local function a() end", "local function b() end"
    (tmp_path / "includes" / "a.lua").write_text(f"{a}\n")
    (tmp_path / "includes" / "b.lua").write_text(f'--- @include "includes/a"\n{b}\n')
    (tmp_path / "main.lua").write_text(
        '--- @include "includes/a"\n--- @include "includes/b"\nreturn 1\n'
    )

    # b's own include of a is dropped: a is in the script already.
    assert lua.load("main", tmp_path) == f"{a}\n\n{b}\nreturn 1\n"


def test_an_include_of_a_missing_file_fails_loudly(tmp_path):
    (tmp_path / "main.lua").write_text('--- @include "includes/missing"\nreturn 1\n')

    with pytest.raises(FileNotFoundError):
        lua.load("main", tmp_path)
