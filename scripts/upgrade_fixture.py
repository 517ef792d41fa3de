#!/usr/bin/env python3
"""Make the data dir an older release left behind, for the upgrade test (issue 36, item 7).

    python scripts/upgrade_fixture.py 745192a

runs THAT commit's server, worker and scripted model server (its own testkit), from a git
worktree of it (``../wt-old-<commit>`` next to this repository, made when missing, with its
own venv by ``uv sync``), drives the server over HTTP and the browser socket as a user would,
stops everything, and copies the server's data dir and the worker's home into
``packages/server/tests/data/upgrade/<commit>/``, with ``fixture.json`` saying what is in
it (and the state the old server served last, ``state.json``).
``packages/server/tests/integration/test_upgrade.py`` starts today's server and worker on a
copy of every fixture there. The next release that changes the data format adds its own:
``python scripts/upgrade_fixture.py <its commit>`` (the driver below may need a line changed
if that release's testkit or API differs).

What the old server is made to hold: seven sessions — one finished after reading, patching
and running (then renamed), one with a project note the model remembered and a second turn
(renamed), one archived, one run from a board task, one run from a schedule, one waiting on a
command's approval and one on a question —, a memory note set by the user, board tasks
(one depending on another, one done, one running), two schedules (one paused), an MCP token,
and a provider with a pasted API key.

The worker's home is made at a fixed place, ``/tmp/codey-upgrade-<commit>/worker`` (the
sessions' folders and the worker's allowed root are absolute paths in the data); the test puts
it back there. Everything secret in the fixture (the access token, the worker's key, the MCP
token, the API key) was made for the test and opens nothing else.

Two halves: this file run by today's Python (git, uv, the copy), and the driver
(``--drive ROOT``) run by the old worktree's Python, so that it imports the old testkit.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "packages" / "server" / "tests" / "data" / "upgrade"
#: files and folders of the data dir and the worker's home left out of the fixture
_PRUNED = {"logs", "__pycache__", ".cache", "cache"}
#: the fixture must stay small: it is checked in
_MAX_BYTES = 1 << 20


def fixed_root(commit: str) -> Path:
    """Where the data is made, and where the test puts the worker's home back."""
    return Path(f"/tmp/codey-upgrade-{commit}")


# the outer half: today's Python ---------------------------------------------------------------

def _run(argv: list[str], cwd: Path | None = None, **kwargs: Any) -> str:
    done = subprocess.run(argv, cwd=cwd, check=True, text=True, capture_output=True, **kwargs)
    return str(done.stdout).strip()


def _uv() -> str:
    found = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    if not Path(found).exists():
        sys.exit("uv is not installed (pip install uv, or ./scripts/test installs it)")
    return found


def worktree(commit: str, path: Path | None) -> tuple[str, Path]:
    """The commit's short name and a worktree of it (reused when there), with its venv."""
    short = _run(["git", "rev-parse", "--short=7", f"{commit}^{{commit}}"], cwd=REPO)
    where = path or REPO.parent / f"wt-old-{short}"
    if not (where / ".git").exists():
        print(f"git worktree add {where} {short}")
        _run(["git", "worktree", "add", "--detach", str(where), short], cwd=REPO)
    head = _run(["git", "rev-parse", "--short=7", "HEAD"], cwd=where)
    if head != short:
        sys.exit(f"{where} is at {head}, not {short}: remove it or pass --worktree")
    print(f"uv sync in {where}")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    subprocess.run([_uv(), "sync", "--all-packages", "--all-extras", "--frozen", "-q"],
                   cwd=where, check=True, env=env)
    return short, where


def _copy_pruned(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True,
                    ignore=lambda _d, names: [n for n in names if n in _PRUNED
                                              or n.endswith((".log", "-wal", "-shm"))])


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def make(commit: str, path: Path | None) -> Path:
    short, where = worktree(commit, path)
    root = fixed_root(short)
    python = where / ".venv" / "bin" / "python"
    out = FIXTURES / short
    # the upgrade test puts a worker's home in the same place, under the same lock
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        print(f"driving {short}'s server in {root}")
        subprocess.run([str(python), str(Path(__file__).resolve()), "--drive", str(root),
                        "--commit", short], check=True, cwd=where,
                       env={k: v for k, v in os.environ.items()
                            if k not in ("VIRTUAL_ENV", "PYTHONPATH")})
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        _copy_pruned(root / "server", out / "server")
        _copy_pruned(root / "worker", out / "worker")
        for name in ("fixture.json", "state.json"):
            shutil.copy2(root / name, out / name)
    (out / "README.md").write_text(_README.format(commit=short), encoding="utf-8")
    size = _size(out)
    print(f"{out.relative_to(REPO)}: {size // 1024} KiB")
    if size > _MAX_BYTES:
        sys.exit(f"the fixture is {size} bytes, over {_MAX_BYTES}: prune it")
    return out


_README = """\
# A data dir made by {commit}

Made by `python scripts/upgrade_fixture.py {commit}` (read it for what is in here), for
`packages/server/tests/integration/test_upgrade.py`: `server/` is the server's data dir,
`worker/` the worker's home (made at `/tmp/codey-upgrade-{commit}/worker`, where the test
puts it back: the sessions' folders are absolute paths), `fixture.json` the ids and
secrets the test needs, `state.json` the state the old server served last.

The secrets in here (the access token, the worker's key, the MCP token, the API key) were
made for this test and open nothing else. Do not edit these files by hand: make them again.
"""


# the driver: the old commit's Python and testkit ---------------------------------------------

#: the command the waiting approval runs (its line in made.txt counts its runs)
APPROVAL_COMMAND = ["python3", "-c", "open('made.txt', 'a').write('made\\n'); print('made it')"]
FIX_PATCH = """*** Begin Patch
*** Update File: app.py
@@ def add(a, b):
-    return a - b
+    return a + b
*** End Patch"""
NOTE = "Run the tests with python3 test_app.py"
MEMORY = "This project keeps its functions small and tested."


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "fix the add function"},
     "reply": {"text": "Let me look at app.py.", "calls": [_call("read_file", path="app.py")]}},
    {"match": {"tool": "read_file", "tool_output": "return a - b"},
     "reply": {"calls": [_call("apply_patch", input=FIX_PATCH)]}},
    {"match": {"tool": "apply_patch"},
     "reply": {"calls": [_call("shell", command=["python3", "test_app.py"])]}},
    {"match": {"tool": "shell", "tool_output": "1 passed"},
     "reply": {"text": "Fixed: the test passes."}},
    {"match": {"user": "remember how to test"},
     "reply": {"calls": [_call("remember", note=NOTE)]}},
    {"match": {"tool": "remember"}, "reply": {"text": "Noted for the next sessions."}},
    {"match": {"user": "thank you"}, "reply": {"text": "You are welcome."}},
    {"match": {"user": "which database"},
     "reply": {"calls": [_call("ask_user", question="Which database should I use?",
                               choices=["SQLite", "PostgreSQL"])]}},
    {"match": {"user": "make the notes file"},
     "reply": {"text": "I will write it.", "calls": [_call("shell", command=APPROVAL_COMMAND)]}},
    {"match": {"any": True}, "reply": {"text": "Done."}},
]}


def _until(check: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def drive(root: Path, commit: str) -> None:
    """Make the data (the old testkit's processes; see the module's docstring)."""
    from codey_testkit.model_handle import start_model_server
    from codey_testkit.scenarios import write_project
    from codey_testkit.stack import ServerProcess, WorkerProcess
    from codey_testkit.wsclient import BrowserSocket

    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    model = start_model_server(SCRIPT, root / "scratch" / "model")
    config = {"providers": [
        {"name": "scripted", "kind": "chat", "base_url": model.base_url,
         "models": ["scripted-1"]},
        {"name": "keyed", "kind": "chat", "base_url": model.base_url, "models": ["scripted-1"],
         "auth": "api_key"}], "default_provider": "scripted"}
    server = ServerProcess(root / "server", config=config, log_dir=root / "scratch" / "logs")
    server.start()
    worker = WorkerProcess(server, root / "worker")
    worker.start()
    http = server.http
    wid = worker.worker_id
    browser = BrowserSocket(server, after_seq=0)
    fixture: dict[str, Any] = {"commit": commit, "root": str(root), "worker_id": wid,
                               "provider": "scripted", "keyed_provider": "keyed"}

    def ok(r: Any, *codes: int) -> Any:
        if r.status_code not in (codes or (200, 201, 202)):
            raise RuntimeError(f"{r.request.method} {r.request.url}: {r.status_code} {r.text}")
        return r.json()

    def command(msg: dict[str, Any]) -> None:
        request_id = f"r{time.monotonic_ns()}"
        browser.send({**msg, "request_id": request_id})
        while True:
            frame = browser.recv(30)
            if frame is None:
                raise RuntimeError(f"no answer to {msg}")
            if frame.get("request_id") == request_id:
                if frame["type"] != "ack":
                    raise RuntimeError(f"{msg} was refused: {frame}")
                return

    def session(sid: str) -> dict[str, Any]:
        result: dict[str, Any] = ok(http.get(f"/api/sessions/{sid}"))
        return result

    def until_status(sid: str, *statuses: str) -> dict[str, Any]:
        def there() -> dict[str, Any] | None:
            s = session(sid)
            return s if s["status"] in statuses and len(s["items"]) > 1 else None
        found: dict[str, Any] = _until(there, f"session {sid} to be {statuses}")
        return found

    def folder(name: str) -> str:
        path = Path(worker.workdir(name))
        path.mkdir(parents=True, exist_ok=True)
        readme = path / "README.md"  # (git keeps no empty folder: the fixture would lose it)
        if not readme.exists():
            readme.write_text(f"# {name}\n")
        return str(path)

    def new_session(name: str, prompt: str, policy: str, **extra: Any) -> str:
        body = {"worker_id": wid, "workdir": folder(name), "prompt": prompt, "policy": policy,
                **extra}
        return str(ok(http.post("/api/sessions", json=body))["session_id"])

    sessions: dict[str, str] = {}
    try:
        # a provider whose key was pasted in the browser (auth.json), and an MCP token
        api_key = "sk-upgrade-test-only-" + commit
        ok(http.post("/api/auth/api-key", json={"provider": "keyed", "api_key": api_key}))
        fixture["api_key"] = api_key
        fixture["mcp_token"] = ok(http.post("/api/mcp/tokens", json={"name": "ci-agent"}))

        # 1. read, patch, run: finished; then renamed
        write_project(Path(folder("app")))
        sessions["fix"] = new_session("app", "fix the add function", "full-auto")
        until_status(sessions["fix"], "idle")
        command({"type": "rename_session", "session_id": sessions["fix"],
                 "title": "Fix add()"})
        command({"type": "set_memory", "worker_id": wid, "workdir": folder("app"),
                 "text": MEMORY})

        # 2. a note the model remembered, and a second turn; renamed
        sessions["notes"] = new_session("notes", "remember how to test", "full-auto")
        until_status(sessions["notes"], "idle")
        ok(http.post(f"/api/sessions/{sessions['notes']}/prompt", json={"text": "thank you"}))
        _until(lambda: session(sessions["notes"])["items"][-1].get("text")
               == "You are welcome.", "the second turn")
        until_status(sessions["notes"], "idle")
        command({"type": "rename_session", "session_id": sessions["notes"],
                 "title": "Project notes"})

        # 3. archived
        sessions["archived"] = new_session("hello", "say hello", "suggest")
        until_status(sessions["archived"], "idle")
        command({"type": "archive_session", "session_id": sessions["archived"],
                 "archived": True})

        # 4. the board: one task depends on another, one is done, one runs as a session
        docs = ok(http.post("/api/tasks", json={"title": "Write the docs",
                                               "description": "Say how to install."}))
        ship = ok(http.post("/api/tasks", json={"title": "Ship the release",
                                               "depends_on": [docs["task_id"]]}))
        tidy = ok(http.post("/api/tasks", json={"title": "Tidy the board"}))
        ok(http.post(f"/api/tasks/{tidy['task_id']}/move", json={"status": "done"}))
        run = ok(http.post(f"/api/tasks/{docs['task_id']}/run",
                           json={"worker_id": wid, "workdir": folder("docs"),
                                 "policy": "full-auto"}))
        sessions["task"] = run["session_id"]
        until_status(sessions["task"], "idle")
        fixture["tasks"] = {"docs": docs["task_id"], "ship": ship["task_id"],
                            "tidy": tidy["task_id"]}

        # 5. schedules: one run now (a session), one paused
        def schedule(name: str, cron: str, enabled: bool) -> str:
            body = {"name": name, "cron": cron, "timezone": "Europe/Paris", "worker_id": wid,
                    "workdir": folder("app"), "prompt": f"{name}: tidy the imports",
                    "policy": "full-auto", "enabled": enabled}
            return str(ok(http.post("/api/schedules", json=body))["schedule_id"])

        weekly = schedule("weekly tidy", "0 9 * * 1", True)
        paused = schedule("nightly report", "30 6 * * *", False)
        fixture["schedules"] = {"weekly": weekly, "paused": paused}
        ok(http.post(f"/api/schedules/{weekly}/run"))

        def scheduled() -> str | None:
            state = ok(http.get("/api/state/bootstrap"))["state"]
            found = [sid for sid in state["sessions"] if sid not in sessions.values()]
            return found[0] if found else None

        sessions["scheduled"] = _until(scheduled, "the schedule's session")
        until_status(sessions["scheduled"], "idle")

        # 6. waiting on a question, 7. on a command's approval
        sessions["question"] = new_session("db", "which database", "suggest")
        asked = until_status(sessions["question"], "waiting_user")
        (fixture["question_id"],) = asked["questions"]
        sessions["approval"] = new_session("approve", "make the notes file", "suggest")
        waiting = until_status(sessions["approval"], "waiting_approval")
        (fixture["approval_id"],) = waiting["approvals"]
        fixture["approval_command"] = APPROVAL_COMMAND
        fixture["sessions"] = sessions

        state = ok(http.get("/api/state/bootstrap"))
        (root / "state.json").write_text(json.dumps(state, indent=1, sort_keys=True))
        fixture["seq"] = state["seq"]
        fixture["titles"] = {name: state["state"]["sessions"][sid]["title"]
                             for name, sid in sessions.items()}
    finally:
        browser.close()
        code = server.stop()
        worker.stop()
        model.stop()
    if code != 0:
        raise RuntimeError(f"the server stopped with {code}: {server.log_text()[-2000:]}")
    (root / "fixture.json").write_text(json.dumps(fixture, indent=1, sort_keys=True))
    print(json.dumps({k: fixture[k] for k in ("sessions", "seq")}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commit", nargs="?", help="the release's commit (e.g. 745192a)")
    parser.add_argument("--worktree", type=Path, help="a worktree of it (default: "
                                                      "../wt-old-<commit>)")
    parser.add_argument("--drive", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--commit", dest="commit_name", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive is not None:
        drive(args.drive, args.commit_name)
        return
    if not args.commit:
        parser.error("name the release's commit")
    make(args.commit, args.worktree)


if __name__ == "__main__":
    main()
