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


# exec, write_stdin, kill ----------------------------------------------------------------------

def _session_with(*processes: Any) -> Any:
    from codey_protocol.state import SessionInfo

    return SessionInfo(session_id="ses_1", title="t", worker_id="wrk_1", workdir="/w",
                       provider="p", model="m", processes=list(processes))


def _process(pid: str = "proc_1", status: str = "running", stop_by: str = "") -> Any:
    from codey_protocol.state import SessionProcess

    return SessionProcess(process_id=pid, item_id="itm_1", worker_id="wrk_1", argv=["x"],
                          status=status, stop_by=stop_by)  # type: ignore[arg-type]


def test_exec_starts_a_process_in_the_sessions_sandbox_as_shell_would() -> None:
    from codey_server.agent.tools import Sandboxing

    call = _parse("exec", command=["python3", "-m", "http.server", "0"], workdir="site",
                  tty=True, yield_ms=99_999, timeout_ms=5000)
    action = call.tool.action(call.args, "act_1", "ses_1", "/w",
                              sandbox=Sandboxing("workspace-write", True))
    assert isinstance(action, wk.ExecStart)
    assert (action.argv, action.cwd, action.tty, action.yield_ms, action.timeout_s) == (
        ["python3", "-m", "http.server", "0"], "site", True, 30_000, 5.0)
    assert (action.sandbox, action.network) == ("workspace-write", True)
    git = _parse("exec", command=["git", "log"])
    git_action = git.tool.action(git.args, "a", "s", "/w")
    assert isinstance(git_action, wk.ExecStart)
    assert git_action.env["GIT_CONFIG_COUNT"] == "4"  # git's hardening, as for shell
    assert call.tool.runs_commands and not call.tool.looks_only(call.args)
    assert "argv list" in _bad("exec", command="npm run dev")
    assert "justification" in _bad("exec", command=["npm", "i"], escalate=True)


def test_exec_asks_as_shell_does_and_escalates_as_shell_does() -> None:
    from codey_server.agent.tools import Sandboxing

    make = _parse("exec", command=["make", "serve"])
    assert make.tool.ask(make.args, Gate("suggest")).kind == "command"
    assert make.tool.ask(make.args, Gate("auto-edit")).kind == "command"
    assert make.tool.ask(make.args, Gate("full-auto")) is None
    assert make.tool.ask(make.args, Gate("suggest", approved_prefixes=[["make"]])) is None
    # no process is known-safe: it reads what write_stdin sends later without asking (a
    # pager that `git log` opens in a terminal runs `!command`)
    pager = _parse("exec", command=["git", "log"], tty=True)
    assert pager.tool.ask(pager.args, Gate("suggest")) is not None
    assert pager.tool.ask(pager.args, Gate("auto-edit")) is not None
    out = _parse("exec", command=["npm", "run", "dev"], escalate=True,
                 justification="it must bind a privileged port")
    ask = out.tool.ask(out.args, Gate("full-auto"))
    assert ask is not None and ask.kind == "escalate" and "privileged" in ask.reason
    action = out.tool.action(out.args, "a", "s", "/w", sandbox=Sandboxing())
    assert isinstance(action, wk.ExecStart)
    assert (action.sandbox, action.network) == ("full-access", True)


def test_exec_reads_its_process_and_makes_it_the_sessions() -> None:
    from codey_protocol import events as ev
    from codey_server.agent.tools.exec import EXEC

    running = wk.ExecOutput(process_id="proc_1", output="Serving on 8000\n", running=True)
    status, text, fields = EXEC.settle(running, False)
    assert status == "done" and fields == {"output": "Serving on 8000\n", "truncated": False}
    assert text.splitlines() == ["process proc_1 is running", "output so far:",
                                 "Serving on 8000",
                                 "[poll or send input with write_stdin(process_id=\"proc_1\"), "
                                 "stop it with kill]"]
    item = ev.ToolCall(id="itm_1", ts=0, call_id="c", name="exec", arguments="{}")
    args = _parse("exec", command=["serve"], tty=True).args
    [started] = EXEC.events(args, running, item, _session_with())
    assert started == ev.ProcessStarted(process_id="proc_1", item_id="itm_1", worker_id="wrk_1",
                                        argv=["serve"], tty=True, output="Serving on 8000\n")
    failed = wk.ExecOutput(process_id="proc_2", output="boom\n", exit_code=2)
    status, text, fields = EXEC.settle(failed, False)
    assert status == "failed" and fields["exit_code"] == 2
    assert text.startswith("process proc_2 exited with code 2\noutput so far:\nboom")
    kinds = [type(e).__name__ for e in EXEC.events(args, failed, item, _session_with())]
    assert kinds == ["ProcessStarted", "ProcessEnded"]
    # no process: nothing to list
    assert EXEC.events(args, wk.ExecOutput(process_id="", exit_code=127), item,
                       _session_with()) == []


def test_write_stdin_and_kill_act_only_on_the_sessions_processes() -> None:
    gate = Gate("suggest", processes={"proc_1": "running", "proc_9": "gone"})
    for name in ("write_stdin", "kill"):
        mine = _parse(name, process_id="proc_1")
        # it was approved when it started: no new approval, under any policy
        assert mine.tool.refuses(mine.args, gate) is None
        assert mine.tool.ask(mine.args, gate) is None
        other = _parse(name, process_id="proc_of_another_session")
        assert "not a process of this session" in (other.tool.refuses(other.args, gate) or "")
        gone = _parse(name, process_id="proc_9")
        assert "is gone" in (gone.tool.refuses(gone.args, gate) or "")
        assert not mine.tool.looks_only(mine.args)
    poll = _parse("write_stdin", process_id="proc_1")
    action = poll.tool.action(poll.args, "a", "ses_1", "/w")
    assert isinstance(action, wk.ExecWrite)
    assert (action.process_id, action.input, action.yield_ms) == ("proc_1", "", 250)
    typed = _parse("write_stdin", process_id="proc_1", input="1+1\n", yield_ms=2000,
                   close_stdin=True).args
    assert (typed.input, typed.yield_ms, typed.close_stdin) == ("1+1\n", 2000, True)
    kill = _parse("kill", process_id="proc_1")
    assert isinstance(kill.tool.action(kill.args, "a", "ses_1", "/w"), wk.ExecKill)


def test_write_stdin_and_kill_record_what_they_read_and_a_process_gone() -> None:
    from codey_protocol import events as ev
    from codey_server.agent.tools.kill import KILL
    from codey_server.agent.tools.write_stdin import WRITE_STDIN

    item = ev.ToolCall(id="itm_2", ts=0, call_id="c", name="write_stdin", arguments="{}")
    session = _session_with(_process())
    args = _parse("write_stdin", process_id="proc_1").args
    more = wk.ExecOutput(process_id="proc_1", output=">>> 2\n", running=True)
    assert WRITE_STDIN.events(args, more, item, session) == [
        ev.ProcessOutput(process_id="proc_1", output_delta=">>> 2\n")]
    assert WRITE_STDIN.reads(more) == "process proc_1 is running\nnew output:\n>>> 2"
    assert WRITE_STDIN.reads(wk.ExecOutput(process_id="proc_1", running=True)) == \
        "process proc_1 is running\n(no new output)"
    killed = wk.ExecOutput(process_id="proc_1", output="bye\n", signal=15,
                           stopped_by="exec_kill")
    [end] = KILL.events(_parse("kill", process_id="proc_1").args, killed, item, session)
    assert end == ev.ProcessEnded(process_id="proc_1", signal=15, stopped_by="exec_kill",
                                  output_delta="bye\n")
    assert KILL.reads(killed).startswith("process proc_1 was killed by signal 15 (stopped: "
                                         "exec kill)")
    assert WRITE_STDIN.error_events(args, "process_gone", item, session) == [
        ev.ProcessEnded(process_id="proc_1", stopped_by="gone")]
    assert WRITE_STDIN.error_events(args, "io_error", item, session) == []
    # an ended process: nothing more to record
    ended = _session_with(_process(status="ended"))
    assert WRITE_STDIN.events(args, more, item, ended) == []


def test_process_tools_are_not_offered_in_plan_mode_or_to_readers() -> None:
    for mode in ({"plan_mode": True}, {"read_only": True}):
        assert not {"exec", "write_stdin", "kill"} & {t.name for t in tools_for(None, **mode)}
    assert {"exec", "write_stdin", "kill"} <= {t.name for t in tools_for(None)}
