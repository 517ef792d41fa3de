"""Moving a session between two real workers (two temp homes) over the real stack, with real
git and the scripted model: uncommitted, untracked and ignored files, the session goes on on
the target (the model writes a file there), the source untouched, every action ran once (as
the workers' own records count them), and back again; a plain folder; the refusals, and a
request without the browser's credentials."""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from codey_protocol import codec
from codey_testkit.scenarios import session, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until


def _write(path: str, content: str) -> dict[str, Any]:
    return {"name": "write_file", "arguments": {"path": path, "content": content}}


@pytest.fixture
def script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [
        {"match": {"user": "write there"},
         "reply": {"calls": [_write("made_there.txt", "written on the target\n")]}},
        {"match": {"user": "run it"},
         "reply": {"calls": [{"name": "shell", "arguments": {"command": ["touch", "made.txt"]}}]}},
        {"match": {"tool": "write_file"}, "reply": {"text": "Done."}},
        {"match": {"any": True}, "reply": {"text": "Nothing to do."}},
    ]}


@pytest.fixture
def worker2(tmp_path: Path, server: ServerProcess) -> Iterator[WorkerProcess]:
    with WorkerProcess(server, tmp_path / "worker2") as w:
        yield w


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(folder).parts}


def _repo(worker: WorkerProcess) -> Path:
    repo = Path(worker.workdir("app"))
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "Tester")
    _git(repo, "config", "user.email", "t@example.com")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "start")
    (repo / "a.txt").write_text("one\nuncommitted\n")
    (repo / "new.txt").write_text("untracked\n")
    (repo / "pic.bin").write_bytes(bytes(range(256)))
    (repo / "build.log").write_text("ignored\n")
    return repo


def _start(server: ServerProcess, worker: WorkerProcess, workdir: Path,
           policy: str = "full-auto", prompt: str = "hello") -> str:
    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": str(workdir), "prompt": prompt,
        "policy": policy})
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def _answered(times: int = 1) -> Any:
    return lambda s: s["status"] == "idle" and sum(
        i["kind"] == "assistant_message" for i in s["items"]) >= times


def _move(server: ServerProcess, sid: str, worker: WorkerProcess, workdir: Path) -> Any:
    return server.http.post(f"/api/sessions/{sid}/move", timeout=120.0, json={
        "worker_id": worker.worker_id, "workdir": str(workdir)})


def _ran(worker: WorkerProcess, kind: str) -> list[str]:
    """The ids of the ``kind`` actions the worker's own records hold (each run once)."""
    db = sqlite3.connect(worker.codey_home / "actions" / "records.sqlite3")
    try:
        rows = db.execute("SELECT action_id, action FROM records").fetchall()
    finally:
        db.close()
    return [aid for aid, raw in rows if type(codec.decode_action(raw)).__name__ == kind]


def test_a_session_moves_with_its_uncommitted_work_goes_on_there_and_moves_back(
        server: ServerProcess, worker: WorkerProcess, worker2: WorkerProcess) -> None:
    repo = _repo(worker)
    sid = _start(server, worker, repo)
    wait_for(server, sid, _answered(), what="the first answer")
    before = _files(repo)
    status_before = _git(repo, "status", "--porcelain")

    target = Path(worker2.workdir("moved-app"))
    r = _move(server, sid, worker2, target)
    assert r.status_code == 200, r.text
    done = r.json()
    assert done["from_worker"] == worker.worker_id and done["worker_id"] == worker2.worker_id
    assert done["bundle_size"] > 0 and len(done["bundle"]) == 64
    s = session(server, sid)
    assert s["worker_id"] == worker2.worker_id and s["workdir"] == str(target)
    notices = [i["code"] for i in s["items"] if i["kind"] == "notice"]
    assert notices[-2:] == ["moving", "moved"]
    # the files as they were (but the ignored one), uncommitted there too
    assert _files(target) == {k: v for k, v in before.items() if k != "build.log"}
    assert _git(target, "status", "--porcelain") == status_before
    # the blob store holds the bundle
    assert server.http.get(f"/api/blobs/{done['bundle']}").status_code == 200

    # it goes on there
    r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "write there"})
    assert r.status_code in (200, 202), r.text
    wait_for(server, sid, _answered(2), what="the answer on the target")
    assert (target / "made_there.txt").read_text() == "written on the target\n"
    assert not (repo / "made_there.txt").exists()
    # the source untouched
    assert _files(repo) == before
    assert _git(repo, "status", "--porcelain") == status_before
    # every action ran once, on one machine: the write on the target only
    writes = _ran(worker2, "WriteFile")
    assert len(writes) == 1 and _ran(worker, "WriteFile") == []
    assert len(_ran(worker, "SessionUnpack")) == 0 and len(_ran(worker2, "SessionUnpack")) == 1

    # and back, to a new folder on the first machine
    back = Path(worker.workdir("app-back"))
    r = _move(server, sid, worker, back)
    assert r.status_code == 200, r.text
    assert _files(back) == _files(target)
    assert session(server, sid)["worker_id"] == worker.worker_id
    assert _files(repo) == before


def test_a_plain_folder_moves(server: ServerProcess, worker: WorkerProcess,
                              worker2: WorkerProcess) -> None:
    folder = Path(worker.workdir("notes"))
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("hello\n")
    (folder / "sub" / "b.bin").write_bytes(b"\0\1\2")
    sid = _start(server, worker, folder)
    wait_for(server, sid, _answered(), what="the first answer")
    before = _files(folder)
    target = Path(worker2.workdir("notes"))
    r = _move(server, sid, worker2, target)
    assert r.status_code == 200, r.text
    assert _files(target) == before
    assert not (target / ".git").exists() and not (folder / ".git").exists()


def test_refusals_say_why_and_move_nothing(server: ServerProcess, worker: WorkerProcess,
                                           worker2: WorkerProcess) -> None:
    repo = _repo(worker)
    sid = _start(server, worker, repo)
    wait_for(server, sid, _answered(), what="the first answer")

    def refused(r: httpx.Response, status: int, code: str) -> None:
        assert r.status_code == status, r.text
        assert r.json()["extra"]["code"] == code, r.text
        assert session(server, sid)["worker_id"] == worker.worker_id

    refused(_move(server, sid, worker, Path(worker.workdir("again"))), 409, "conflict")
    refused(_move(server, sid, worker2, Path("/etc/codey-moved")), 403, "forbidden")
    refused(server.http.post(f"/api/sessions/{sid}/move", json={
        "worker_id": worker2.worker_id, "workdir": worker2.workdir("x") + "/../../../etc"}),
        400, "bad_request")
    # a folder that is not empty on the target: its files are not touched
    full = Path(worker2.workdir("full"))
    full.mkdir(parents=True)
    (full / "mine.txt").write_text("the user's\n")
    r = _move(server, sid, worker2, full)
    refused(r, 409, "conflict")
    assert _files(full) == {"mine.txt": b"the user's\n"}
    assert "move_failed" in [i.get("code") for i in session(server, sid)["items"]]
    # a request without the browser's credentials
    anon = httpx.post(f"{server.url}/api/sessions/{sid}/move", json={
        "worker_id": worker2.worker_id, "workdir": worker2.workdir("anon")},
        headers={"Origin": server.url}, timeout=30.0)
    assert anon.status_code == 401
    assert not Path(worker2.workdir("anon")).exists()
    # a turn under way: an approval waits (suggest asks before the command)
    busy = _start(server, worker, repo, policy="suggest", prompt="run it")
    wait_for(server, busy, lambda s: s["status"] == "waiting_approval",
             what="the approval", timeout=60.0)
    r = _move(server, busy, worker2, Path(worker2.workdir("busy")))
    assert r.status_code == 409 and "turn is under way" in r.text, r.text
    # the target offline
    worker2.stop()
    wait_until(lambda: server.http.get("/api/state/bootstrap").json()["state"]["workers"][
        worker2.worker_id],
               ok=lambda w: not w["connected"], timeout=30.0, what="the target offline")
    r = _move(server, sid, worker2, Path(worker2.workdir("offline")))
    assert r.status_code == 409 and "offline" in r.text, r.text
