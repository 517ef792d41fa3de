"""PreToolUse hooks in Claude Code's format through the real stack (issue 39): a user hook of
the worker's home that denies a command (the model reads the reason), and a hostile
repository's hook that runs only once trusted, and not again after the model rewrote it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.scenarios import create_session, idle, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until
from codey_testkit.wsclient import BrowserSocket

#: the user's own guard (bash, reading its JSON on stdin): no ``rm -rf``
GUARD = ("if grep -q 'rm -rf'; then echo 'no rm -rf here' >&2; exit 2; fi; exit 0")
#: the repository's hook: it leaves a mark in the workdir when it runs
MARKING = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
    {"type": "command", "command": "touch hook-ran.txt"}]}]}}
#: what the model writes into the repository's settings mid-session
REWRITTEN = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
    {"type": "command", "command": "touch evil.txt"}]}]}}

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "try removing"},
     "reply": {"calls": [{"name": "shell", "arguments": {
         "command": ["bash", "-c", "rm -rf scratch"]}}]}},
    {"match": {"tool": "shell", "tool_output": "blocked by a PreToolUse hook"},
     "reply": {"text": "The hook said no."}},
    {"match": {"user": "list please"},
     "reply": {"calls": [{"name": "shell", "arguments": {
         "command": ["bash", "-c", "echo listed"]}}]}},
    {"match": {"tool": "shell", "tool_output": "listed"}, "reply": {"text": "Listed."}},
    {"match": {"user": "rewrite the hooks"},
     "reply": {"calls": [{"name": "write_file", "arguments": {
         "path": ".claude/settings.json", "content": json.dumps(REWRITTEN)}}]}},
    {"match": {"tool": "write_file"}, "reply": {"text": "Rewritten."}},
    {"match": {"any": True}, "reply": {"text": "unexpected"}},
]}


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


def _turn(server: ServerProcess, sid: str, text: str, answer: str, turns: int) -> dict[str, Any]:
    """Send ``text`` and wait for the turn's answer (the ``turns``-th assistant message)."""
    if turns > 1:
        server.http.post(f"/api/sessions/{sid}/prompt", json={"text": text}).raise_for_status()

    def answered(s: dict[str, Any]) -> bool:
        said = [i for i in s["items"] if i["kind"] == "assistant_message"]
        return idle(s) and len(said) >= turns

    s = wait_for(server, sid, answered, timeout=60, what=f"the answer to {text!r}")
    last = [i for i in s["items"] if i["kind"] == "assistant_message"][-1]
    assert last["text"] == answer, json.dumps([tools(s), s["hook_runs"]], indent=0)
    return s


def test_a_user_hook_denies_and_a_project_hook_runs_only_while_trusted(
        tmp_path: Path, server: ServerProcess) -> None:
    home = tmp_path / "worker"
    with WorkerProcess(server, home, env={"HOME": str(home)}) as worker:
        (worker.codey_home / "settings.json").write_text(json.dumps({"hooks": {"PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": GUARD}]}]}}))
        wd = Path(worker.workdir("repo"))
        (wd / ".claude").mkdir(parents=True)
        settings = wd / ".claude" / "settings.json"
        settings.write_text(json.dumps(MARKING))
        (wd / "scratch").mkdir()

        # the user's hook denies: the model reads why; the command never ran
        sid = create_session(server, worker, str(wd), "try removing")
        s = _turn(server, sid, "try removing", "The hook said no.", 1)
        call = tools(s)[0]
        assert call["status"] == "rejected"
        assert call["result"] == "blocked by a PreToolUse hook: no rm -rf here"
        assert (wd / "scratch").is_dir()
        ran = [r for r in s["hook_runs"] if r["item_id"] == call["id"]]
        assert [(r["exit_code"], r["decision"]) for r in ran] == [(2, "deny")], s["hook_runs"]
        # the repository's hook was found, not trusted: it did not run
        [project] = [f for f in s["hook_files"] if f["scope"] == "project"]
        assert project["path"] == str(settings) and s["trusted_hooks"] == []
        assert not (wd / "hook-ran.txt").exists()

        s = _turn(server, sid, "list please", "Listed.", 2)
        assert not (wd / "hook-ran.txt").exists()

        # trusted in this content: it runs
        browser = BrowserSocket(server)
        try:
            browser.send({"type": "trust_hooks", "session_id": sid, "path": str(settings),
                          "sha256": project["sha256"], "request_id": "t1"})
            wait_for(server, sid, lambda s: s["trusted_hooks"] == [project["sha256"]],
                     what="the trust")
            # a hash the worker never reported is refused
            browser.send({"type": "trust_hooks", "session_id": sid, "path": str(settings),
                          "sha256": "0" * 64, "request_id": "t2"})
        finally:
            browser.close()
        _turn(server, sid, "list please", "Listed.", 3)
        assert (wd / "hook-ran.txt").exists()
        (wd / "hook-ran.txt").unlink()

        # the model rewrites the trusted file: the new content is not trusted, nothing runs
        _turn(server, sid, "rewrite the hooks", "Rewritten.", 4)
        wait_until(lambda: json.loads(settings.read_text()) == REWRITTEN, timeout=30,
                   what="the file rewritten")
        s = _turn(server, sid, "list please", "Listed.", 5)
        assert not (wd / "evil.txt").exists() and not (wd / "hook-ran.txt").exists()
        assert s["trusted_hooks"] == [project["sha256"]]
