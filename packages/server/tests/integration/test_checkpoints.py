"""Checkpoints over the real stack (server, worker, real git, the scripted model): a session
whose three turns write, patch and delete files (a binary, an untracked file, an ignored
one) and a fourth that only reads; each changing turn has a checkpoint, the reading one none;
restored to turn 1's checkpoint the files equal it, the ignored file is untouched and a file
made by hand since is named and kept — in a repository, in a folder that is not one, and in a
worktree session. A restore is refused while a turn runs, and for a checkpoint whose commit is
gone; a restored path outside the workdir is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from codey_testkit.scenarios import wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.workfiles import call, file_turn_steps, files, git, make_folder


@pytest.fixture
def script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [
        *file_turn_steps(),
        {"match": {"user": "just look"}, "reply": {"calls": [call("read_file", path="a.txt")]}},
        {"match": {"user": "take your time"}, "reply": {"calls": [
            call("shell", command=["sleep", "60"])]}},
        {"match": {"any": True}, "reply": {"text": "Done."}},
    ]}


def _folder(worker: WorkerProcess, kind: str) -> Path:
    return make_folder(Path(worker.workdir("app")), kind)


def _answers(n: int) -> Any:
    return lambda s: s["status"] == "idle" and sum(
        i["kind"] == "assistant_message" for i in s["items"]) >= n


def _prompt(server: ServerProcess, sid: str, text: str, n: int) -> dict[str, Any]:
    r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": text})
    assert r.status_code in (200, 202), r.text
    return wait_for(server, sid, _answers(n), timeout=60, what=f"the answer to {text!r}")


def _turns(s: dict[str, Any]) -> list[str]:
    return [i["id"] for i in s["items"] if i["kind"] == "user_message"]


@pytest.mark.parametrize("kind", ["repo", "plain", "worktree"])
def test_three_turns_restored_to_the_first_with_a_hand_edit_kept(
        server: ServerProcess, worker: WorkerProcess, kind: str) -> None:
    folder = _folder(worker, kind)
    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": str(folder), "prompt": "turn one",
        "policy": "full-auto", **({"worktree": {"base": "main"}} if kind == "worktree" else {})})
    assert r.status_code == 201, r.text
    sid = str(r.json()["session_id"])
    s = wait_for(server, sid, _answers(1), timeout=60, what="turn one's answer")
    work = Path(s["workdir"])
    if kind == "worktree":
        assert work != folder
        (work / "debug.log").write_text("before\n")
    before = files(work)
    before.pop("notes.md")
    before.pop("pic.bin")
    _prompt(server, sid, "turn two", 2)
    _prompt(server, sid, "turn three", 3)
    s = _prompt(server, sid, "just look", 4)
    one, two, three, look = _turns(s)

    marks = server.http.get(f"/api/sessions/{sid}/checkpoints").json()
    assert [m["turn"] for m in marks] == [one, two, three]  # the reading turn has none
    assert marks[0]["shadow"] == (kind == "plain")
    assert not (work / ".git").exists() if kind == "plain" else True
    # the checkpoint of turn one holds the files as they were before it
    assert marks[0]["files"] == 3

    (work / "by-hand.txt").write_text("mine\n")  # the user's own edit, after the turns
    preview = server.http.get(f"/api/sessions/{sid}/checkpoints/{one}/preview").json()
    assert preview["refused"] is None, preview
    changes = {f["path"]: f["status"] for f in preview["files"]}
    assert changes == {"a.txt": "modified", "gone.txt": "added", "notes.md": "deleted",
                       "pic.bin": "deleted", "by-hand.txt": "deleted"}
    assert preview["hand_edited"] == ["by-hand.txt"]
    assert "-TWO" in next(f["diff"] for f in preview["files"] if f["path"] == "a.txt")

    # the change between two turns, and to now
    diff = server.http.get(f"/api/sessions/{sid}/diff",
                           params={"from": two, "to": three}).json()
    assert {f["path"]: f["status"] for f in diff["files"]} == {"a.txt": "modified"}
    # a turn that changed nothing uses the next checkpoint: none after "look", nothing to do
    assert server.http.get(f"/api/sessions/{sid}/checkpoints/{look}/preview").json()[
        "files"] == []

    done = server.http.post(f"/api/sessions/{sid}/checkpoints/{one}/restore", json={})
    assert done.status_code == 200, done.text
    assert done.json() == {"restored": ["a.txt", "gone.txt", "notes.md", "pic.bin"],
                           "kept": ["by-hand.txt"]}
    after = files(work)
    assert after.pop("by-hand.txt") == b"mine\n"  # kept: it was not ticked
    assert after.pop("debug.log") == b"after\n"  # ignored: untouched
    before.pop("debug.log")
    assert after == before


def test_refusals_a_running_turn_a_gone_commit_and_a_path_outside(
        server: ServerProcess, worker: WorkerProcess) -> None:
    folder = _folder(worker, "repo")
    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": str(folder), "prompt": "turn one",
        "policy": "full-auto"})
    sid = str(r.json()["session_id"])
    s = wait_for(server, sid, _answers(1), timeout=60, what="turn one's answer")
    (one,) = _turns(s)

    for path in ("../outside.txt", "/etc/passwd", "sub/../../x"):
        refused = server.http.post(f"/api/sessions/{sid}/checkpoints/{one}/restore-file",
                                   json={"path": path})
        assert refused.status_code == 409, refused.text
        assert refused.json()["extra"]["code"] == "path_outside_workdir"
    one_file = server.http.post(f"/api/sessions/{sid}/checkpoints/{one}/restore-file",
                                json={"path": "notes.md"})
    assert one_file.json() == {"restored": ["notes.md"], "kept": []}
    assert not (folder / "notes.md").exists() and (folder / "pic.bin").exists()

    # a turn running: refused, with the reason
    server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "take your time"})
    wait_for(server, sid, lambda s: any(
        i["kind"] == "tool_call" and i.get("status") == "running" for i in s["items"]),
        timeout=60, what="the sleeping command")
    busy = server.http.post(f"/api/sessions/{sid}/checkpoints/{one}/restore", json={})
    assert busy.status_code == 409 and busy.json()["extra"]["code"] == "turn_running"
    preview = server.http.get(f"/api/sessions/{sid}/checkpoints/{one}/preview").json()
    assert preview["code"] == "turn_running" and preview["refused"]
    server.http.post(f"/api/sessions/{sid}/interrupt")
    wait_for(server, sid, lambda s: s["status"] not in ("running", "waiting_worker"),
             timeout=60, what="the interrupted turn")

    # the commit gone (the private ref deleted by hand)
    git(folder, "update-ref", "-d", f"refs/codey/checkpoints/{sid}/{one}")
    gone = server.http.post(f"/api/sessions/{sid}/checkpoints/{one}/restore", json={})
    assert gone.status_code == 409 and gone.json()["extra"]["code"] == "checkpoint_gone"
    preview = server.http.get(f"/api/sessions/{sid}/checkpoints/{one}/preview").json()
    assert preview["code"] == "checkpoint_gone"
