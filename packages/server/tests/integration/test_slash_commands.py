"""Slash commands over real processes: the worker lists the prompt files of a session's
workdir and of the user's home (Claude Code's, Codex's and Codey's folders, namespaces, front
matter), refuses a repository's symlink out and lists a file with garbage front matter with a
warning; running one sends its body with the arguments substituted; the turn it starts runs
on the model its front matter names and offers only its allowed tools, the next turn on the
session's own model and tools."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.scenarios import create_session, session
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until


@pytest.fixture
def script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [
        {"match": {"user": "Review pull request #123"}, "reply": {"text": "Reviewed 123."}},
        {"match": {"any": True}, "reply": {"text": "Hello."}},
    ]}


@pytest.fixture
def server(tmp_path: Path, model: ModelServerHandle) -> Iterator[ServerProcess]:
    """Two providers on the scripted model: the second offers the model a prompt file asks
    for."""
    config = {"providers": [
        {"name": "scripted", "kind": "chat", "base_url": model.base_url,
         "models": ["scripted-1"]},
        {"name": "fast", "kind": "chat", "base_url": model.base_url,
         "models": ["claude-haiku-4"]}], "default_provider": "scripted"}
    with ServerProcess(tmp_path / "server", config=config) as proc:
        yield proc


@pytest.fixture
def worker(tmp_path: Path, server: ServerProcess) -> Iterator[WorkerProcess]:
    """A worker whose user's home (``HOME``) is the test's, with prompt files in it."""
    home = tmp_path / "worker"
    _write(home / ".claude/commands/standup.md",
           "---\ndescription: Standup notes\n---\nWrite my standup.")
    _write(home / ".codex/prompts/mine/todo.md", "List the TODOs in $1")
    _write(home / ".codey/commands/codey-own.md", "Codey's own")
    with WorkerProcess(server, home, env={"HOME": str(home)}) as w:
        yield w


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_prompt_files_listed_and_run(tmp_path: Path, server: ServerProcess,
                                     worker: WorkerProcess, model: ModelServerHandle) -> None:
    wd = worker.root / "repo"
    _write(wd / ".claude/commands/review-pr.md",
           "---\ndescription: Review a pull request\nargument-hint: <number> <priority>\n"
           "model: haiku\nallowed-tools: Bash(gh pr view:*), Read\n---\n"
           "Review pull request #$1 with priority $2.")
    _write(wd / ".codey/commands/git/commit.md", "Commit with message: $ARGUMENTS")
    _write(wd / ".codex/prompts/odd.md", "---\ndescription: [never closed\n---\nOdd but usable")
    secret = _write(tmp_path / "outside" / "secret.md", "THE SECRET")
    (wd / ".claude/commands/steal.md").symlink_to(secret)
    (wd / ".claude/commands/out").symlink_to(secret.parent)
    sid = create_session(server, worker, str(wd), "hi")

    def greeted() -> bool:  # the first turn over (idle alone is also before it starts)
        s = session(server, sid)
        return s["status"] == "idle" and any(
            i.get("text") == "Hello." for i in s["items"] if i["kind"] == "assistant_message")

    wait_until(greeted, timeout=30)

    r = server.http.get(f"/api/sessions/{sid}/commands", timeout=60)
    assert r.status_code == 200, r.text
    listed = r.json()
    by_name = {c["name"]: c for c in listed["commands"]}
    assert list(by_name) == ["review-pr", "odd", "git:commit", "standup", "mine:todo",
                             "codey-own"]
    review = by_name["review-pr"]
    assert (review["scope"], review["description"], review["argument_hint"], review["model"],
            review["allowed_tools"]) == (
        "project", "Review a pull request", "<number> <priority>", "haiku",
        ["Bash(gh pr view:*)", "Read"])
    assert [by_name[n]["scope"] for n in ("standup", "mine:todo", "codey-own")] == ["user"] * 3
    assert "body" not in review  # the body stays on the server
    warnings = "\n".join(listed["warnings"])
    assert "steal.md: skipped (it is a symlink)" in warnings
    assert ".claude/commands/out: skipped" in warnings
    assert "odd.md: the front matter is not YAML" in warnings
    assert "THE SECRET" not in r.text

    r = server.http.post(f"/api/sessions/{sid}/commands/run",
                         json={"name": "review-pr", "arguments": "123 high"}, timeout=60)
    assert r.status_code == 202, r.text
    ran = r.json()
    assert ran["text"] == "Review pull request #123 with priority high."
    assert ran["model"] == "claude-haiku-4"
    # Bash(…) allows the whole tool (the approval policy still asks); Read: read_file & co
    assert ran["tools"] == ["exec", "kill", "read_file", "shell", "view_image", "write_stdin"]
    assert ran["notes"] == []

    def answered() -> dict[str, Any] | None:
        s = session(server, sid)
        texts = [i.get("text") for i in s["items"] if i["kind"] == "assistant_message"]
        return s if "Reviewed 123." in texts and s["status"] == "idle" else None

    s = wait_until(answered, timeout=30)
    # for that turn only: the session's own model stays, and the prompt says what it set
    assert (s["provider"], s["model"]) == ("scripted", "scripted-1")
    (prompt,) = [i for i in s["items"] if i["kind"] == "user_message"
                 and i["text"].startswith("Review pull request")]
    assert prompt["for_turn"] == {"slash": "review-pr", "provider": "fast",
                                  "model": "claude-haiku-4", "tools": ran["tools"]}
    asked = [q for q in model.requests("/v1/chat/completions")
             if "Review pull request #123" in str(q["body"]["messages"])]
    assert asked and asked[-1]["body"]["model"] == "claude-haiku-4"
    offered = {t["function"]["name"] for t in asked[-1]["body"]["tools"]}
    assert {"shell", "read_file"} <= offered <= set(ran["tools"]), offered

    r = server.http.post(f"/api/sessions/{sid}/commands/run",
                         json={"name": "git:commit", "arguments": "fix the build"}, timeout=60)
    assert r.status_code == 202 and r.json()["text"] == "Commit with message: fix the build"
    assert (r.json()["model"], r.json()["tools"]) == ("", None)

    def committed() -> list[dict[str, Any]]:
        return [q for q in model.requests("/v1/chat/completions")
                if "Commit with message" in str(q["body"]["messages"])]

    nxt = wait_until(committed, timeout=30)[-1]["body"]
    assert nxt["model"] == "scripted-1"
    assert {"apply_patch", "write_file", "update_plan"} <= {
        t["function"]["name"] for t in nxt["tools"]}

    for name in ("steal", "out:secret", "nope"):
        r = server.http.post(f"/api/sessions/{sid}/commands/run", json={"name": name},
                             timeout=60)
        assert r.status_code == 404, (name, r.text)
    r = server.http.get("/api/sessions/ses_nope/commands")
    assert r.status_code == 404
