"""The Lua scripts as files: how they are loaded, and what their headers and locals promise."""

from __future__ import annotations

import re
import time
from importlib.resources import files

import pytest
from redis.exceptions import ResponseError

import whos_online.recording.visits as recording
from whos_online.backend.clients import admin_client
from whos_online.backend.keyspace import layout
from whos_online.config.settings import get_config
from whos_online.store import lua
from whos_online.store.items import entries_of
from whos_online.store.record import batch_calls
from whos_online.store.results import Reply, RoomChange, parse_reply
from whos_online.store.scripts import ScriptCall, run

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


def test_the_record_script_refuses_a_call_whose_names_are_not_its_own(backend, r):
    """A call sends the names of its values: one that names others than the script reads (a
    field added on one side only) gets an error that says both, and records nothing."""
    config, now = get_config(), time.time()
    entries = entries_of(config, recording.member_visit("guests", "g1", now, room="topic:1"))
    [call] = batch_calls(config, layout(config)[0], entries, now=now, epoch="word").calls
    fields = str(call.args[1])
    renamed = ScriptCall(call.source, call.keys, [call.args[0], fields + ",colour", *call.args[2:]])

    with pytest.raises(ResponseError, match=r"record\.lua reads .*,connection; the call sent"):
        run(admin_client(), [renamed])

    assert r.exists("{whos_online}:guests", "{whos_online}:rooms:where") == 0
    [reply] = run(admin_client(), [call])
    assert parse_reply(reply) == Reply("word", "1", 0, (RoomChange(0, "", "", "topic:1"),))
    assert r.zscore("{whos_online}:room:topic:1:guests", "g1") == pytest.approx(now, abs=0.001)


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
