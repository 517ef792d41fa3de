"""A session's sandbox and network toggles reach the processes it already runs (issue 32,
item 7), through the real server, worker and bubblewrap and the scripted model.

The process is a probe: a python loop that tries a TCP connect to a listener of this test on
127.0.0.1 every 0.2 s and prints whether it got through. With the session's network on, a
sandboxed command shares the machine's network and gets through; with it off, it has a
network namespace of its own and does not.

- Turning the network off (less access) stops the probe started with it on: it ends, stopped
  by ``settings``, a notice in the transcript says so, and a probe started afterwards has no
  network.
- Turning it on (more access) stops nothing: a notice says the probe keeps its old settings,
  and it still has no network when polled.
"""

from __future__ import annotations

import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.scenarios import idle, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="the network toggle is a bubblewrap namespace")

END = {"match": {"any": True}, "reply": {"text": "unexpected"}}


@pytest.fixture
def script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [END]}  # each test sets its own


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 that accepts and closes every connection; its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(sock.getsockname()[1])
    finally:
        done.set()
        thread.join(timeout=5)
        sock.close()


def _probe(port: int, marker: Path) -> list[str]:
    """Tries a connect to ``port`` every 0.2 s and prints the outcome; ``marker`` (its
    workdir) in its argv tells its processes from any other on the machine."""
    code = ("import socket, sys, time\n"
            "while True:\n"
            "    try:\n"
            f"        socket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n"
            "        print('connect ok', flush=True)\n"
            "    except OSError as e:\n"
            "        print('connect failed:', e, flush=True)\n"
            "    time.sleep(0.2)\n")
    return ["python3", "-u", "-c", code, str(marker)]


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


def _set_network(server: ServerProcess, sid: str, on: bool) -> None:
    r = server.http.post(f"/api/sessions/{sid}/sandbox",
                         json={"sandbox": "workspace-write", "network": on})
    assert r.status_code == 200, r.text


def _prompt(server: ServerProcess, sid: str, text: str) -> None:
    r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": text})
    assert r.status_code in (200, 201, 202), r.text


def _answered(text: str) -> Any:
    """The turn is over and ``text`` was its answer (the answer is complete a moment before
    the turn ends)."""
    return lambda s: idle(s) and s["items"][-1].get("text") == text


def _notices(s: dict[str, Any], code: str) -> list[str]:
    return [i["text"] for i in s["items"] if i["kind"] == "notice" and i["code"] == code]


def _pids_with(marker: str) -> list[int]:
    """Processes on this machine whose argv holds ``marker``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if marker in argv:
                out.append(int(entry.name))
    return out


def test_turning_the_network_off_stops_a_process_started_with_it_on(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess,
        listener: int) -> None:
    wd = Path(worker.workdir("narrow"))
    wd.mkdir(parents=True)
    first, second = wd / "first", wd / "second"
    _script(model,
            {"match": {"user": "probe with the network"},
             "reply": _call("exec", command=_probe(listener, first), yield_ms=1500)},
            {"match": {"tool": "exec", "tool_output": "connect ok"},
             "reply": {"text": "The probe gets through."}},
            {"match": {"user": "probe again"},
             "reply": _call("exec", command=_probe(listener, second), yield_ms=1500)},
            {"match": {"tool": "exec", "tool_output": "connect failed"},
             "reply": _call("kill", process_id="$PROCESS_ID")},
            {"match": {"tool": "kill"}, "reply": {"text": "No network now."}})
    sid = _session(server, worker, wd, "probe with the network", network=True)
    s = wait_for(server, sid, _answered("The probe gets through."), timeout=60,
                 what="the probe to get through")
    [p] = s["processes"]
    assert p["status"] == "running" and "connect ok" in p["output"]
    assert _pids_with(str(first))

    _set_network(server, sid, False)
    s = wait_for(server, sid, lambda s: s["processes"][0]["status"] == "ended", timeout=30,
                 what="the probe to be stopped")
    p = s["processes"][0]
    assert p["stopped_by"] == "settings"
    assert s["network"] is False
    [notice] = _notices(s, "processes_stopped")
    assert notice.startswith("Network turned off: stopping 1 running process (python3 -u -c")
    assert notice.endswith("— it ran with the old settings.")
    wait_for(server, sid, lambda s: not _pids_with(str(first)), timeout=10,
             what="the probe to be gone from the machine")

    _prompt(server, sid, "probe again")
    s = wait_for(server, sid, _answered("No network now."), timeout=60,
                 what="the second probe to run without the network")
    started = [t for t in tools(s) if t["name"] == "exec"][-1]
    assert "connect failed" in started["output"] and "connect ok" not in started["output"]
    assert [(p["stopped_by"], p["status"]) for p in s["processes"]] == [
        ("settings", "ended"), ("exec_kill", "ended")]


def test_turning_the_network_on_keeps_a_running_process_and_says_it_has_none(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess,
        listener: int) -> None:
    wd = Path(worker.workdir("widen"))
    wd.mkdir(parents=True)
    _script(model,
            {"match": {"user": "probe without the network"},
             "reply": _call("exec", command=_probe(listener, wd), yield_ms=1500)},
            {"match": {"tool": "exec", "tool_output": "connect failed"},
             "reply": {"text": "The probe is cut off."}},
            {"match": {"user": "poll the probe"},
             "reply": _call("write_stdin", process_id="$PROCESS_ID", yield_ms=1500)},
            {"match": {"tool": "write_stdin", "tool_output": "connect"},
             "reply": {"text": "Polled."}})
    sid = _session(server, worker, wd, "probe without the network")
    s = wait_for(server, sid, _answered("The probe is cut off."), timeout=60,
                 what="the probe to run")
    assert s["processes"][0]["status"] == "running"

    _set_network(server, sid, True)
    s = wait_for(server, sid, lambda s: _notices(s, "processes_kept"), timeout=10,
                 what="the notice")
    [notice] = _notices(s, "processes_kept")
    assert notice.startswith("Network turned on: 1 running process keeps its old settings "
                             "(python3 -u -c")
    assert notice.endswith("); restart it to get the network.")
    assert not _notices(s, "processes_stopped")
    assert s["network"] is True and s["processes"][0]["status"] == "running"

    # what the notice says is true: the probe still has no network of the machine's
    _prompt(server, sid, "poll the probe")
    s = wait_for(server, sid, _answered("Polled."), timeout=60, what="the poll")
    polled = [t for t in tools(s) if t["name"] == "write_stdin"][-1]
    assert "connect failed" in polled["output"] and "connect ok" not in polled["output"]
    assert s["processes"][0]["status"] == "running"
