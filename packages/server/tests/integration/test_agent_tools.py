"""The tools of issue 27 through the real server, worker and scripted model: a dev server
started with exec, polled, hit with a request and killed; write_stdin to a REPL; processes
stopped on interrupt and on close, and found gone after a worker restart; grep and glob caps
and .gitignore; edit's not-found and not-unique errors; view_image reaching the next model
request as image input, on both wires.

Each test sets the scripted model's script itself (``model.set_script``); ``$PROCESS_ID`` in a
scripted call stands for the newest process id the request carries (the one exec started).
"""

from __future__ import annotations

import base64
import socket
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.procs import pids_with as _pids_with
from codey_testkit.scenarios import idle, provider_config, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until
from codey_testkit.wsclient import BrowserSocket

END = {"match": {"any": True}, "reply": {"text": "unexpected"}}


@pytest.fixture
def script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [END]}  # each test sets its own


def _script(model: ModelServerHandle, *steps: dict[str, Any]) -> None:
    model.set_script({"model": "scripted-1", "steps": [*steps, END]})


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"calls": [{"name": name, "arguments": arguments}]}


def _session(server: ServerProcess, worker: WorkerProcess, workdir: Path, prompt: str,
             **fields: Any) -> str:
    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": str(workdir), "prompt": prompt,
        "policy": "full-auto", **fields})
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def _workdir(worker: WorkerProcess, name: str) -> Path:
    wd = Path(worker.workdir(name))
    wd.mkdir(parents=True, exist_ok=True)
    return wd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])



def _described(pids: list[int]) -> str:
    """Each process: its pid, state, parent and argv (for a wait's timeout)."""
    out = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        out.append(f"{pid} {stat[0].decode()} ppid={stat[1].decode()} "
                   f"{argv.replace(chr(0), ' ')[:200]!r}")
    return "; ".join(out) or "none"


def _by_name(s: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [t for t in tools(s) if t["name"] == name]


# processes -----------------------------------------------------------------------------------

def test_a_dev_server_started_with_exec_is_polled_hit_with_a_request_and_killed(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess) -> None:
    """With the session's network on, a server one command starts is reachable from the
    session's other commands (with it off, each sandboxed command has a network of its own)."""
    wd = _workdir(worker, "site")
    (wd / "hello.txt").write_text("hello from the site\n")
    port = _free_port()
    serve = ["python3", "-u", "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    fetch = ["python3", "-c", "import urllib.request as u; print(u.urlopen("
             f"'http://127.0.0.1:{port}/hello.txt', timeout=10).read().decode())"]
    _script(model,
            {"match": {"user": "serve the site"},
             "reply": _call("exec", command=serve, yield_ms=3000)},
            {"match": {"tool": "exec", "tool_output": "Serving HTTP"},
             "reply": _call("shell", command=fetch)},
            {"match": {"tool": "shell", "tool_output": "hello from the site"},
             "reply": _call("write_stdin", process_id="$PROCESS_ID", yield_ms=1000)},
            {"match": {"tool": "write_stdin", "tool_output": "GET /hello.txt"},
             "reply": _call("kill", process_id="$PROCESS_ID")},
            {"match": {"tool": "kill", "tool_output": "stopped: exec kill"},
             "reply": {"text": "Served, fetched, stopped."}})
    sid = _session(server, worker, wd, "serve the site", network=True)
    s = wait_for(server, sid, idle, timeout=60, what="the turn to end")
    assert s["items"][-1]["text"] == "Served, fetched, stopped."
    started, fetched, polled, killed = tools(s)
    assert started["status"] == "done" and "is running" in started["result"]
    assert "Serving HTTP on 127.0.0.1 port" in started["output"]
    assert fetched["exit_code"] == 0 and "hello from the site" in fetched["result"]
    assert '"GET /hello.txt HTTP/1.1" 200' in polled["result"]
    assert "killed by signal" in killed["result"] or "exited with code" in killed["result"]
    [p] = s["processes"]
    assert (p["status"], p["stopped_by"], p["item_id"]) == ("ended", "exec_kill",
                                                            started["id"])
    assert p["argv"] == serve and "GET /hello.txt" in p["output"]
    with pytest.raises(OSError):  # nothing listens any more
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_write_stdin_talks_to_a_python_repl_in_a_terminal(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess) -> None:
    _script(model,
            {"match": {"user": "use the repl"},
             "reply": _call("exec", command=["python3", "-q"], tty=True, yield_ms=1500)},
            {"match": {"tool": "exec", "tool_output": ">>>"},
             "reply": _call("write_stdin", process_id="$PROCESS_ID",
                            input="x = 6 * 7\nprint('answer', x)\n", yield_ms=1500)},
            {"match": {"tool": "write_stdin", "tool_output": "answer 42"},
             "reply": _call("write_stdin", process_id="$PROCESS_ID", input="exit()\n",
                            yield_ms=3000)},
            {"match": {"tool": "write_stdin", "tool_output": "exited with code 0"},
             "reply": {"text": "The REPL said 42."}})
    wd = _workdir(worker, "repl")
    sid = _session(server, worker, wd, "use the repl")
    s = wait_for(server, sid, idle, timeout=60, what="the turn to end")
    assert s["items"][-1]["text"] == "The REPL said 42."
    [p] = s["processes"]
    assert (p["status"], p["exit_code"], p["tty"], p["stopped_by"]) == ("ended", 0, True, "")
    assert "answer 42" in p["output"]


def _marker(wd: Path) -> str:
    # in the loop's argv (and its sandbox's): tells this test's loop from any other process on
    # the machine — also from the worker's own sandboxed runs in the workdir (a checkpoint's
    # git after the turn), which have the workdir in their argv but are not the loop
    return f"loop in {wd}"


def _loop(wd: Path) -> list[str]:
    return ["bash", "-c", f"while true; do echo tick; sleep 0.2; done # {_marker(wd)}"]


def _started_loop(model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess,
                  name: str) -> tuple[str, Path]:
    wd = _workdir(worker, name)
    _script(model,
            {"match": {"user": "start the loop"},
             "reply": _call("exec", command=_loop(wd), yield_ms=500)},
            {"match": {"tool": "exec", "tool_output": "tick"},
             "reply": {"text": "It ticks."}})
    sid = _session(server, worker, wd, "start the loop")
    s = wait_for(server, sid, idle, timeout=30, what="the turn to end")
    assert [p["status"] for p in s["processes"]] == ["running"]
    assert _pids_with(_marker(wd))  # it outlived its call
    return sid, wd


def test_an_interrupt_stops_the_processes_the_turn_left_running(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess) -> None:
    sid, wd = _started_loop(model, server, worker, "interrupted")
    r = server.http.post(f"/api/sessions/{sid}/interrupt")
    assert r.status_code == 200, r.text
    s = wait_for(server, sid, lambda s: s["processes"][0]["status"] == "ended", timeout=20,
                 what="the loop to stop")
    assert s["processes"][0]["stopped_by"] == "interrupt"
    wait_until(lambda: _pids_with(_marker(wd)), ok=lambda pids: not pids, timeout=10,
               interval=0.1, show=_described, what="the loop's processes to be gone")
    assert not _pids_with(_marker(wd))


def test_an_interrupt_mid_turn_stops_the_running_command_and_the_processes(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess) -> None:
    wd = _workdir(worker, "busy")
    _script(model,
            {"match": {"user": "work"},
             "reply": _call("exec", command=_loop(wd), yield_ms=300)},
            {"match": {"tool": "exec", "tool_output": "tick"},
             "reply": _call("shell", command=["sleep", "30"])})
    sid = _session(server, worker, wd, "work")
    wait_for(server, sid, lambda s: [t["status"] for t in tools(s)] == ["done", "running"],
             timeout=30, what="the second command to run")
    assert server.http.post(f"/api/sessions/{sid}/interrupt").status_code == 200
    s = wait_for(server, sid, lambda s: s["status"] == "interrupted"
                 and s["processes"][0]["status"] == "ended", timeout=20, what="the stop")
    assert [t["status"] for t in tools(s)] == ["done", "cancelled"]
    assert s["processes"][0]["stopped_by"] == "interrupt"


def test_closing_the_session_stops_its_processes(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess) -> None:
    sid, wd = _started_loop(model, server, worker, "closed")
    browser = BrowserSocket(server, after_seq=server.http.get(
        "/api/state/bootstrap").json()["seq"])
    browser.send({"type": "close_session", "session_id": sid, "request_id": "r1"})
    s = wait_for(server, sid, lambda s: s["processes"][0]["status"] == "ended", timeout=20,
                 what="the loop to stop")
    browser.close()
    assert s["processes"][0]["stopped_by"] == "close" and s["status"] == "closed"
    wait_until(lambda: _pids_with(_marker(wd)), ok=lambda pids: not pids, timeout=10,
               interval=0.1, show=_described, what="the loop's processes to be gone")
    assert not _pids_with(_marker(wd))


def test_after_a_worker_restart_its_processes_are_reported_gone(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess) -> None:
    sid, wd = _started_loop(model, server, worker, "restarted")
    worker.stop()  # the worker takes its processes with it
    assert not _pids_with(_marker(wd))
    worker.start()
    s = wait_for(server, sid, lambda s: s["processes"][0]["status"] != "running", timeout=30,
                 what="the process to be found gone")
    assert (s["processes"][0]["status"], s["processes"][0]["stopped_by"]) == ("gone", "gone")
    # the model is told so if it asks: its id is refused before it reaches the worker
    _script(model,
            {"match": {"user": "poll it"},
             "reply": _call("write_stdin", process_id="$PROCESS_ID")},
            {"match": {"tool": "write_stdin", "tool_output": "is gone"},
             "reply": {"text": "It is gone; I will start it again."}})
    server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "poll it"})
    s = wait_for(server, sid, lambda s: s["items"][-1].get("text", "").startswith("It is gone"),
                 timeout=30, what="the answer")
    assert _by_name(s, "write_stdin")[0]["status"] == "rejected"


# search ------------------------------------------------------------------------------------

def test_grep_and_glob_respect_gitignore_and_their_caps(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess) -> None:
    wd = _workdir(worker, "search")
    (wd / ".gitignore").write_text("build/\n*.log\n")
    (wd / "build").mkdir()
    (wd / "build" / "gen.py").write_text("needle = 'ignored'\n")
    (wd / "debug.log").write_text("needle in a log\n")
    (wd / "src").mkdir()
    (wd / "src" / "many.py").write_text("".join(f"needle_{n} = {n}\n" for n in range(300)))
    for n in range(6):
        (wd / "src" / f"mod{n}.py").write_text(f"x = {n}\n")
    _script(model,
            {"match": {"user": "search"},
             "reply": {"calls": [
                 {"name": "grep", "arguments": {"pattern": "needle", "max_matches": 50}},
                 {"name": "glob", "arguments": {"pattern": "**/*.py", "max_results": 4}},
                 {"name": "grep", "arguments": {"pattern": "needle_29[0-9]",
                                                "include": "*.py", "context": 1}}]}},
            {"match": {"tool": "grep"}, "reply": {"text": "Searched."}})
    sid = _session(server, worker, wd, "search")
    s = wait_for(server, sid, idle, timeout=30, what="the turn to end")
    capped, listed, narrow = tools(s)
    assert capped["status"] == "done"
    assert capped["result"].startswith("1 file, 50 matching lines\nsrc/many.py:1:needle_0 = 0")
    assert "more matches not shown" in capped["result"]
    assert "build/" not in capped["result"] and "debug.log" not in capped["result"]
    paths = listed["result"].splitlines()
    assert len(paths) == 5 and "more paths match" in paths[-1]
    assert all(p.startswith("src/") for p in paths[:4])  # build/gen.py is ignored
    assert narrow["result"].splitlines()[:4] == [
        "1 file, 10 matching lines", "src/many.py-290-needle_289 = 289",
        "src/many.py:291:needle_290 = 290", "src/many.py:292:needle_291 = 291"]


# edit --------------------------------------------------------------------------------------

def test_edit_fails_on_text_not_found_or_not_unique_then_changes_the_file(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess) -> None:
    wd = _workdir(worker, "edit")
    (wd / "app.py").write_text("def add(a, b):\n    return a - b\n\n\nX = 1\nY = 1\n")
    _script(model,
            {"match": {"user": "fix add"},
             "reply": _call("edit", path="app.py", old_string="return a * b",
                            new_string="return a + b")},
            {"match": {"tool": "edit", "tool_output": "edit_no_match"},
             "reply": _call("edit", path="app.py", old_string=" = 1", new_string=" = 2")},
            {"match": {"tool": "edit", "tool_output": "edit_not_unique"},
             "reply": _call("edit", path="app.py", old_string="return a - b",
                            new_string="return a + b")},
            {"match": {"tool": "edit", "tool_output": "edited app.py: 1 replacement"},
             "reply": {"text": "Fixed add."}})
    sid = _session(server, worker, wd, "fix add")
    s = wait_for(server, sid, idle, timeout=30, what="the turn to end")
    missing, twice, done = tools(s)
    assert missing["status"] == "failed" and "error (edit_no_match)" in missing["result"]
    assert twice["status"] == "failed" and "error (edit_not_unique)" in twice["result"]
    assert done["status"] == "done" and "-    return a - b\n+    return a + b" in done["diff"]
    assert done["files"] == [{"path": "app.py", "op": "update", "moved_to": None,
                              "added": 1, "removed": 1}]
    assert (wd / "app.py").read_text() == "def add(a, b):\n    return a + b\n\n\nX = 1\nY = 1\n"
    assert s["items"][-1]["text"] == "Fixed add."


# view_image --------------------------------------------------------------------------------

def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    rows = b"".join(b"\0" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_view_image_reaches_the_next_model_request_as_image_input(
        tmp_path: Path, model: ModelServerHandle, kind: str) -> None:
    _script(model,
            {"match": {"user": "look at the screenshot"},
             "reply": _call("view_image", path="shots/home.png")},
            {"match": {"tool": "view_image", "tool_output": "is attached"},
             "reply": {"text": "A red square."}})
    with ServerProcess(tmp_path / "server", config=provider_config(model, kind)) as server, \
            WorkerProcess(server, tmp_path / "worker") as worker:
        wd = _workdir(worker, "img")
        (wd / "shots").mkdir()
        png = _png(3, 2)
        (wd / "shots" / "home.png").write_bytes(png)
        sid = _session(server, worker, wd, "look at the screenshot")
        s = wait_for(server, sid, idle, timeout=30, what="the turn to end")
        assert s["items"][-1]["text"] == "A red square."
        [call] = tools(s)
        assert f"(image/png, {len(png)} bytes, 3×2 px)" in call["result"]
        image = call["image"]
        assert (image["name"], image["mime"], image["size"]) == ("shots/home.png", "image/png",
                                                                 len(png))
        # the transcript's image is the file's bytes
        got = server.http.get(f"/api/blobs/{image['hash']}", params={"mime": "image/png"})
        assert got.status_code == 200 and got.content == png
        # the model was shown it, as image input
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        if kind == "chat":
            body = model.requests("/v1/chat/completions")[-1]["body"]
            last = body["messages"][-1]
            assert body["messages"][-2]["role"] == "tool"
            assert last["role"] == "user"
            assert last["content"][1] == {"type": "image_url", "image_url": {"url": url}}
        else:
            body = model.requests("/v1/responses")[-1]["body"]
            output = body["input"][-1]
            assert output["type"] == "function_call_output"
            assert output["output"][1] == {"type": "input_image", "image_url": url}
