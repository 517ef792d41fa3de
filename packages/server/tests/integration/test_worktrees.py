"""Worktrees over the real stack (server, worker, real git, the scripted model): two sessions
on one repository each work in a worktree of their own and see only their own change; one
merges, the other conflicts, its conflict goes to its agent, which resolves it, and it
merges; the setup script's output shows; a dirty worktree is not removed without a second
word; a folder that is no repository is worked in as it is."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.scenarios import session, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess


def _write(path: str, content: str) -> dict[str, Any]:
    return {"name": "write_file", "arguments": {"path": path, "content": content}}


@pytest.fixture
def script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [
        {"match": {"user": "be first"},
         "reply": {"calls": [_write("a.txt", "one\nFIRST\nthree\n")]}},
        {"match": {"user": "be second"},
         "reply": {"calls": [_write("a.txt", "one\nSECOND\nthree\n")]}},
        {"match": {"user": "left conflicts in these files"},
         "reply": {"calls": [_write("a.txt", "one\nFIRST and SECOND\nthree\n")]}},
        {"match": {"tool": "write_file"}, "reply": {"text": "Done."}},
        {"match": {"any": True}, "reply": {"text": "Nothing to do."}},
    ]}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _repo(worker: WorkerProcess) -> Path:
    repo = Path(worker.workdir("app"))
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "Tester")
    _git(repo, "config", "user.email", "t@example.com")
    (repo / "a.txt").write_text("one\ntwo\nthree\n")
    (repo / ".codey").mkdir()
    (repo / ".codey" / "setup.sh").write_text("echo setting up the worktree\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "start")
    return repo


def _start(server: ServerProcess, worker: WorkerProcess, workdir: str, prompt: str,
           worktree: bool = True) -> str:
    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": workdir, "prompt": prompt,
        "policy": "full-auto", **({"worktree": {"base": "main"}} if worktree else {})})
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def _answered(times: int = 1) -> Any:
    return lambda s: s["status"] == "idle" and sum(
        i["kind"] == "assistant_message" for i in s["items"]) >= times


def _op(server: ServerProcess, sid: str, op: str, body: dict[str, Any] | None = None) -> Any:
    return server.http.post(f"/api/sessions/{sid}/worktree/{op}",
                            **({"json": body} if body is not None else {}))


def test_two_sessions_on_one_repository_each_in_its_worktree_merge_one_conflict_resolved(
        server: ServerProcess, worker: WorkerProcess) -> None:
    repo = _repo(worker)
    first = _start(server, worker, str(repo), "be first")
    second = _start(server, worker, str(repo), "be second")
    a = wait_for(server, first, _answered(), what="the first session's answer")
    b = wait_for(server, second, _answered(), what="the second session's answer")
    assert a["worktree"]["status"] == b["worktree"]["status"] == "ready"
    assert a["workdir"] != b["workdir"] and str(repo) not in (a["workdir"], b["workdir"])
    assert a["worktree"]["branch"].startswith("codey/be-first-")
    made = next(i for i in a["items"] if i["kind"] == "git_op")
    assert (made["op"], made["status"], made["exit_code"]) == ("create", "done", 0)
    assert "setting up the worktree" in made["output"]
    # the repository's own folder is untouched; each sees only its own change
    assert (repo / "a.txt").read_text() == "one\ntwo\nthree\n"
    for sid, line in ((first, "FIRST"), (second, "SECOND")):
        changes = server.http.get(f"/api/sessions/{sid}/changes").json()
        assert [(f["path"], f["added"], f["deleted"], f["committed"])
                for f in changes["files"]] == [("a.txt", 1, 1, False)]
        assert f"+{line}" in changes["diff"] and changes["dirty"]
        counted = session(server, sid)["worktree"]
        assert (counted["files"], counted["added"], counted["deleted"]) == (1, 1, 1)

    # a dirty worktree is not removed without a second word
    refused = _op(server, first, "remove", {})
    assert refused.status_code == 409 and refused.json()["extra"]["code"] == "dirty"

    assert _op(server, first, "commit", {"message": "First"}).status_code == 200
    merged = _op(server, first, "merge", {"mode": "rebase"}).json()
    assert merged["merged"], merged
    assert (repo / "a.txt").read_text() == "one\nFIRST\nthree\n"

    assert _op(server, second, "commit", {"message": "Second"}).status_code == 200
    conflicted = _op(server, second, "merge", {"mode": "rebase"}).json()
    assert not conflicted["merged"] and conflicted["conflicts"] == ["a.txt"]
    handed = _op(server, second, "resolve").json()
    assert handed == {"conflicts": ["a.txt"], "prompted": True}
    wait_for(server, second, _answered(2), what="the agent resolving the conflict")
    assert _op(server, second, "commit", {"message": "Merge main"}).status_code == 200
    assert _op(server, second, "merge", {"mode": "rebase"}).json()["merged"]
    assert (repo / "a.txt").read_text() == "one\nFIRST and SECOND\nthree\n"
    ops = [(i["op"], i["status"]) for i in session(server, second)["items"]
           if i["kind"] == "git_op"]
    assert ops == [("create", "done"), ("commit", "done"), ("merge", "failed"),
                   ("update", "done"), ("commit", "done"), ("merge", "done")]

    # removed once merged; its branch stays
    removed = _op(server, second, "remove", {}).json()
    assert not Path(removed["path"]).exists()
    assert session(server, second)["worktree"]["status"] == "removed"
    assert "codey/be-second" in _git(repo, "branch", "--list", "codey/*")


def test_a_folder_that_is_no_repository_is_worked_in_as_it_is(
        server: ServerProcess, worker: WorkerProcess) -> None:
    plain = Path(worker.workdir("plain"))
    plain.mkdir(parents=True)
    sid = _start(server, worker, str(plain), "be first")
    s = wait_for(server, sid, _answered(), what="the answer")
    assert s["worktree"]["status"] == "in_place" and s["workdir"] == str(plain)
    assert (plain / "a.txt").read_text() == "one\nFIRST\nthree\n"
    assert server.http.get(f"/api/sessions/{sid}/changes").status_code == 409
