"""The dispatcher with the issue-27 tools: edit is recorded (a re-sent edit is answered from
the record, never applied twice); grep, glob and view_image are reads (answered from memory
when repeated); each is listed in the executors Hello sends."""

from __future__ import annotations

import asyncio
from pathlib import Path

from codey_protocol import codec
from codey_protocol.worker import (
    ActionAccepted,
    ActionErrored,
    ActionResult,
    Cancel,
    DetachSession,
    Edit,
    EditResult,
    ExecKill,
    ExecList,
    ExecOutput,
    ExecProcesses,
    ExecStart,
    ExecWrite,
    Glob,
    GlobResult,
    Grep,
    GrepResult,
    ImageContent,
    ViewImage,
    WorkerToServerMessage,
)
from codey_testkit.waiting import until
from codey_worker.actions import EXECUTORS, ActionDispatcher
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords


class Sent:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    async def __call__(self, frame: bytes) -> None:
        self.frames.append(frame)

    def of(self, action_id: str) -> list[WorkerToServerMessage]:
        msgs = [codec.decode_worker_to_server(f) for f in self.frames]
        return [m for m in msgs if getattr(m, "action_id", None) == action_id]


def dispatcher(tmp_path: Path, sent: Sent) -> ActionDispatcher:
    return ActionDispatcher(sent, ActionRecords(tmp_path / "records.sqlite3"),
                            LocalPolicy(allowed_roots=[tmp_path]), kill_grace_s=1.0)


def test_the_new_executors_are_announced() -> None:
    assert {"edit", "view_image", "grep", "glob", "exec_start", "exec_write", "exec_kill",
            "exec_list"} <= set(EXECUTORS)


def test_an_edit_runs_once_and_a_resend_gets_the_recorded_answer(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    sent = Sent()
    action = Edit(action_id="e1", session_id="s", workdir=str(ws), path="a.txt",
                  old_string="one", new_string="one one")

    async def main() -> None:
        d = dispatcher(tmp_path, sent)
        await d.handle(action)
        await d.wait_idle()
        await d.handle(action)  # re-sent after a reconnect
        await d.wait_idle()
        d.records.close()

    asyncio.run(main())
    assert (ws / "a.txt").read_text() == "one one\n"  # not "one one one"
    msgs = sent.of("e1")
    assert msgs[0] == ActionAccepted(action_id="e1")
    assert isinstance(msgs[1], ActionResult) and isinstance(msgs[1].result, EditResult)
    assert msgs[2] == ActionAccepted(action_id="e1", replayed=True)
    assert msgs[3] == msgs[1]
    # and again after a restart: from the record on disk
    sent2 = Sent()

    async def again() -> None:
        d = dispatcher(tmp_path, sent2)
        await d.handle(action)
        await d.wait_idle()

    asyncio.run(again())
    assert sent2.of("e1") == [ActionAccepted(action_id="e1", replayed=True), msgs[1]]
    assert (ws / "a.txt").read_text() == "one one\n"


def test_an_edit_that_does_not_match_is_errored_with_its_code(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("x\nx\n")
    sent = Sent()

    async def main() -> None:
        d = dispatcher(tmp_path, sent)
        for i, old in enumerate(["y", "x"]):
            await d.handle(Edit(action_id=f"e{i}", session_id="s", workdir=str(ws),
                                path="a.txt", old_string=old, new_string="z"))
        await d.wait_idle()

    asyncio.run(main())
    codes = [m.code for i in range(2) for m in sent.of(f"e{i}") if isinstance(m, ActionErrored)]
    assert codes == ["edit_no_match", "edit_not_unique"]


def test_search_and_images_are_reads(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("needle = 1\n")
    (ws / "p.gif").write_bytes(b"GIF89a\x02\x00\x03\x00\x00\x00\x00;")
    sent = Sent()
    grep = Grep(action_id="g1", session_id="s", workdir=str(ws), pattern="needle")

    async def main() -> None:
        d = dispatcher(tmp_path, sent)
        await d.handle(grep)
        await d.handle(Glob(action_id="g2", session_id="s", workdir=str(ws), pattern="*.py"))
        await d.handle(ViewImage(action_id="v1", session_id="s", workdir=str(ws),
                                 path="p.gif"))
        await d.wait_idle()
        (ws / "a.py").write_text("changed\n")
        await d.handle(grep)  # repeated: the answer kept in memory, not searched again
        await d.wait_idle()
        assert len(d.records) == 0  # reads are not written to the record store
        d.records.close()

    asyncio.run(main())
    grep_answers = [m for m in sent.of("g1") if isinstance(m, ActionResult)]
    assert len(grep_answers) == 2 and grep_answers[0] == grep_answers[1]
    assert isinstance(grep_answers[0].result, GrepResult)
    assert grep_answers[0].result.files[0].lines[0].text == "needle = 1"
    glob_result = sent.of("g2")[-1]
    assert isinstance(glob_result, ActionResult) and glob_result.result == GlobResult(
        paths=["a.py"])
    image = sent.of("v1")[-1]
    assert isinstance(image, ActionResult) and isinstance(image.result, ImageContent)
    assert (image.result.width, image.result.height) == (2, 3)


# --------------------------------------------------------------------------- processes


def _start(ws: Path, action_id: str, argv: list[str], **kw: object) -> ExecStart:
    return ExecStart(action_id=action_id, session_id="s", workdir=str(ws), argv=argv,
                     sandbox="full-access", **kw)  # type: ignore[arg-type]


def _result(sent: Sent, action_id: str) -> ActionResult | ActionErrored:
    last = sent.of(action_id)[-1]
    assert isinstance(last, ActionResult | ActionErrored), last
    return last


def test_a_resent_exec_start_does_not_start_a_second_process(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    sent = Sent()
    start = _start(ws, "x1", ["sh", "-c", "echo started >> starts; exec sleep 300"])

    async def main() -> None:
        d = dispatcher(tmp_path, sent)
        await d.handle(start)
        await d.wait_idle()
        await d.handle(start)  # the server re-sends it (a reconnect)
        await d.wait_idle()
        assert len(d.processes.running()) == 1
        await d.shutdown(grace_s=5)
        d.records.close()

    asyncio.run(main())
    assert (ws / "starts").read_text() == "started\n"
    msgs = sent.of("x1")
    assert msgs[2] == ActionAccepted(action_id="x1", replayed=True) and msgs[3] == msgs[1]


def test_after_a_restart_a_process_id_is_gone(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    first, second = Sent(), Sent()

    async def before() -> str:
        d = dispatcher(tmp_path, first)
        await d.handle(_start(ws, "x1", ["sleep", "300"]))
        await d.wait_idle()
        result = _result(first, "x1")
        assert isinstance(result, ActionResult) and isinstance(result.result, ExecOutput)
        await d.shutdown(grace_s=5)  # the worker stops: its process with it
        d.records.close()
        return result.result.process_id

    process_id = asyncio.run(before())

    async def after() -> None:
        d = dispatcher(tmp_path, second)
        await d.handle(ExecWrite(action_id="w1", session_id="s", process_id=process_id,
                                 input="x\n"))
        await d.handle(ExecKill(action_id="k1", session_id="s", process_id=process_id))
        await d.wait_idle()
        d.records.close()

    asyncio.run(after())
    for action_id in ("w1", "k1"):
        answer = _result(second, action_id)
        assert isinstance(answer, ActionErrored) and answer.code == "process_gone", answer


def test_detach_cancel_and_list_through_the_dispatcher(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    sent = Sent()

    async def main() -> None:
        d = dispatcher(tmp_path, sent)
        await d.handle(_start(ws, "bg", ["sleep", "300"]))
        await d.wait_idle()
        await d.handle(_start(ws, "fg", ["sleep", "300"], yield_ms=30_000))
        await until(lambda: len(d.processes.running()) == 2, what="two processes")
        await d.handle(Cancel(action_id="c1", session_id="s", target_action_id="fg"))
        await d.wait_idle()
        await d.handle(ExecList(action_id="l1", session_id="s"))
        await d.wait_idle()
        await d.handle(DetachSession(action_id="d1", session_id="s"))
        await d.wait_idle()
        assert d.processes.running() == []
        await d.handle(ExecList(action_id="l2", session_id="s"))
        await d.wait_idle()
        d.records.close()

    asyncio.run(main())
    cancelled = _result(sent, "fg")
    assert isinstance(cancelled, ActionResult) and isinstance(cancelled.result, ExecOutput)
    assert (cancelled.result.running, cancelled.result.stopped_by) == (False, "cancel")
    listed = _result(sent, "l1")
    assert isinstance(listed, ActionResult) and isinstance(listed.result, ExecProcesses)
    assert [(p.running, p.stopped_by) for p in listed.result.processes] == [
        (True, ""), (False, "cancel")]
    empty = _result(sent, "l2")
    assert isinstance(empty, ActionResult) and empty.result == ExecProcesses()
