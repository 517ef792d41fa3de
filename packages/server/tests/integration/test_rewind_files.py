"""The rewind route and the checkpoints together, over the real stack (server, worker, real
git, the scripted model): ``POST /api/sessions/{id}/rewind`` puts the files back through
``services.checkpoints`` and takes the conversation back to just before the turn's prompt.

Three turns write, patch and delete files (a binary, an untracked file, an ignored one);
rewound to turn 1 with mode "both": the files equal its checkpoint, the ignored file is
untouched, the hand edits made since are named by the preview and kept (all of them when the
request names none to keep, else those it names), and the next model request holds nothing
of turns 1-3. Mode "files" leaves the conversation; a turn without a checkpoint of its own
rewinds no file; a refusal (a gone checkpoint, the machine offline) is a 409 with the reason
and changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.scenarios import last_request_text, session, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until
from codey_testkit.workfiles import call, file_turn_steps, files, git, make_folder


@pytest.fixture
def script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [
        *file_turn_steps(),
        {"match": {"user": "just look"}, "reply": {"calls": [call("read_file", path="a.txt")]}},
        {"match": {"user": "fresh prompt"}, "reply": {"text": "fresh answer"}},
        {"match": {"any": True}, "reply": {"text": "Done."}},
    ]}


def _answers(n: int) -> Any:
    return lambda s: s["status"] == "idle" and sum(
        i["kind"] == "assistant_message" for i in s["items"]) >= n


def _prompt(server: ServerProcess, sid: str, text: str, n: int) -> dict[str, Any]:
    r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": text})
    assert r.status_code in (200, 202), r.text
    return wait_for(server, sid, _answers(n), timeout=60, what=f"the answer to {text!r}")


def _turns(s: dict[str, Any]) -> list[str]:
    return [i["id"] for i in s["items"] if i["kind"] == "user_message"]


def _three_turns(server: ServerProcess, worker: WorkerProcess
                 ) -> tuple[str, Path, dict[str, bytes], dict[str, Any]]:
    """A session in a fresh repository after turns one to three: its id, its folder, the
    files before turn one, and the session."""
    folder = make_folder(Path(worker.workdir("app")))
    before = files(folder)
    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": str(folder), "prompt": "turn one",
        "policy": "full-auto"})
    assert r.status_code == 201, r.text
    sid = str(r.json()["session_id"])
    wait_for(server, sid, _answers(1), timeout=60, what="turn one's answer")
    _prompt(server, sid, "turn two", 2)
    s = _prompt(server, sid, "turn three", 3)
    marks = server.http.get(f"/api/sessions/{sid}/checkpoints").json()
    assert [m["turn"] for m in marks] == _turns(s)
    return sid, folder, before, s


def test_rewinding_files_and_conversation_to_turn_one(
        server: ServerProcess, worker: WorkerProcess, model: ModelServerHandle) -> None:
    sid, folder, before, s = _three_turns(server, worker)
    one = _turns(s)[0]
    assert files(folder) != before
    # the user's own edits after the turns
    (folder / "by-hand.txt").write_text("mine\n")
    (folder / "scratch.txt").write_text("throwaway\n")

    preview = server.http.get(f"/api/sessions/{sid}/checkpoints/{one}/preview").json()
    assert preview["refused"] is None, preview
    assert preview["hand_edited"] == ["by-hand.txt", "scratch.txt"]
    assert {f["path"] for f in preview["files"]} == {
        "a.txt", "gone.txt", "notes.md", "pic.bin", "by-hand.txt", "scratch.txt"}

    # keep one hand edit: the other, not listed, is put back as the checkpoint has it (absent)
    r = server.http.post(f"/api/sessions/{sid}/rewind", json={
        "turn": one, "mode": "both", "keep": ["by-hand.txt"]})
    assert r.status_code == 200, r.text
    done = r.json()
    assert done["restored"] == ["a.txt", "gone.txt", "notes.md", "pic.bin", "scratch.txt"]
    assert done["kept"] == ["by-hand.txt"]

    after = files(folder)
    assert after.pop("by-hand.txt") == b"mine\n"  # kept
    assert after.pop("debug.log") == b"after\n"  # ignored: untouched by the rewind
    assert before.pop("debug.log") == b"before\n"
    assert after == before  # the checkpoint of turn one: as before its prompt
    assert git(folder, "status", "--porcelain") == "?? by-hand.txt"

    # the conversation is back to before turn one's prompt
    s = session(server, sid)
    assert not any(i["kind"] in ("user_message", "assistant_message", "tool_call")
                   for i in s["items"])
    [branch] = s["rewound"]
    assert branch["turn"] == one and branch["mode"] == "both"
    assert [i["text"] for i in branch["items"] if i["kind"] == "user_message"] == [
        "turn one", "turn two", "turn three"]

    r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "fresh prompt"})
    assert r.status_code in (200, 202), r.text
    wait_for(server, sid, lambda s: s["status"] == "idle" and any(
        i["kind"] == "assistant_message" and i["text"] == "fresh answer" for i in s["items"]),
        timeout=60, what="the fresh answer")
    sent = last_request_text(model)
    assert "fresh prompt" in sent
    for gone in ("turn one", "turn two", "turn three", "notes.md", "pic.bin", "gone.txt",
                 "Begin Patch"):
        assert gone not in sent, gone


def test_files_only_a_turn_without_checkpoint_and_refusals_leave_the_conversation(
        server: ServerProcess, worker: WorkerProcess) -> None:
    sid, folder, _, s = _three_turns(server, worker)
    one, two, three = _turns(s)
    s = _prompt(server, sid, "just look", 4)  # reads only: no checkpoint of its own
    look = _turns(s)[3]
    items = s["items"]

    # files only: turn three's checkpoint (a.txt patched, gone.txt there); the conversation
    # stays as it is; no "keep" given: the file made by hand since is kept
    (folder / "by-hand.txt").write_text("mine\n")
    r = server.http.post(f"/api/sessions/{sid}/rewind", json={"turn": three, "mode": "files"})
    assert r.status_code == 200, r.text
    assert r.json() == {"seq": r.json()["seq"], "restored": ["gone.txt", "pic.bin"],
                        "kept": ["by-hand.txt"]}
    assert (folder / "by-hand.txt").read_text() == "mine\n"
    assert (folder / "gone.txt").read_text() == "to be deleted\n"
    assert (folder / "a.txt").read_text() == "one\nTWO\nthree\n"
    s = session(server, sid)
    assert s["items"] == items and s["rewound"] == []

    # a turn that changed no file, and no later one did: no file changes, the conversation
    # goes back to before its prompt
    current = files(folder)
    r = server.http.post(f"/api/sessions/{sid}/rewind", json={"turn": look, "mode": "both"})
    assert r.status_code == 200, r.text
    assert r.json()["restored"] == [] and r.json()["kept"] == []
    assert files(folder) == current
    s = session(server, sid)
    assert _turns(s) == [one, two, three]
    items = s["items"]

    # the checkpoint's commit gone: 409 with the reason, no file and no item changed
    git(folder, "update-ref", "-d", f"refs/codey/checkpoints/{sid}/{two}")
    (folder / "a.txt").write_text("edited\n")
    current = files(folder)
    for mode in ("both", "files"):
        r = server.http.post(f"/api/sessions/{sid}/rewind", json={"turn": two, "mode": mode})
        assert r.status_code == 409, r.text
        assert r.json()["extra"]["code"] == "checkpoint_gone", r.text
        assert "gone" in r.json()["detail"]
    s = session(server, sid)
    assert s["items"] == items and len(s["rewound"]) == 1
    assert files(folder) == current

    # the session's machine offline: refused with the reason, nothing changes
    worker.stop()
    wait_until(lambda: server.http.get("/api/state/bootstrap").json()["state"]["workers"][
        worker.worker_id], ok=lambda w: not w["connected"], timeout=60, interval=0.05,
        what="the worker offline")
    r = server.http.post(f"/api/sessions/{sid}/rewind", json={"turn": one, "mode": "both"})
    assert r.status_code == 409, r.text
    assert r.json()["extra"]["code"] == "worker_offline", r.text
    s = session(server, sid)
    assert s["items"] == items and len(s["rewound"]) == 1
