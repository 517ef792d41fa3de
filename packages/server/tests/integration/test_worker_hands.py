"""A prompt-injected model against the worker's own hands (issue 32), through the real server,
the real worker (bubblewrap, git) and the scripted model, under each approval policy.

The model does what its sandbox allows — a ``git init`` with ``core.fsmonitor`` set in a plain
folder, a nested repository with a clean filter and its own fsmonitor in a worktree — and
writes into ``.git`` through a symlink shipped in the project. A user who approves every
question it asks (``suggest``, ``auto-edit``) gets no further than ``full-auto``: the next
turn's context load and the change count after each turn run the worker's own git, and the
trap (a marker outside every workdir, where only an unsandboxed process writes) never springs.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.scenarios import session, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

POLICIES = ["suggest", "auto-edit", "full-auto"]


def _shell(script: str) -> dict[str, Any]:
    return {"name": "shell", "arguments": {"command": ["sh", "-c", script]}}


def _script(pwned: Path) -> dict[str, Any]:
    trap = f"touch {pwned}"
    plant = (f"git init -q && git config core.fsmonitor '{trap}; false' && "
             "echo planted")
    nested = ("mkdir nested && cd nested && git init -q && echo data > x.txt && "
              "git add x.txt && git -c user.name=m -c user.email=m@x commit -qm x && "
              f"git config filter.evil.clean \"{trap}; cat\" && "
              f"git config core.fsmonitor \"{trap}; false\" && "
              "echo '* filter=evil' > .gitattributes && echo DATA > x.txt && "
              "touch -d 2000-01-01 x.txt && echo nested")
    return {"model": "scripted-1", "steps": [
        # a plain folder made a repository with a trap in its config
        {"match": {"user": "plant a repository"}, "reply": {"calls": [_shell(plant)]}},
        {"match": {"tool": "shell", "tool_output": "planted"},
         "reply": {"calls": [{"name": "write_file", "arguments": {
             "path": "meta/config", "content": f"[core]\n\tfsmonitor = {trap}\n"}}]}},
        {"match": {"tool": "write_file"}, "reply": {"text": "planted it"}},
        # a nested repository in a worktree
        {"match": {"user": "nest a repository"}, "reply": {"calls": [_shell(nested)]}},
        {"match": {"tool": "shell", "tool_output": "nested"}, "reply": {"text": "nested it"}},
        {"match": {"any": True}, "reply": {"text": "ok"}},
    ]}


@pytest.fixture
def pwned(tmp_path: Path) -> Path:
    return tmp_path / "pwned"


@pytest.fixture
def script(pwned: Path) -> dict[str, Any]:
    return _script(pwned)


def _run_approving(server: ServerProcess, sid: str, answers: int) -> dict[str, Any]:
    """Wait for the session's ``answers``-th answer, approving everything it asks on the
    way (a user who trusts the agent)."""
    def approved() -> dict[str, Any]:
        s = session(server, sid)
        for approval in s["approvals"].values():
            if approval["status"] == "pending":
                r = server.http.post(f"/api/sessions/{sid}/approvals/{approval['approval_id']}",
                                     json={"decision": "approve"})
                assert r.status_code in (200, 409), r.text
        return s

    def answered(s: dict[str, Any]) -> bool:
        done = sum(i["kind"] == "assistant_message" for i in s["items"])
        return s["status"] in ("idle", "error") and done >= answers

    return wait_until(approved, ok=answered, timeout=60, interval=0.05,
                      show=lambda s: s["status"],
                      what=f"the session to answer {answers} time(s)")


def _prompt(server: ServerProcess, sid: str, text: str) -> None:
    r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": text})
    assert r.status_code in (200, 202), r.text


@pytest.mark.parametrize("policy", POLICIES)
def test_a_repository_the_model_plants_runs_nothing_when_the_worker_reads_it(
        server: ServerProcess, worker: WorkerProcess, model: ModelServerHandle,
        policy: str, pwned: Path) -> None:
    folder = Path(worker.workdir("notes"))
    folder.mkdir(parents=True)
    (folder / "todo.txt").write_text("x\n")
    (folder / "meta").symlink_to(".git")  # shipped with the project
    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": str(folder), "prompt": "plant a repository",
        "policy": policy})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    s = _run_approving(server, sid, 1)
    shell = next(i for i in s["items"] if i["kind"] == "tool_call" and i["name"] == "shell")
    assert "planted" in (shell.get("result") or ""), shell  # the attack did run, sandboxed
    wrote = next(i for i in s["items"] if i["kind"] == "tool_call" and i["name"] == "write_file")
    assert wrote["status"] == "failed" and "protected_path" in (wrote.get("result") or "") + \
        (wrote.get("error") or ""), wrote
    # (the model's own `git config` did write its trap there: the sandbox allows it in a
    # folder that was not a repository; write_file's version did not land)
    assert f"fsmonitor = touch {pwned}\n" not in (folder / ".git" / "config").read_text()
    # the trap is live for git run the old way
    subprocess.run(["git", "status"], cwd=folder, capture_output=True, check=False)
    assert pwned.exists()
    pwned.unlink()

    # the next turn starts with a context load: the worker's own git status
    _prompt(server, sid, "go on")
    s = _run_approving(server, sid, 2)
    assert s["context"]["environment"]["git_branch"], s["context"]
    assert not pwned.exists()


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@x", *args], cwd=cwd,
                   check=True, capture_output=True)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_nested_repository_in_a_worktree_runs_nothing_when_the_changes_are_counted(
        server: ServerProcess, worker: WorkerProcess, model: ModelServerHandle,
        policy: str, pwned: Path) -> None:
    repo = Path(worker.workdir("app"))
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "start")
    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": str(repo), "prompt": "nest a repository",
        "policy": policy, "worktree": {"base": "main"}})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    s = _run_approving(server, sid, 1)
    wt = Path(s["workdir"])
    assert (wt / "nested" / ".git").is_dir()
    # the change count runs after the turn
    s = wait_for(server, sid, lambda s: s["worktree"].get("files") is not None,
                 what="the change count")
    changes = server.http.get(f"/api/sessions/{sid}/changes").json()
    assert not any(f["path"].startswith("nested") for f in changes["files"])
    assert not pwned.exists()
    subprocess.run(["git", "hash-object", "x.txt"], cwd=wt / "nested", capture_output=True,
                   check=False)
    assert pwned.exists()  # (the trap was live)
