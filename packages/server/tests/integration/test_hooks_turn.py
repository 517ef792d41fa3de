"""Hooks at the turn's other moments, through the real stack (issue 39): PreToolUse ``ask``
and ``additionalContext``, PostToolUse, PermissionRequest, Notification, UserPromptSubmit,
SessionStart and Stop (with its cap), a hook that times out and one printing garbage — real
hook scripts in bash and Python, from the worker's home (the user's own: they run without
trust). One stack for the module; each test its own session and folder. And an attack: hooks
the model writes into the repository mid-session do not run without trust."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.scenarios import create_session, idle, provider_config, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until
from codey_testkit.wsclient import BrowserSocket

#: the Python that runs the Python hooks (the tests' own: on every machine that runs them)
PY = sys.executable
#: PreToolUse (Python): ``ask`` for a command saying ask-me, context for one saying pre-ctx
PRE = """import json, sys
d = json.load(sys.stdin)
cmd = d.get("tool_input", {}).get("command", "")
if "ask-me" in cmd:
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "ask", "permissionDecisionReason": "a person should see this"}}))
elif "pre-ctx" in cmd:
    print(json.dumps({"hookSpecificOutput": {"additionalContext": "PRE-CONTEXT-42"}}))
"""
#: PostToolUse (bash): blocks with a reason in JSON, or by exit code 2
POST = """input=$(cat)
case "$input" in
  *post-block*) echo '{"decision": "block", "reason": "POST-REASON-7"}' ;;
  *post-exit*) echo 'POST-STDERR-8' >&2; exit 2 ;;
esac
exit 0"""
#: PermissionRequest (bash): answers the approval for a command saying perm-allow
PERMISSION = """input=$(cat)
case "$input" in
  *perm-allow*) echo '{"hookSpecificOutput": {"hookEventName": "PermissionRequest",
    "decision": {"behavior": "allow"}}}' ;;
esac
exit 0"""
#: UserPromptSubmit (Python): blocks, adds context, or prints garbage
PROMPT = """import json, sys
p = json.load(sys.stdin)["prompt"]
if "forbidden" in p:
    print("PROMPT-BLOCKED-3", file=sys.stderr)
    sys.exit(2)
if "needs-context" in p:
    print("CTX-FROM-PROMPT-HOOK")
if "garbage" in p:
    print("{this is not json")
"""
#: UserPromptSubmit too: sleeps past its 1 s timeout for a prompt saying slow-hook
SLOW = 'case "$(cat)" in *slow-hook*) sleep 20 ;; esac; exit 0'
#: Stop (Python): always asks to go on after KEEP-GOING; once after ONCE-MORE
STOP = """import json, sys
d = json.load(sys.stdin)
last = d.get("last_assistant_message", "")
if "KEEP-GOING" in last:
    print(json.dumps({"decision": "block", "reason": "STOP-REASON-5"}))
elif "ONCE-MORE" in last and not d["stop_hook_active"]:
    print(json.dumps({"decision": "block", "reason": "ONE-MORE-TIME"}))
elif "SUB-ONCE" in last and d["hook_event_name"] == "SubagentStop":
    print(json.dumps({"decision": "block", "reason": "SUB-MORE"}))
"""


#: the hook scripts, written into each session's folder (the sandbox a hook runs in shows it
#: the workdir, not the rest of the test's temporary folder)
SCRIPTS = {"pre.py": PRE, "post.sh": POST, "permission.sh": PERMISSION, "prompt.py": PROMPT,
           "stop.py": STOP}


def _settings() -> dict[str, Any]:
    bin_dir = '"$CLAUDE_PROJECT_DIR"/.hookbin'

    def cmd(line: str, **more: Any) -> dict[str, Any]:
        return {"type": "command", "command": line, **more}

    return {"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [cmd(f"{PY} {bin_dir}/pre.py")]}],
        "PostToolUse": [{"matcher": "Bash", "hooks": [cmd(f"bash {bin_dir}/post.sh")]}],
        "PermissionRequest": [{"matcher": "Bash",
                               "hooks": [cmd(f"bash {bin_dir}/permission.sh")]}],
        "Notification": [{"hooks": [cmd("cat > notified.json")]}],
        "UserPromptSubmit": [{"hooks": [cmd(f"{PY} {bin_dir}/prompt.py"),
                                        cmd(SLOW, timeout=1)]}],
        "SessionStart": [{"hooks": [cmd("test -f start-ctx && echo SESSION-START-CTX; exit 0")]}],
        "Stop": [{"hooks": [cmd(f"{PY} {bin_dir}/stop.py")]}],
        "SubagentStop": [{"hooks": [cmd(f"{PY} {bin_dir}/stop.py")]}],
        "PreCompact": [{"matcher": "manual", "hooks": [cmd("cat > precompact.json")]}],
        "SessionEnd": [{"hooks": [cmd("cat > ended.json")]}],
    }}


def _shell(line: str) -> dict[str, Any]:
    return {"calls": [{"name": "shell", "arguments": {"command": ["bash", "-c", line]}}]}


EVIL = {"hooks": {
    "Stop": [{"hooks": [{"type": "command", "command": "touch evil-stop.txt"}]}],
    "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "touch evil-prompt.txt"}]}]}}

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "run ask-me"}, "reply": _shell("echo ask-me ran")},
    {"match": {"tool": "shell", "tool_output": "ask-me ran"}, "reply": {"text": "Asked, ran."}},
    {"match": {"user": "run perm"}, "reply": _shell("echo ask-me perm-allow done")},
    {"match": {"tool": "shell", "tool_output": "perm-allow done"},
     "reply": {"text": "Permitted."}},
    {"match": {"user": "run post"}, "reply": _shell("echo post-block pre-ctx out")},
    {"match": {"tool": "shell", "tool_output": "POST-REASON-7"}, "reply": {"text": "Post seen."}},
    {"match": {"user": "exit post"}, "reply": _shell("echo post-exit out")},
    {"match": {"tool": "shell", "tool_output": "POST-STDERR-8"},
     "reply": {"text": "Stderr seen."}},
    {"match": {"user": "CTX-FROM-PROMPT-HOOK"}, "reply": {"text": "Prompt context seen."}},
    {"match": {"user": "SESSION-START-CTX"}, "reply": {"text": "Start context seen."}},
    {"match": {"user": "keep going"}, "reply": {"text": "KEEP-GOING first."}},
    {"match": {"user": "STOP-REASON-5"}, "reply": {"text": "KEEP-GOING again."}},
    {"match": {"user": "once more"}, "reply": {"text": "ONCE-MORE said."}},
    {"match": {"user": "ONE-MORE-TIME"}, "reply": {"text": "Done after the hook."}},
    {"match": {"user": "delegate please"}, "reply": {"calls": [{"name": "delegate", "arguments": {
        "role": "explorer", "task": "sub-task: answer"}}]}},
    {"match": {"user": "sub-task"}, "reply": {"text": "SUB-ONCE reply."}},
    {"match": {"user": "SUB-MORE"}, "reply": {"text": "Sub done."}},
    {"match": {"tool": "delegate"}, "reply": {"text": "Parent done."}},
    {"match": {"user": "garbage slow-hook"}, "reply": {"text": "Went on."}},
    {"match": {"user": "write hooks"}, "reply": {"calls": [{"name": "write_file", "arguments": {
        "path": ".claude/settings.json", "content": json.dumps(EVIL)}}]}},
    {"match": {"tool": "write_file"}, "reply": {"text": "Written."}},
    {"match": {"user": "forbidden"}, "reply": {"text": "The model saw it."}},
    {"match": {"any": True}, "reply": {"text": "Plain answer."}},
]}


class Stack:
    def __init__(self, server: ServerProcess, model: ModelServerHandle,
                 worker: WorkerProcess) -> None:
        self.server, self.model, self.worker = server, model, worker

    def folder(self, name: str) -> Path:
        wd = Path(self.worker.workdir(name))
        (wd / ".hookbin").mkdir(parents=True, exist_ok=True)
        for script, text in SCRIPTS.items():
            (wd / ".hookbin" / script).write_text(text)
        return wd

    def start(self, name: str, prompt: str, **files: str) -> tuple[str, Path]:
        wd = self.folder(name)
        for rel, text in files.items():
            (wd / rel).write_text(text)
        return create_session(self.server, self.worker, str(wd), prompt), wd

    def said(self, sid: str, count: int = 1, timeout: float = 30) -> dict[str, Any]:
        """The session once idle with ``count`` assistant messages."""
        return wait_for(self.server, sid, lambda s: idle(s) and len(_said(s)) >= count
                        and s["status"] == "idle", timeout=timeout, what=f"{count} answers")


def _said(s: dict[str, Any]) -> list[str]:
    return [i["text"] for i in s["items"] if i["kind"] == "assistant_message"]


def _written(path: Path) -> Any:
    """The JSON a hook wrote into ``path``, once it is all there (None until then)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _runs(s: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [r for r in s["hook_runs"] if r["event"] == event]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("hooks-turn")
    with start_model_server(SCRIPT, root / "model") as model, \
            ServerProcess(root / "server", config=provider_config(model)) as server:
        home = root / "worker"
        with WorkerProcess(server, home, env={"HOME": str(home)}) as worker:
            (worker.codey_home / "settings.json").write_text(json.dumps(_settings()))
            yield Stack(server, model, worker)


def test_ask_goes_to_the_gate_under_full_auto_and_notification_runs(stack: Stack) -> None:
    sid, wd = stack.start("ask", "run ask-me")
    s = wait_for(stack.server, sid, lambda s: s["status"] == "waiting_approval"
                 and _written(wd / "notified.json") is not None, what="the hook's approval")
    [approval] = [a for a in s["approvals"].values() if a["status"] == "pending"]
    assert "a PreToolUse hook asks: a person should see this" in approval["reason"]
    note = _written(wd / "notified.json")
    assert note is not None
    assert note["hook_event_name"] == "Notification" and "approval" in note["message"]
    # the PermissionRequest hook ran and left it to the user
    [perm] = _runs(s, "PermissionRequest")
    assert perm["decision"] == "" and perm["exit_code"] == 0
    r = stack.server.http.post(f"/api/sessions/{sid}/approvals/{approval['approval_id']}",
                               json={"decision": "approve"})
    assert r.status_code == 200, r.text
    s = stack.said(sid)
    assert _said(s) == ["Asked, ran."] and tools(s)[0]["status"] == "done"
    assert [r["decision"] for r in _runs(s, "PreToolUse")] == ["ask"]
    assert [r["item_id"] for r in _runs(s, "Notification")] == [tools(s)[0]["id"]]


def test_a_permission_request_hook_answers_the_approval(stack: Stack) -> None:
    sid, _ = stack.start("perm", "run perm")
    s = stack.said(sid)
    assert _said(s) == ["Permitted."]
    [approval] = s["approvals"].values()
    assert approval["status"] == "approved"
    assert approval["message"] == "approved by a PermissionRequest hook"
    assert [r["decision"] for r in _runs(s, "PermissionRequest")] == ["allow"]
    assert _runs(s, "Notification") == []  # nobody was waited for


def test_post_tool_use_blocks_and_context_reach_the_model(stack: Stack) -> None:
    sid, _ = stack.start("post", "run post")
    s = stack.said(sid)
    assert _said(s) == ["Post seen."]
    result = tools(s)[0]["result"]
    assert "post-block pre-ctx out" in result  # the command's own output first
    assert "PRE-CONTEXT-42" in result and "POST-REASON-7" in result
    assert result.index("PRE-CONTEXT-42") < result.index("POST-REASON-7")
    [post] = _runs(s, "PostToolUse")
    assert post["decision"] == "block" and post["item_id"] == tools(s)[0]["id"]
    stack.server.http.post(f"/api/sessions/{sid}/prompt",
                           json={"text": "exit post"}).raise_for_status()
    s = stack.said(sid, 2)
    assert _said(s)[-1] == "Stderr seen."
    assert "POST-STDERR-8" in tools(s)[-1]["result"]


def test_user_prompt_submit_blocks_or_adds_context(stack: Stack) -> None:
    sid, _ = stack.start("prompt", "please, needs-context")
    s = stack.said(sid)
    assert _said(s) == ["Prompt context seen."]
    prompt = s["items"][0]
    [ran, _slow] = _runs(s, "UserPromptSubmit")
    assert ran["item_id"] == prompt["id"] and "CTX-FROM-PROMPT-HOOK" in ran["output"]
    hooked = [i for i in s["items"] if i["kind"] == "user_message" and i["origin"] == "hook"]
    assert len(hooked) == 1 and "CTX-FROM-PROMPT-HOOK" in hooked[0]["text"]

    asked = len(stack.model.requests("/v1/chat/completions"))
    stack.server.http.post(f"/api/sessions/{sid}/prompt",
                           json={"text": "something forbidden"}).raise_for_status()
    s = wait_for(stack.server, sid, lambda s: any(
        i["kind"] == "notice" and i["code"] == "hook_blocked" for i in s["items"])
        and s["status"] == "idle", what="the blocked prompt")
    [blocked] = [i for i in s["items"] if i["kind"] == "user_message"
                 and "forbidden" in i["text"]]
    assert blocked["blocked"] == "PROMPT-BLOCKED-3"
    assert "The model saw it." not in _said(s)
    assert len(stack.model.requests("/v1/chat/completions")) == asked

    # the next prompt goes on, and the blocked one is not in what the model reads
    stack.server.http.post(f"/api/sessions/{sid}/prompt",
                           json={"text": "just talk"}).raise_for_status()
    s = stack.said(sid, 2)
    assert _said(s)[-1] == "Plain answer."
    sent = json.dumps(stack.model.requests("/v1/chat/completions")[-1]["body"]["messages"])
    assert "forbidden" not in sent and "just talk" in sent


def test_a_hook_that_times_out_or_prints_garbage_blocks_nothing(stack: Stack) -> None:
    sid, _ = stack.start("garbage", "garbage slow-hook")
    s = stack.said(sid)
    assert _said(s) == ["Went on."]
    runs = {r["command_line"]: r for r in _runs(s, "UserPromptSubmit")}
    assert runs[SLOW]["timed_out"] and "timed out" in runs[SLOW]["problem"]
    garbage = next(r for line, r in runs.items() if "prompt.py" in line)
    assert "starts like JSON but is not JSON" in garbage["problem"]
    assert garbage["decision"] == ""


def test_session_start_adds_context_once(stack: Stack) -> None:
    sid, _ = stack.start("start", "hello", **{"start-ctx": ""})
    s = stack.said(sid)
    assert _said(s) == ["Start context seen."]
    [ran] = _runs(s, "SessionStart")
    assert ran["item_id"] == s["items"][0]["id"] and "SESSION-START-CTX" in ran["output"]
    stack.server.http.post(f"/api/sessions/{sid}/prompt",
                           json={"text": "again"}).raise_for_status()
    s = stack.said(sid, 2)
    assert len(_runs(s, "SessionStart")) == 1


def test_stop_blocks_go_on_and_are_capped(stack: Stack) -> None:
    sid, _ = stack.start("stop-once", "once more")
    s = stack.said(sid, 2)
    assert _said(s) == ["ONCE-MORE said.", "Done after the hook."]
    assert [r["decision"] for r in _runs(s, "Stop")] == ["block", ""]
    answers = [i["id"] for i in s["items"] if i["kind"] == "assistant_message"]
    assert [r["item_id"] for r in _runs(s, "Stop")] == answers  # each on the answer it judged

    sid, _ = stack.start("stop-cap", "keep going")
    s = wait_for(stack.server, sid, lambda s: s["status"] == "idle" and any(
        i["kind"] == "notice" and i["code"] == "hook_stop_cap" for i in s["items"]),
        what="the Stop cap")
    assert _said(s) == ["KEEP-GOING first."] + ["KEEP-GOING again."] * 3
    told = [i["text"] for i in s["items"] if i["kind"] == "user_message"
            and i["origin"] == "hook"]
    assert told == ["A Stop hook asks you to go on: STOP-REASON-5"] * 3
    assert [r["decision"] for r in _runs(s, "Stop")] == ["block"] * 3


def test_hooks_the_model_writes_do_not_run_without_trust(stack: Stack) -> None:
    sid, wd = stack.start("attack", "write hooks")
    s = stack.said(sid)
    assert _said(s) == ["Written."]
    stack.server.http.post(f"/api/sessions/{sid}/prompt",
                           json={"text": "and now?"}).raise_for_status()
    s = stack.said(sid, 2)
    assert json.loads((wd / ".claude" / "settings.json").read_text()) == EVIL
    [project] = [f for f in s["hook_files"] if f["scope"] == "project"]
    assert {h["event"] for h in project["hooks"]} == {"Stop", "UserPromptSubmit"}
    assert s["trusted_hooks"] == []
    assert not (wd / "evil-stop.txt").exists() and not (wd / "evil-prompt.txt").exists()


def test_a_sub_agent_stop_hook_keeps_it_going_and_pre_compact_runs(stack: Stack) -> None:
    sid, wd = stack.start("sub", "delegate please")
    s = stack.said(sid)
    assert _said(s) == ["Parent done."]
    assert "Sub done." in tools(s)[0]["result"]
    state = stack.server.http.get("/api/state/bootstrap").json()["state"]
    [child] = [c for c in state["sessions"].values() if c["parent_id"] == sid]
    assert _said(child) == ["SUB-ONCE reply.", "Sub done."]
    assert [r["decision"] for r in _runs(child, "SubagentStop")] == ["block", ""]
    assert _runs(child, "Stop") == []

    stack.server.http.post(f"/api/sessions/{sid}/compact").raise_for_status()
    ran = wait_until(lambda: _written(wd / "precompact.json"), timeout=30, what="PreCompact")
    assert (ran["hook_event_name"], ran["trigger"]) == ("PreCompact", "manual")


def test_session_end_runs_when_the_session_is_archived(stack: Stack) -> None:
    sid, wd = stack.start("end", "just talk")
    assert _said(stack.said(sid)) == ["Plain answer."]
    assert not (wd / "ended.json").exists()
    browser = BrowserSocket(stack.server)
    try:
        browser.send({"type": "archive_session", "session_id": sid, "archived": True,
                      "request_id": "a1"})
        ran = wait_until(lambda: _written(wd / "ended.json"), timeout=30, what="SessionEnd")
    finally:
        browser.close()
    assert (ran["hook_event_name"], ran["reason"]) == ("SessionEnd", "archived")
