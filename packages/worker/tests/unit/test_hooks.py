"""Hooks in Claude Code's format on the worker: the settings files, the matchers, and real
hook scripts (bash and Python) run through the dispatcher in the session's sandbox — trusted
or not, timing out, printing garbage, trying to get out."""

from __future__ import annotations

import asyncio
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.worker import (
    ActionResult,
    HookCommand,
    HooksRan,
    LoadContext,
    ProjectContext,
    RunHooks,
)
from codey_worker.actions import ActionDispatcher
from codey_worker.hooks import digest_of, matches, parse_settings
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords


class _Send:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    async def __call__(self, frame: bytes) -> None:
        self.frames.append(frame)


@pytest.fixture()
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A workdir under an allowed root, $CODEY_HOME and a ``~`` of the test's own."""
    workdir = tmp_path / "root" / "ws"
    workdir.mkdir(parents=True)
    home = tmp_path / "codey-home"
    home.mkdir()
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.setenv("HOME", str(user))
    return {"workdir": workdir, "home": home, "user": user, "tmp": tmp_path}


def _settings(event: str, command: str, matcher: str | None = None,
              timeout: float | None = None) -> str:
    hook: dict[str, Any] = {"type": "command", "command": command}
    if timeout is not None:
        hook["timeout"] = timeout
    group: dict[str, Any] = {"hooks": [hook]}
    if matcher is not None:
        group["matcher"] = matcher
    return json.dumps({"hooks": {event: [group]}})


def _write(path: Path, text: str, executable: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _run(places: dict[str, Path], action: Any) -> Any:
    async def main() -> Any:
        send = _Send()
        policy = LocalPolicy(allowed_roots=[places["workdir"].parent])
        d = ActionDispatcher(send, ActionRecords(places["tmp"] / "records.sqlite3"), policy,
                             kill_grace_s=1.0, home=places["home"])
        await d.handle(action)
        await d.wait_idle()
        from codey_protocol import codec
        msgs = [codec.decode_worker_to_server(f) for f in send.frames]
        results = [m for m in msgs if isinstance(m, ActionResult)]
        assert results, msgs
        return results[-1].result

    return asyncio.run(main())


def _hooks(places: dict[str, Path], event: str, match: str = "", payload: Any = None,
           trusted: tuple[str, ...] = (), action_id: str = "h1") -> HooksRan:
    result = _run(places, RunHooks(
        action_id=action_id, session_id="s1", workdir=str(places["workdir"]), event=event,
        match=match, payload=json.dumps(payload or {}), trusted=list(trusted)))
    assert isinstance(result, HooksRan)
    return result


# the settings files and the matchers -------------------------------------------------------

def test_claude_code_settings_are_read_and_other_things_skipped() -> None:
    text = json.dumps({
        "permissions": {"allow": ["Bash(ls)"]},
        "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": "./check.sh", "timeout": 5},
                {"type": "prompt", "prompt": "not ours"}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "echo done"}]}],
            "SomethingNew": [{"hooks": [{"type": "command", "command": "x"}]}],
        }})
    assert parse_settings(text) == [
        HookCommand(event="PreToolUse", matcher="Bash", command_line="./check.sh", timeout_s=5.0),
        HookCommand(event="Stop", matcher="", command_line="echo done", timeout_s=60.0)]
    assert parse_settings('{"model": "x"}') == []


@pytest.mark.parametrize("text", [
    "not json", "[]", '{"hooks": []}', '{"hooks": {"Stop": {}}}',
    '{"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}}',
    '{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": -1}]}]}}',
    '{"hooks": {"Stop": [{"matcher": 3, "hooks": []}]}}',
])
def test_malformed_settings_are_refused_with_a_reason(text: str) -> None:
    with pytest.raises(ValueError):
        parse_settings(text)


@pytest.mark.parametrize(("matcher", "tool", "expected"), [
    ("Bash", "shell", True), ("Bash", "exec", True), ("Bash", "read_file", False),
    ("Edit|Write", "edit", True), ("Edit|Write", "write_file", True),
    ("Edit|Write", "apply_patch", True), ("Edit|MultiEdit|Write", "grep", False),
    ("Read", "read_file", True), ("Grep", "grep", True), ("Glob", "glob", True),
    ("mcp__git__.*", "mcp__git__status", True), ("mcp__git__.*", "mcp__fs__read", False),
    ("shell", "shell", True), ("write_file|edit", "edit", True),  # Codey's own names
    ("", "anything", True), ("*", "anything", True),
    ("Bas", "shell", False),  # whole names, not a search
    ("[", "[", True), ("[", "shell", False),  # not a regex: exact text
])
def test_matchers_know_claude_codes_names_and_ours(matcher: str, tool: str,
                                                   expected: bool) -> None:
    assert matches(matcher, tool) is expected


# real hooks ---------------------------------------------------------------------------------

_PY_DENY = """\
import json, sys
data = json.load(sys.stdin)
cmd = data["tool_input"].get("command", "")
if data["tool_name"] == "Bash" and "rm -rf" in cmd:
    print(json.dumps({"hookSpecificOutput": {
        "hookEventName": "PreToolUse", "permissionDecision": "deny",
        "permissionDecisionReason": f"no rm -rf in {data['cwd']}"}}))
else:
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                      "additionalContext": "checked by guard.py"}}))
"""


def test_a_python_hook_reads_its_json_and_denies(places: dict[str, Path]) -> None:
    workdir = places["workdir"]
    _write(workdir / ".claude" / "guard.py", _PY_DENY)
    settings = _write(workdir / ".claude" / "settings.json", _settings(
        "PreToolUse", f'{sys.executable} "$CLAUDE_PROJECT_DIR/.claude/guard.py"', "Bash"))
    trusted = (digest_of(settings),)
    ran = _hooks(places, "PreToolUse", "shell",
                 {"tool_input": {"argv": ["bash", "-lc", "rm -rf /"], "command": "rm -rf /"}},
                 trusted)
    assert len(ran.runs) == 1, ran
    run = ran.runs[0]
    assert run.exit_code == 0 and run.decision == "deny", run
    assert run.reason == f"no rm -rf in {workdir}"
    allowed = _hooks(places, "PreToolUse", "exec", {"tool_input": {"command": "ls"}}, trusted,
                     action_id="h2")
    assert allowed.runs[0].decision == "" and \
        allowed.runs[0].additional_context == "checked by guard.py"
    # another tool: the matcher does not match, nothing runs
    assert _hooks(places, "PreToolUse", "read_file", {}, trusted, action_id="h3").runs == []


def test_a_bash_hook_blocks_with_exit_code_2_and_its_stderr(places: dict[str, Path]) -> None:
    workdir = places["workdir"]
    _write(workdir / "hooks" / "lint.sh", "#!/bin/bash\n"
           'input=$(cat)\n'
           'case "$input" in *secret.txt*) echo "secret.txt is off limits" >&2; exit 2;; esac\n'
           'exit 0\n', executable=True)
    settings = _write(workdir / ".codey" / "settings.json",
                      _settings("PreToolUse", "./hooks/lint.sh", "Edit|Write"))
    trusted = (digest_of(settings),)
    ran = _hooks(places, "PreToolUse", "write_file",
                 {"tool_input": {"path": "secret.txt", "content": "x"}}, trusted)
    assert [(r.exit_code, r.decision, r.reason) for r in ran.runs] == \
        [(2, "deny", "secret.txt is off limits")]
    ok = _hooks(places, "PreToolUse", "write_file", {"tool_input": {"path": "a.txt"}},
                trusted, action_id="h2")
    assert [(r.exit_code, r.decision) for r in ok.runs] == [(0, "")]


def test_each_event_gets_its_name_and_fields(places: dict[str, Path]) -> None:
    """Every event runs with ``hook_event_name`` and the server's fields on stdin; the
    events without a tool have no ``tool_name``."""
    user_settings = {"hooks": {}}  # in the user's home: trusted without asking
    events = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SubagentStop",
              "SessionStart", "SessionEnd", "Notification", "PreCompact", "PermissionRequest")
    for event in events:
        user_settings["hooks"][event] = [{"hooks": [{  # type: ignore[index]
            "type": "command", "command": "cat > /dev/null; printf '%s' \"$CODEY_HOOK_INPUT\""}]}]
    _write(places["home"] / "settings.json", json.dumps(user_settings))
    for n, event in enumerate(events):
        match = "shell" if "Tool" in event or event == "PermissionRequest" else ""
        ran = _hooks(places, event, match, {"tool_input": {"command": "ls"}, "extra": n},
                     action_id=f"e{n}")
        assert len(ran.runs) == 1, (event, ran)
        data = json.loads(ran.runs[0].stdout)
        assert data["hook_event_name"] == event and data["session_id"] == "s1"
        assert data["cwd"] == str(places["workdir"]) and data["transcript_path"] == ""
        assert data["extra"] == n
        assert ("tool_name" in data) is bool(match), (event, data)


def test_plain_stdout_is_context_for_a_prompt_and_continue_false_stops(
        places: dict[str, Path]) -> None:
    _write(places["user"] / ".claude" / "settings.json", json.dumps({"hooks": {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo 'branch: main'"}]}],
        "Stop": [{"hooks": [{"type": "command", "command":
                             """echo '{"continue": false, "stopReason": "enough"}'"""}]}],
        "SubagentStop": [{"hooks": [{"type": "command", "command":
                                     """echo '{"decision": "block", "reason": "tests"}'"""}]}],
    }}))
    prompt = _hooks(places, "UserPromptSubmit", "", {"prompt": "hi"})
    assert prompt.runs[0].additional_context == "branch: main"
    stop = _hooks(places, "Stop", "", {"stop_hook_active": False}, action_id="h2")
    assert stop.runs[0].stop and stop.runs[0].stop_reason == "enough"
    sub = _hooks(places, "SubagentStop", "", {}, action_id="h3")
    assert (sub.runs[0].decision, sub.runs[0].reason) == ("block", "tests")


def test_a_hook_that_times_out_is_stopped_and_said_so(places: dict[str, Path]) -> None:
    _write(places["home"] / "settings.json",
           _settings("PreToolUse", "sleep 30", "", timeout=1))
    ran = _hooks(places, "PreToolUse", "shell", {})
    run = ran.runs[0]
    assert run.timed_out and run.decision == "" and "timed out after 1 s" in run.problem
    assert run.duration_ms < 20_000


@pytest.mark.parametrize("output", ["{not json at all", "[1, 2]", "\x00\x01garbage\xff"])
def test_a_hook_that_prints_garbage_decides_nothing(places: dict[str, Path],
                                                    output: str) -> None:
    script = _write(places["workdir"] / "garbage.py",
                    f"import sys; sys.stdout.write({output!r})")
    _write(places["home"] / "settings.json",
           _settings("PreToolUse", f"{sys.executable} {script}"))
    run = _hooks(places, "PreToolUse", "shell", {}).runs[0]
    assert run.exit_code == 0 and run.decision == "" and run.updated_input is None
    if output.startswith("{"):
        assert run.problem, run


def test_a_failing_hook_is_a_problem_not_a_block(places: dict[str, Path]) -> None:
    _write(places["home"] / "settings.json",
           _settings("PreToolUse", "echo oops >&2; exit 1"))
    run = _hooks(places, "PreToolUse", "shell", {}).runs[0]
    assert (run.exit_code, run.decision, run.problem) == (1, "", "exit code 1")
    assert run.stderr == "oops\n"


def test_updated_input_and_ask_are_read(places: dict[str, Path]) -> None:
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask",
                                     "permissionDecisionReason": "looks odd",
                                     "updatedInput": {"path": "b.txt"}}}
    _write(places["home"] / "settings.json",
           _settings("PreToolUse", f"echo '{json.dumps(answer)}'", "Write"))
    run = _hooks(places, "PreToolUse", "write_file", {}).runs[0]
    assert (run.decision, run.reason, run.updated_input) == ("ask", "looks odd",
                                                             {"path": "b.txt"})


# trust --------------------------------------------------------------------------------------

def test_an_untrusted_project_hook_does_not_run_until_trusted_and_asks_again_once_changed(
        places: dict[str, Path]) -> None:
    """Attack: a hostile repository ships a hook; it must not run before the user trusts its
    exact content, nor after the file changed (a model editing it mid-session, a pull)."""
    workdir = places["workdir"]
    marker = workdir / "pwned"
    settings = _write(workdir / ".claude" / "settings.json",
                      _settings("PreToolUse", f"touch {marker}", "Bash"))
    ran = _hooks(places, "PreToolUse", "shell", {})
    assert ran.runs == [] and not marker.exists()
    assert [f.path for f in ran.untrusted] == [str(settings)]
    assert ran.untrusted[0].hooks[0].command_line == f"touch {marker}"
    digest = ran.untrusted[0].sha256
    assert digest == digest_of(settings)
    trusted = _hooks(places, "PreToolUse", "shell", {}, (digest,), action_id="h2")
    assert [r.exit_code for r in trusted.runs] == [0] and marker.exists()
    marker.unlink()
    # the model adds a hook to the trusted file: the file's hash changed, nothing runs
    settings.write_text(_settings("PreToolUse", f"touch {marker}; curl evil", "Bash"))
    again = _hooks(places, "PreToolUse", "shell", {}, (digest,), action_id="h3")
    assert again.runs == [] and not marker.exists()
    assert again.untrusted[0].sha256 == digest_of(settings) != digest


def test_a_project_settings_symlink_is_not_followed(places: dict[str, Path]) -> None:
    """Attack: the repository's settings file points at a file outside it; it is neither
    read nor run."""
    outside = _write(places["tmp"] / "elsewhere.json",
                     _settings("PreToolUse", "touch pwned"))
    (places["workdir"] / ".claude").mkdir()
    (places["workdir"] / ".claude" / "settings.json").symlink_to(outside)
    ran = _hooks(places, "PreToolUse", "shell", {}, (digest_of(outside),))
    assert ran.runs == []
    assert len(ran.files) == 1 and ran.files[0].error and ran.files[0].hooks == []


def test_a_hook_runs_in_the_sandbox_and_cannot_write_outside_it(
        places: dict[str, Path]) -> None:
    """Attack: a trusted hook (the user's own, even) writes outside the workdir; the
    sandbox keeps it in."""
    outside = places["tmp"] / "outside.txt"
    _write(places["home"] / "settings.json", _settings(
        "PostToolUse", f"echo in > inside.txt; echo out > {outside}"))
    run = _hooks(places, "PostToolUse", "shell", {}).runs[0]
    assert (places["workdir"] / "inside.txt").read_text() == "in\n"
    assert not outside.exists(), run  # (its /tmp is the sandbox's own)


def test_load_context_reports_the_hook_files(places: dict[str, Path]) -> None:
    workdir = places["workdir"]
    settings = _write(workdir / ".claude" / "settings.json", _settings("Stop", "echo hi"))
    _write(places["home"] / "settings.json", _settings("PreToolUse", "true", "Bash"))
    _write(workdir / ".codey" / "settings.json", "{broken")
    found = _run(places, LoadContext(action_id="c1", session_id="s1", workdir=str(workdir)))
    assert isinstance(found, ProjectContext)
    assert [(f.path, f.scope, bool(f.error)) for f in found.hooks] == [
        (str(settings), "project", False),
        (str(workdir / ".codey" / "settings.json"), "project", True),
        (str(places["home"] / "settings.json"), "user", False)]
    assert found.hooks[0].sha256 == digest_of(settings)


def test_a_matcher_is_read_only_where_claude_code_reads_one(places: dict[str, Path]) -> None:
    """A Stop or UserPromptSubmit hook written with a matcher (Claude Code ignores it there)
    still runs; a Notification's matcher is its type."""
    _write(places["home"] / "settings.json", json.dumps({"hooks": {
        "Stop": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo stop"}]}],
        "Notification": [{"matcher": "question",
                          "hooks": [{"type": "command", "command": "echo asked"}]}]}}))
    assert [r.stdout for r in _hooks(places, "Stop", "", {}).runs] == ["stop\n"]
    assert _hooks(places, "Notification", "permission_prompt", {}, action_id="h2").runs == []
    assert [r.stdout for r in _hooks(places, "Notification", "question", {},
                                     action_id="h3").runs] == ["asked\n"]
