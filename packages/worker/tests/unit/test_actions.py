"""The action dispatcher with a fake ``send``: exactly once, errors as frames, real executors."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from codey_protocol import codec
from codey_protocol.worker import (
    ActionAccepted,
    ActionErrored,
    ActionProgress,
    ActionResult,
    ApplyPatch,
    Attached,
    AttachSession,
    Cancel,
    Cancelled,
    CommandResult,
    FileContent,
    McpCall,
    McpServerInfo,
    PatchResult,
    ReadFile,
    RunCommand,
    WorkerToServerMessage,
    WorkspaceChanged,
    WriteFile,
)
from codey_testkit.waiting import WaitTimedOut, until
from codey_worker import actions as actions_module
from codey_worker.actions import ActionDispatcher
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords
from codey_worker.watch import WorkspaceWatcher

T = TypeVar("T")


class FakeSend:
    """Collects frames; ``connected=False`` makes sending fail like a dropped socket."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.connected = True

    async def __call__(self, frame: bytes) -> None:
        if not self.connected:
            raise ConnectionError("not connected")
        self.frames.append(frame)

    def messages(self) -> list[WorkerToServerMessage]:
        return [codec.decode_worker_to_server(f) for f in self.frames]

    def of(self, action_id: str) -> list[WorkerToServerMessage]:
        return [m for m in self.messages() if getattr(m, "action_id", None) == action_id]


def run(test: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(test())  # type: ignore[arg-type]


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    workdir = tmp_path / "root" / "ws"
    workdir.mkdir(parents=True)
    return workdir


def make(tmp_path: Path, root: Path, send: FakeSend, **kw: Any) -> ActionDispatcher:
    policy = LocalPolicy(allowed_roots=[root.parent], denied_commands=["sudo"])
    records = ActionRecords(tmp_path / "records.sqlite3")
    return ActionDispatcher(send, records, policy, kill_grace_s=1.0, **kw)


def counting_command(root: Path, action_id: str, sleep: float = 0.0) -> RunCommand:
    """A command that appends a line to ``count`` (so running it twice shows)."""
    script = f"import time; time.sleep({sleep}); open('count', 'a').write('x\\n'); print('ran')"
    return RunCommand(action_id=action_id, session_id="s1", workdir=str(root),
                      argv=[sys.executable, "-c", script])


def test_command_is_accepted_streamed_and_answered(tmp_path: Path, root: Path) -> None:
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(counting_command(root, "a1"))
        assert d.running() == ["a1"]
        await d.wait_idle()

    run(main)
    msgs = send.of("a1")
    assert msgs[0] == ActionAccepted(action_id="a1")
    assert ActionProgress(action_id="a1", stream="stdout", data="ran\n") in msgs
    last = msgs[-1]
    assert isinstance(last, ActionResult) and isinstance(last.result, CommandResult)
    assert last.result.exit_code == 0 and last.result.stdout == "ran\n"
    assert (root / "count").read_text() == "x\n"


def test_finished_action_is_replayed_from_the_record_not_run_again(
    tmp_path: Path, root: Path
) -> None:
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(counting_command(root, "a1"))
        await d.wait_idle()
        first_response = send.frames[-1]
        send.frames.clear()
        await d.handle(counting_command(root, "a1"))
        await d.wait_idle()
        assert send.frames[1] == first_response  # byte for byte

    run(main)
    assert send.messages()[0] == ActionAccepted(action_id="a1", replayed=True)
    assert len(send.frames) == 2
    assert (root / "count").read_text() == "x\n"


def test_replay_survives_a_new_process(tmp_path: Path, root: Path) -> None:
    send = FakeSend()

    async def first() -> None:
        d = make(tmp_path, root, send)
        await d.handle(counting_command(root, "a1"))
        await d.wait_idle()
        d.records.close()

    run(first)
    answer = send.frames[-1]
    send2 = FakeSend()

    async def second() -> None:
        d = make(tmp_path, root, send2)
        await d.handle(counting_command(root, "a1"))

    run(second)
    assert send2.frames == [codec.encode(ActionAccepted(action_id="a1", replayed=True)), answer]
    assert (root / "count").read_text() == "x\n"


def test_started_but_unfinished_record_is_answered_interrupted(
    tmp_path: Path, root: Path
) -> None:
    # A previous process recorded the start and died before finishing.
    with ActionRecords(tmp_path / "records.sqlite3") as old:
        assert old.mark_started("a1", b"{}") is None
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(counting_command(root, "a1"))
        await d.handle(counting_command(root, "a1"))  # and again: the same answer
        assert d.running() == []

    run(main)
    msgs = send.messages()
    errored = ActionErrored(action_id="a1", code="interrupted", message=msgs[1].message)  # type: ignore[attr-defined]
    assert msgs == [ActionAccepted(action_id="a1", replayed=True), errored] * 2
    assert not (root / "count").exists()


def test_duplicate_while_running_is_only_accepted(tmp_path: Path, root: Path) -> None:
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(counting_command(root, "a1", sleep=0.3))
        await d.handle(counting_command(root, "a1", sleep=0.3))
        await d.wait_idle()

    run(main)
    msgs = send.of("a1")
    assert msgs[:2] == [ActionAccepted(action_id="a1"), ActionAccepted(action_id="a1")]
    assert sum(isinstance(m, ActionResult) for m in msgs) == 1
    assert (root / "count").read_text() == "x\n"


def test_result_made_while_disconnected_is_recorded_and_replayed(
    tmp_path: Path, root: Path
) -> None:
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(counting_command(root, "a1", sleep=0.2))
        send.connected = False
        await d.wait_idle()
        send.connected = True
        await d.handle(counting_command(root, "a1"))

    run(main)
    msgs = send.of("a1")
    assert msgs[0] == ActionAccepted(action_id="a1")
    assert msgs[1] == ActionAccepted(action_id="a1", replayed=True)
    assert isinstance(msgs[2], ActionResult)
    assert (root / "count").read_text() == "x\n"


def test_several_actions_run_at_once(tmp_path: Path, root: Path) -> None:
    send = FakeSend()

    async def main() -> float:
        d = make(tmp_path, root, send)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(3):
            await d.handle(RunCommand(action_id=f"a{i}", session_id="s1", workdir=str(root),
                                      argv=[sys.executable, "-c", "import time; time.sleep(0.6)"]))
        assert sorted(d.running()) == ["a0", "a1", "a2"]
        await d.wait_idle()
        return loop.time() - start

    elapsed = run(main)
    assert elapsed < 1.7  # three 0.6 s commands one after the other would take 1.8 s
    assert sum(isinstance(m, ActionResult) for m in send.messages()) == 3


@pytest.mark.parametrize(
    ("action", "code"),
    [
        (ReadFile(action_id="r", session_id="s", workdir="/etc", path="passwd"),
         "outside_allowed_roots"),
        (ReadFile(action_id="r", session_id="s", workdir="{root}", path="../../x"),
         "path_outside_workdir"),
        (ReadFile(action_id="r", session_id="s", workdir="{root}", path="missing.txt"),
         "not_found"),
        (RunCommand(action_id="r", session_id="s", workdir="{root}", argv=["sudo", "ls"]),
         "denied_command"),
        (ApplyPatch(action_id="r", session_id="s", workdir="{root}",
                    patch="*** Begin Patch\n*** Update File: nope.txt\n@@\n-a\n+b\n*** End Patch"),
         "patch_failed"),
        (ApplyPatch(action_id="r", session_id="s", workdir="/etc",
                    patch="*** Begin Patch\n*** Add File: x\n+a\n*** End Patch"),
         "outside_allowed_roots"),
        (McpCall(action_id="r", session_id="s", server="time", tool="t"), "mcp_unavailable"),
    ],
)
def test_refusals_become_action_errored(
    tmp_path: Path, root: Path, action: Any, code: str
) -> None:
    if getattr(action, "workdir", None) == "{root}":
        action.workdir = str(root)
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(action)
        await d.wait_idle()

    run(main)
    *before, answer = send.of("r")
    # a small file read at once is acknowledged by its answer alone
    assert before == ([] if read_at_once(action) else [ActionAccepted(action_id="r")])
    assert isinstance(answer, ActionErrored)
    assert answer.code == code
    assert answer.message


def read_at_once(action: Any) -> bool:
    return isinstance(action, ReadFile)  # a refusal comes before knowing the size


def test_a_small_read_is_answered_at_once_without_a_separate_acknowledgement(
    tmp_path: Path, root: Path
) -> None:
    (root / "small.txt").write_text("hi\n")
    (root / "big.txt").write_text("x" * (actions_module.INLINE_READ_BYTES + 1))
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(ReadFile(action_id="s1", session_id="s", workdir=str(root),
                                path="small.txt"))
        assert send.of("s1")[-1:] and d.running() == []  # answered before handle returned
        await d.handle(ReadFile(action_id="b1", session_id="s", workdir=str(root),
                                path="big.txt"))
        await d.wait_idle()
        await d.handle(ReadFile(action_id="s1", session_id="s", workdir=str(root),
                                path="small.txt"))

    run(main)
    small = send.of("s1")
    assert len(small) == 3 and small[1] == ActionAccepted(action_id="s1", replayed=True)
    assert isinstance(small[0], ActionResult) and small[2] == small[0]
    assert isinstance(small[0].result, FileContent) and small[0].result.content == "hi\n"
    big = send.of("b1")
    assert big[0] == ActionAccepted(action_id="b1") and isinstance(big[1], ActionResult)


def test_unexpected_exception_is_internal_and_the_dispatcher_goes_on(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(action: ReadFile, policy: LocalPolicy, *args: Any) -> FileContent:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(actions_module.fs, "read_small_file", boom)
    (root / "f.txt").write_text("hi\n")
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(ReadFile(action_id="r1", session_id="s", workdir=str(root), path="f.txt"))
        await d.wait_idle()
        await d.handle(WriteFile(action_id="w1", session_id="s", workdir=str(root),
                                 path="g.txt", content="ok"))
        await d.wait_idle()

    run(main)
    assert send.of("r1")[-1] == ActionErrored(action_id="r1", code="internal",
                                              message="RuntimeError: disk on fire")
    assert isinstance(send.of("w1")[1], ActionResult)
    assert (root / "g.txt").read_text() == "ok"


def test_attach_creates_the_workdir_once_and_reports_its_realpath(
    tmp_path: Path, root: Path
) -> None:
    (root.parent / "link").symlink_to(root)
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(AttachSession(action_id="t1", session_id="s9",
                                     workdir=str(root.parent / "link" / "new" / "deep")))
        await d.wait_idle()
        await d.handle(AttachSession(action_id="t2", session_id="s9",
                                     workdir=str(root / "new" / "deep")))
        await d.wait_idle()
        assert d.known_sessions() == ["s9"]

    run(main)
    first, second = send.of("t1")[1], send.of("t2")[1]
    assert first == ActionResult(action_id="t1",
                                 result=Attached(workdir=str(root / "new" / "deep"), created=True))
    assert second == ActionResult(action_id="t2",
                                  result=Attached(workdir=str(root / "new" / "deep")))
    assert (root / "new" / "deep").is_dir()


def test_patch_reports_files_and_diff(tmp_path: Path, root: Path) -> None:
    (root / "a.txt").write_text("one\ntwo\n")
    patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n one\n-two\n+TWO\n*** End Patch"
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(ApplyPatch(action_id="p", session_id="s", workdir=str(root), patch=patch))
        await d.wait_idle()

    run(main)
    result = send.of("p")[1]
    assert isinstance(result, ActionResult) and isinstance(result.result, PatchResult)
    assert [(f.path, f.op, f.added, f.removed) for f in result.result.files] == [
        ("a.txt", "update", 1, 1)]
    assert "-two\n+TWO\n" in result.result.diff
    assert (root / "a.txt").read_text() == "one\nTWO\n"


def test_cancel_stops_a_running_command(tmp_path: Path, root: Path) -> None:
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(RunCommand(action_id="long", session_id="s", workdir=str(root),
                                  argv=["sleep", "30"]))
        await until(lambda: d.running() == ["long"], what="the command to run")
        await d.handle(Cancel(action_id="c1", session_id="s", target_action_id="long"))
        await d.handle(Cancel(action_id="c2", session_id="s", target_action_id="nothing"))
        await asyncio.wait_for(d.wait_idle(), 10)

    run(main)
    assert send.of("c1")[1] == ActionResult(
        action_id="c1", result=Cancelled(target_action_id="long", was_running=True))
    assert send.of("c2")[1] == ActionResult(
        action_id="c2", result=Cancelled(target_action_id="nothing", was_running=False))
    long_result = send.of("long")[-1]
    assert isinstance(long_result, ActionResult) and isinstance(long_result.result, CommandResult)
    assert long_result.result.cancelled
    assert long_result.result.worker_stopped == ""  # the server asked: not the worker's doing


def test_shutdown_stops_commands_without_waiting_for_them(tmp_path: Path, root: Path) -> None:
    send = FakeSend()

    async def main() -> float:
        d = make(tmp_path, root, send)
        await d.handle(RunCommand(action_id="long", session_id="s", workdir=str(root),
                                  argv=["sh", "-c", "echo up; exec sleep 30"]))
        # its process runs once it has printed
        await until(lambda: any(isinstance(m, ActionProgress) for m in send.of("long")),
                    what="the command's first output")
        loop = asyncio.get_running_loop()
        start = loop.time()
        await d.shutdown(grace_s=5, reason="signal SIGTERM")
        assert d.running() == []
        record = d.records.get("long")
        assert record is not None and record.status == "finished"
        # what the server gets after the restart says the worker stopped it, and why
        recorded = codec.decode_worker_to_server(record.response)
        assert isinstance(recorded, ActionResult)
        assert isinstance(recorded.result, CommandResult) and recorded.result.cancelled
        assert recorded.result.worker_stopped == "signal SIGTERM"
        return loop.time() - start

    assert run(main) < 4


def test_attached_workdir_changes_are_reported_relative_and_filtered(
    tmp_path: Path, root: Path
) -> None:
    send = FakeSend()

    async def main() -> None:
        watcher = WorkspaceWatcher(send, debounce_ms=100)
        d = make(tmp_path, root, send, watcher=watcher)
        await d.handle(AttachSession(action_id="t1", session_id="s1", workdir=str(root)))
        await d.wait_idle()
        watcher.acting("s1")  # what changes now is s1's, as while one of its actions runs

        def reported(path: str) -> bool:
            return any(isinstance(m, WorkspaceChanged) and path in m.paths
                       for m in send.messages())

        # the watch is live once a file written now is reported
        for probe in (f"probe{n}.txt" for n in range(40)):
            (root / probe).write_text("x")
            with contextlib.suppress(WaitTimedOut):
                await until(lambda name=probe: reported(name), timeout=0.5)  # type: ignore[misc]
            if reported(probe):
                break
        (root / ".git").mkdir()
        (root / ".git" / "HEAD").write_text("ref")
        (root / "src").mkdir()
        # inotify watches a new directory only once it has seen it (and a directory itself
        # is never reported): write into it until a file there is reported
        for n in range(40):
            (root / "src" / f"app{n}.py").write_text("print(1)")
            with contextlib.suppress(WaitTimedOut):
                await until(lambda n=n: reported(f"src/app{n}.py"),  # type: ignore[misc]
                            timeout=0.5)
            if reported(f"src/app{n}.py"):
                break
        await d.shutdown()

    run(main)
    changes = [m for m in send.messages() if isinstance(m, WorkspaceChanged)]
    assert changes and changes[0].session_id == "s1"
    paths = {p for change in changes for p in change.paths}
    assert any(p.startswith("src/app") for p in paths)
    assert not any(p.startswith(".git") for p in paths)
    assert "src" not in paths


def test_a_session_reports_only_what_changed_while_it_acted(
        tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sessions share a folder: each reports the files changed while its own actions ran
    (or just after), not the other's, and not the user's edits between turns."""
    send = FakeSend()

    def reported(session_id: str) -> set[str]:
        return {p for m in send.messages() if isinstance(m, WorkspaceChanged)
                and m.session_id == session_id for p in m.paths}

    # what each watch (one per session) was given by watchfiles, batch by batch: the watcher
    # decides on a batch before it asks for the next one, with no wait in between
    import watchfiles

    batches: list[list[set[str]]] = []
    awatch = watchfiles.awatch

    def watching(*args: Any, **kw: Any) -> Any:
        mine: list[set[str]] = []
        batches.append(mine)

        async def changes() -> Any:
            async for batch in awatch(*args, **kw):
                mine.append({Path(path).name for _, path in batch})
                yield batch

        return changes()

    monkeypatch.setattr(watchfiles, "awatch", watching)

    async def main() -> None:
        watcher = WorkspaceWatcher(send, debounce_ms=50, slack_s=0.3)
        d = make(tmp_path, root, send, watcher=watcher)
        for sid in ("s1", "s2"):
            await d.handle(AttachSession(action_id=f"at-{sid}", session_id=sid,
                                         workdir=str(root)))
        await d.wait_idle()
        # s1 writes (a command) until the watch is live: those files are s1's
        for n in range(40):
            await d.handle(RunCommand(action_id=f"w{n}", session_id="s1", workdir=str(root),
                                      argv=["sh", "-c", f"echo {n} > a{n}.txt"]))
            await d.wait_idle()
            with contextlib.suppress(WaitTimedOut):
                await until(lambda n=n: f"a{n}.txt" in reported("s1"),  # type: ignore[misc]
                            timeout=1.0)
            if f"a{n}.txt" in reported("s1"):
                break
        # past s1's slack, then the user's edit seen (and not reported) by both watches
        # before s2 acts
        await until(lambda: not watcher._own("s1"), what="s1's slack to pass")
        (root / "mine.txt").write_text("the user's")
        await until(lambda: len(batches) == 2 and all(
            any("mine.txt" in batch for batch in watch) for watch in batches),
            what="both watches to see the user's edit")
        await d.handle(WriteFile(action_id="b", session_id="s2", workdir=str(root),
                                 path="b.txt", content="b"))
        await d.wait_idle()
        await until(lambda: "b.txt" in reported("s2"), what="s2's file")
        await d.shutdown()

    run(main)
    s1, s2 = reported("s1"), reported("s2")
    assert s1 and all(p.startswith("a") for p in s1), s1
    assert s2 == {"b.txt"}, s2


def _inotify_fds() -> int:
    """This process's inotify descriptors: one per running watch."""
    fds = Path("/proc/self/fd")
    count = 0
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            count += os.readlink(fd) == "anon_inode:inotify"
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts /proc/self/fd")
def test_only_the_sessions_that_acted_last_keep_a_running_watch(
        tmp_path: Path, root: Path) -> None:
    """Sessions stay attached, but at most ``max_watches`` watches run (a worker up for weeks
    kept one per session it ever attached: two threads and five descriptors each, issue 36);
    a session whose watch was stopped gets it back at its next action."""
    send = FakeSend()

    async def main() -> None:
        before = _inotify_fds()
        watcher = WorkspaceWatcher(send, debounce_ms=50, max_watches=2)
        d = make(tmp_path, root, send, watcher=watcher)
        sids = [f"s{n}" for n in range(6)]
        for sid in sids:
            (root / sid).mkdir()
            await d.handle(AttachSession(action_id=f"at-{sid}", session_id=sid,
                                         workdir=str(root / sid)))
            await d.wait_idle()
        assert watcher.sessions == sids == d.known_sessions()  # all of them still attached
        await until(lambda: not watcher._stopping, what="the stopped watches to end")
        assert watcher.running == ["s4", "s5"]
        await until(lambda: _inotify_fds() - before == 2, what="two watches' inotify")

        # s0 acts again: its watch runs again, and reports what the action writes
        for n in range(40):
            await d.handle(WriteFile(action_id=f"w{n}", session_id="s0",
                                     workdir=str(root / "s0"), path=f"a{n}.txt", content="a"))
            await d.wait_idle()
            with contextlib.suppress(WaitTimedOut):
                await until(lambda n=n: any(  # type: ignore[misc]
                    isinstance(m, WorkspaceChanged) and m.session_id == "s0"
                    and f"a{n}.txt" in m.paths for m in send.messages()), timeout=0.5)
            if any(isinstance(m, WorkspaceChanged) and m.session_id == "s0"
                   for m in send.messages()):
                break
        assert watcher.running == ["s5", "s0"]
        await until(lambda: not watcher._stopping, what="s4's watch to end")
        # a stopped watch's thread closes its inotify descriptor just after it ends
        await until(lambda: _inotify_fds() - before == 2, what="two watches' inotify again")
        await d.shutdown()
        await until(lambda: _inotify_fds() == before, what="no watch's inotify left")

    run(main)
    assert {m.session_id for m in send.messages() if isinstance(m, WorkspaceChanged)} == {"s0"}


def test_kept_read_answers_are_capped_in_total_bytes(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each answer is a bit over 1000 bytes: a 2500-byte cap keeps the last two only
    monkeypatch.setattr(actions_module, "READ_RESULTS_BYTES", 2500)
    for i in range(5):
        (root / f"f{i}.txt").write_text(f"{i}" * 1000)
    send = FakeSend()

    def read(i: int) -> ReadFile:
        return ReadFile(action_id=f"r{i}", session_id="s", workdir=str(root), path=f"f{i}.txt")

    async def main() -> None:
        d = make(tmp_path, root, send)
        for i in range(5):
            await d.handle(read(i))
        for i in range(5):  # the files change: a replayed answer still shows the old text
            (root / f"f{i}.txt").write_text("changed")
        for i in reversed(range(5)):  # the kept ones first, before new answers evict them
            await d.handle(read(i))
        await d.wait_idle()

    run(main)
    for i in range(5):
        frames = send.of(f"r{i}")
        last = frames[-1]
        assert isinstance(last, ActionResult) and isinstance(last.result, FileContent)
        if i >= 3:  # kept: replayed byte for byte
            assert frames[1] == ActionAccepted(action_id=f"r{i}", replayed=True)
            assert last.result.content == f"{i}" * 1000
        else:  # evicted for the byte cap (well under the count cap): read again
            assert ActionAccepted(action_id=f"r{i}", replayed=True) not in frames
            assert last.result.content == "changed"


class HangingMcp:
    """An MCP manager whose listing never finishes; ``cached()`` says what is known."""

    names = ["slow"]

    async def list_all(self, workdir: Path | None = None) -> list[McpServerInfo]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    def cached(self) -> list[McpServerInfo]:
        return [McpServerInfo(name="slow", error="not listed yet")]

    async def close(self) -> None:
        pass


def test_attach_does_not_wait_forever_for_mcp_servers(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(actions_module, "ATTACH_MCP_TIMEOUT_S", 0.2)
    send = FakeSend()

    async def main() -> None:
        d = make(tmp_path, root, send, mcp=HangingMcp())
        await d.handle(AttachSession(action_id="t1", session_id="s1", workdir=str(root)))
        await asyncio.wait_for(d.wait_idle(), 5)

    run(main)
    answer = send.of("t1")[-1]
    assert answer == ActionResult(action_id="t1", result=Attached(
        workdir=str(root), mcp_servers=[McpServerInfo(name="slow", error="not listed yet")]))


def test_a_command_env_that_gets_round_denied_commands_is_refused(
    tmp_path: Path, root: Path
) -> None:
    send = FakeSend()
    action = counting_command(root, "e1")
    action.env = {"BASH_FUNC_ls%%": "() { sudo id; }"}

    async def main() -> None:
        d = make(tmp_path, root, send)
        await d.handle(action)
        await d.wait_idle()

    run(main)
    answer = send.of("e1")[-1]
    assert isinstance(answer, ActionErrored) and answer.code == "denied_command"
    assert "BASH_FUNC_ls%%" in answer.message
    assert not (root / "count").exists()
