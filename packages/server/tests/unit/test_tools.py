"""The tools added for issue 27, each on its own: parsing the model's arguments, the approval
rule, the action it sends and how its outcome reads to the model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from codey_protocol import worker as wk
from codey_server.agent.tools import BadToolCall, Gate, parse_call, tools_for
from codey_server.agent.tools.edit import EDIT, EditArgs
from codey_server.agent.tools.glob import GLOB
from codey_server.agent.tools.grep import GREP


def _parse(name: str, **args: Any) -> Any:
    return parse_call(name, json.dumps(args), None)


def _bad(name: str, **args: Any) -> str:
    with pytest.raises(BadToolCall) as err:
        _parse(name, **args)
    return str(err.value)


# grep ---------------------------------------------------------------------------------------

def test_grep_parses_its_arguments_into_the_workers_action() -> None:
    call = _parse("grep", pattern="def \\w+", path="src", include="*.py", context=2,
                  ignore_case=True, mode="content", max_matches=5000)
    action = call.tool.action(call.args, "act_1", "ses_1", "/w")
    assert isinstance(action, wk.Grep)
    assert (action.pattern, action.path, action.include, action.before, action.after) == (
        "def \\w+", "src", ["*.py"], 2, 2)
    assert action.ignore_case and action.max_matches == 1000  # capped
    only_after = _parse("grep", pattern="x", context=3, before=0).args
    assert (only_after.before, only_after.after) == (0, 3)
    assert "pattern" in _bad("grep", pattern="")
    assert "mode" in _bad("grep", pattern="x", mode="lines")
    assert "glob" in _bad("grep", pattern="x", include=[1])


def test_grep_and_glob_only_look_never_ask_and_are_offered_everywhere() -> None:
    for name in ("grep", "glob"):
        call = _parse(name, pattern="*.py" if name == "glob" else "x")
        assert call.tool.looks_only(call.args)
        assert call.tool.ask(call.args, Gate("suggest", sandboxed=False)) is None
        for mode in ({"plan_mode": True}, {"read_only": True}, {}):
            assert name in {t.name for t in tools_for(None, **mode)}


def test_grep_reads_as_ripgrep_lays_it_out_and_says_when_it_was_cut() -> None:
    result = wk.GrepResult(files=[
        wk.GrepFile(path="a.py", count=2, lines=[
            wk.GrepLine(line=3, text="def f():"), wk.GrepLine(line=4, text="  pass", match=False),
            wk.GrepLine(line=9, text="def g():")]),
        wk.GrepFile(path="b.py", count=1, lines=[wk.GrepLine(line=1, text="def h():")])],
        matches=3, truncated=True)
    text = GREP.reads(result)
    assert text.splitlines()[:6] == ["2 files, 3 matching lines", "a.py:3:def f():",
                                     "a.py-4-  pass", "--", "a.py:9:def g():", "b.py:1:def h():"]
    assert "more matches not shown" in text
    counts = wk.GrepResult(files=[wk.GrepFile(path="a.py", count=7)])
    assert GREP.reads(counts).splitlines() == ["1 file, 7 matching lines", "a.py: 7"]
    files = wk.GrepResult(files=[wk.GrepFile(path="new.py"), wk.GrepFile(path="old.py")])
    assert GREP.reads(files).splitlines() == ["2 files", "new.py", "old.py"]
    assert GREP.reads(wk.GrepResult()) == "no matches"


def test_glob_sends_its_pattern_and_reads_paths_newest_first() -> None:
    call = _parse("glob", pattern="**/*.ts", path="web", hidden=True, max_results=10)
    action = call.tool.action(call.args, "act_1", "ses_1", "/w")
    assert isinstance(action, wk.Glob)
    assert (action.pattern, action.path, action.hidden, action.max_results) == (
        "**/*.ts", "web", True, 10)
    assert GLOB.reads(wk.GlobResult(paths=["b.ts", "a.ts"])) == "b.ts\na.ts"
    cut = GLOB.reads(wk.GlobResult(paths=["b.ts"], truncated=True))
    assert "only the 1 newest are shown" in cut
    assert GLOB.reads(wk.GlobResult()) == "no files match"
    assert "pattern" in _bad("glob", pattern="")


# edit ---------------------------------------------------------------------------------------

def test_edit_parses_and_refuses_what_cannot_be_an_edit() -> None:
    call = _parse("edit", path="a.py", old_string="x = 1", new_string="x = 2",
                  replace_all=True)
    assert call.args == EditArgs("a.py", "x = 1", "x = 2", True)
    action = call.tool.action(call.args, "act_1", "ses_1", "/w")
    assert isinstance(action, wk.Edit) and action.replace_all and action.old_string == "x = 1"
    assert "write_file" in _bad("edit", path="a.py", old_string="", new_string="x")
    assert "same" in _bad("edit", path="a.py", old_string="x", new_string="x")
    assert "new_string" in _bad("edit", path="a.py", old_string="x")


def test_edit_is_approved_like_a_patch_and_shows_the_change() -> None:
    args = EditArgs("src/a.py", "x = 1\ny = 2", "x = 3")
    ask = EDIT.ask(args, Gate("suggest"))
    assert ask is not None and ask.kind == "patch" and ask.path == "src/a.py"
    assert ask.patch is not None and ask.patch.splitlines() == [
        "--- a/src/a.py", "+++ b/src/a.py", "@@ edit @@", "-x = 1", "-y = 2", "+x = 3"]
    assert EDIT.ask(args, Gate("auto-edit")) is None  # inside the workdir
    assert EDIT.ask(EditArgs("../b.py", "a", "b"), Gate("auto-edit")) is not None
    assert EDIT.ask(EditArgs(".git/config", "a", "b"), Gate("auto-edit")) is not None
    assert EDIT.ask(EditArgs("/etc/x", "a", "b"), Gate("full-auto")) is None
    assert not EDIT.looks_only(args)
    assert EDIT.shows(args)["patch"] == ask.patch


def test_edit_reads_its_diff_and_settles_the_item_with_it() -> None:
    outcome = wk.EditResult(path="a.py", replacements=2, diff="--- a/a.py\n+++ b/a.py\n",
                            added=2, removed=2)
    status, text, fields = EDIT.settle(outcome, False)
    assert status == "done"
    assert text.startswith("edited a.py: 2 replacements (+2 -2)\n--- a/a.py")
    assert fields["diff"] == outcome.diff
    assert fields["files"] == [wk.FileChange(path="a.py", op="update", added=2, removed=2)]


def test_a_provider_chooses_apply_patch_edit_or_both() -> None:
    def names(edit_tools: str) -> set[str]:
        return {t.name for t in tools_for(None, edit_tools=edit_tools)}

    assert {"apply_patch", "edit"} <= names("both")
    assert "edit" not in names("apply_patch") and "apply_patch" in names("apply_patch")
    assert "apply_patch" not in names("edit") and "edit" in names("edit")
    # plan mode offers neither
    assert not {"apply_patch", "edit"} & {t.name for t in tools_for(None, plan_mode=True)}
