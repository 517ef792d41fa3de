"""A session's project memory, kept per repository with its folders as the fallback
(``codey_server.core.memory``), and the browser's copy of the rule (``web/memory.js``, under
node) giving the same answers (issue 33, item 7: a worktree of a repository started with
"Nothing remembered", its memory kept per folder path).

Memory written by the previous release is keyed by folder; those events mean what they
meant, and a session still finds them: its repository's memory first, then the lines of its
folders' it lacks. ``e2e/test_memory_per_repository.py`` shows it on the page.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionContext, SessionInfo, State, WorkerInfo
from codey_server.agent.instructions import memory_of
from codey_server.core.memory import memory_places, memory_text, memory_written
from codey_server.core.rules import Context
from codey_server.features import apply_all, decide

WEB = Path(__file__).resolve().parents[4] / "web"
W = "wrk_1"
REPO = "/home/ada/src/app"


def _session(sid: str, workdir: str, *, worktree: ev.Worktree | None = None,
             repo_root: str | None = None) -> SessionInfo:
    context = SessionContext(environment=wk.Environment(repo_root=repo_root)) \
        if repo_root is not None else None
    return SessionInfo(session_id=sid, title="t", worker_id=W, workdir=workdir, provider="p",
                       model="m", worktree=worktree, context=context)


def _state(*memories: tuple[str, str], sessions: tuple[SessionInfo, ...] = ()) -> State:
    """A state whose memories were written as the previous release wrote them: per folder."""
    state = apply_all(State(), [
        ev.Envelope(seq=n, ts=float(n), session_id=None,
                    event=ev.MemoryUpdated(worker_id=W, workdir=folder, text=text))
        for n, (folder, text) in enumerate(memories, start=1)])
    for s in sessions:
        state.sessions[s.session_id] = s
    return state


WORKTREE = ev.Worktree(repo=REPO, branch="codey/x-0001", status="ready",
                       path="/home/ada/.codey-worktrees/app-1/codey-x-0001", repo_root=REPO)
IN_WORKTREE = _session("ses_wt", WORKTREE.path, worktree=WORKTREE)
IN_REPO = _session("ses_main", REPO, repo_root=REPO)
IN_SUBFOLDER = _session("ses_pkg", f"{REPO}/pkg", repo_root=REPO)
NOT_LOADED = _session("ses_new", f"{REPO}/pkg")  # no context load yet: its folder alone
ELSEWHERE = _session("ses_tmp", "/tmp/scratch")
TYPED = _session("ses_typed", "/home/ada/src/app/", worktree=ev.Worktree(
    repo="~/src/app", branch="codey/y", status="creating"))  # the worktree not made yet


def test_the_places_are_the_repository_then_the_folders_it_was_kept_for() -> None:
    assert memory_places(IN_WORKTREE) == [REPO, WORKTREE.path]
    assert memory_places(IN_REPO) == [REPO]
    assert memory_places(IN_SUBFOLDER) == [REPO, f"{REPO}/pkg"]
    assert memory_places(NOT_LOADED) == [f"{REPO}/pkg"]
    assert memory_places(ELSEWHERE) == ["/tmp/scratch"]
    assert memory_places(TYPED) == ["~/src/app", "/home/ada/src/app/"]


def test_a_worktree_finds_what_a_session_in_the_main_checkout_remembered() -> None:
    state = _state((REPO, "- Run the tests with python3 -m unittest"))
    for s in (IN_WORKTREE, IN_REPO, IN_SUBFOLDER):
        assert memory_text(state, s) == "- Run the tests with python3 -m unittest"
        assert memory_of(state, s) == memory_text(state, s)
    assert memory_text(state, ELSEWHERE) == ""


def test_a_folders_older_notes_are_still_found_beside_the_repositorys() -> None:
    state = _state((REPO, "- Use tabs\n- Run make test"),
                   (f"{REPO}/pkg", "- pkg is vendored\n- Run make test"))
    # the repository's first, then the lines of the folder's it lacks
    assert memory_text(state, IN_SUBFOLDER) == "- Use tabs\n- Run make test\n- pkg is vendored"
    # a folder alone (the repository not known yet, or none): as before
    assert memory_text(state, NOT_LOADED) == "- pkg is vendored\n- Run make test"
    only_folder = _state((f"{REPO}/pkg", "- pkg is vendored\n\n"))
    assert memory_text(only_folder, IN_SUBFOLDER) == "- pkg is vendored\n\n"  # as it was


def test_a_new_text_is_kept_for_the_repository_and_the_folders_notes_move_into_it() -> None:
    state = _state((REPO, "- Use tabs"), (f"{REPO}/pkg", "- pkg is vendored"))
    written = memory_written(state, IN_SUBFOLDER, "- Use tabs\n- pkg is vendored\n- more")
    assert written == [
        ev.MemoryUpdated(worker_id=W, workdir=REPO, text="- Use tabs\n- pkg is vendored\n- more"),
        ev.MemoryUpdated(worker_id=W, workdir=f"{REPO}/pkg", text="")]
    state = apply_all(state, [ev.Envelope(seq=10 + n, ts=10.0, session_id=None, event=e)
                              for n, e in enumerate(written)])
    # a line deleted from the repository's text does not come back from the folder's
    assert memory_written(state, IN_SUBFOLDER, "- Use tabs") == [
        ev.MemoryUpdated(worker_id=W, workdir=REPO, text="- Use tabs")]
    # nothing held elsewhere: one event
    assert memory_written(_state(), IN_WORKTREE, "x") == [
        ev.MemoryUpdated(worker_id=W, workdir=REPO, text="x")]


def test_the_users_edit_of_a_sessions_memory_goes_to_its_repository() -> None:
    state = _state((f"{REPO}/pkg", "- old"), sessions=(IN_SUBFOLDER,))
    state.workers[W] = WorkerInfo(worker_id=W, hostname="h", os="Linux")
    ctx = Context(new_id=lambda prefix: f"{prefix}_1")
    out = decide(state, cl.SetMemory(worker_id=W, workdir="ignored", text="- old\n- new",
                                     session_id="ses_pkg"), ctx)
    assert [e for _, e in out] == [
        ev.MemoryUpdated(worker_id=W, workdir=REPO, text="- old\n- new"),
        ev.MemoryUpdated(worker_id=W, workdir=f"{REPO}/pkg", text="")]
    # without a session: the folder given, as before
    [(_, plain)] = decide(state, cl.SetMemory(worker_id=W, workdir=" /x ", text="t"), ctx)
    assert plain == ev.MemoryUpdated(worker_id=W, workdir="/x", text="t")


_NODE = """
const m = await import(process.argv[1]);
const cases = JSON.parse(process.argv[2]);
console.log(JSON.stringify(cases.map(([state, s]) => [m.memoryPlaces(s), m.memoryText(state, s),
                                                     m.memoryOfRepository(s)])));
"""


def test_the_browser_finds_the_same_memory() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: this test runs web/memory.js under Node.js "
                    "(Debian's nodejs; ./scripts/test installs it)", pytrace=False)
    states = [_state((REPO, "- Use tabs\n- Run make test"),
                     (f"{REPO}/pkg", "- pkg is vendored\n- Run make test\n"),
                     (WORKTREE.path, "- worktree only")),
              _state((f"{REPO}/pkg", "- pkg is vendored\n\n"), ("~/src/app", "a\r\nb"))]
    sessions = [IN_WORKTREE, IN_REPO, IN_SUBFOLDER, NOT_LOADED, ELSEWHERE, TYPED]
    cases = [(state, s) for state in states for s in sessions]
    wire = [[msgspec.to_builtins(state), msgspec.to_builtins(s)] for state, s in cases]
    out = subprocess.run([node, "--input-type=module", "-e", _NODE,
                          (WEB / "memory.js").as_uri(), json.dumps(wire)],
                         capture_output=True, text=True, check=True).stdout
    expected = [[memory_places(s), memory_text(state, s),
                 bool((s.worktree and s.worktree.repo_root)
                      or (s.context and s.context.environment.repo_root))]
                for state, s in cases]
    assert json.loads(out) == expected
