"""An ACP agent's modes, config options and token usage over the real stack, with the
scripted agent: what its session starts with is folded into the session; a mode or option
set through ``/agent/config`` reaches the agent (it says its settings back in the next turn)
and its confirmation is what the session shows; the agent's own ``current_mode_update`` is
folded too; its ``usage_update`` and its prompt's usage feed the session's token usage."""

from __future__ import annotations

import json
from pathlib import Path

from codey_testkit.acp_agent import worker_config
from codey_testkit.scenarios import wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

SCRIPT = {
    "modes": {"current": "ask", "available": [["ask", "Ask"], ["code", "Code"]]},
    "config": [{"id": "model", "name": "Model", "current": "fast",
                "choices": [["fast", "Fast"], ["deep", "Deep"]]},
               {"id": "web", "name": "Web access", "current": False}],
    "prompt_usage": {"input_tokens": 10, "output_tokens": 5},
    "turns": [
        [{"usage": {"used": 1200, "size": 200000}}, {"settings": True}, {"say": "One."}],
        [{"settings": True}, {"mode": "ask"}, {"say": "Two."}],
    ]}


def _said(s: dict, text: str) -> bool:
    """The agent said ``text`` (its chunks of one turn are one message)."""
    return any(i["kind"] == "assistant_message" and text in (i.get("text") or "")
               for i in s["items"])


def test_modes_config_options_and_usage(tmp_path: Path) -> None:
    script = tmp_path / "acp-turns.json"
    script.write_text(json.dumps(SCRIPT))
    config = worker_config(script, tmp_path / "acp-state")
    with ServerProcess(tmp_path / "server") as server, \
            WorkerProcess(server, tmp_path / "worker", config=config) as worker:
        r = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": worker.workdir("acp"),
            "agent": "scripted", "prompt": "hello"})
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        s = wait_for(server, sid, lambda s: s["status"] == "idle" and _said(s, "One."),
                     timeout=60, what="turn 1")
        # what the agent's session started with
        assert s["agent_mode"] == "ask"
        assert [(m["id"], m["name"]) for m in s["agent_modes"]] == [("ask", "Ask"),
                                                                    ("code", "Code")]
        model, web = s["agent_config"]
        assert (model["id"], model["type"], model["current"],
                [c["value"] for c in model["choices"]]) == ("model", "select", "fast",
                                                            ["fast", "deep"])
        assert (web["id"], web["type"], web["current"]) == ("web", "boolean", False)
        assert _said(s, "[mode: ask; model=fast, web=False]")
        # its usage_update (context) and its prompt's usage (tokens), as one call
        u = s["usage"]
        assert (u["input_tokens"], u["output_tokens"], u["total_tokens"], u["turns"],
                u["context_tokens"], u["context_window"]) == (10, 5, 15, 1, 1200, 200000)

        url = f"/api/sessions/{sid}/agent/config"
        r = server.http.post(url, json={"mode": "code"})
        assert r.status_code == 200, r.text
        assert r.json()["mode"] == "code"
        r = server.http.post(url, json={"option": "model", "value": "deep"})
        assert r.status_code == 200, r.text
        assert [o["current"] for o in r.json()["options"]] == ["deep", False]
        r = server.http.post(url, json={"option": "web", "value": True})
        assert r.status_code == 200, r.text
        s = server.http.get(f"/api/sessions/{sid}").json()
        assert s["agent_mode"] == "code"
        assert [o["current"] for o in s["agent_config"]] == ["deep", True]
        # only what the agent offered, in its type; one thing at a time
        for bad in ({"mode": "yolo"}, {"option": "model", "value": "huge"},
                    {"option": "web", "value": "yes"}, {"option": "nope", "value": "x"},
                    {"mode": "ask", "option": "model", "value": "fast"}, {}):
            r = server.http.post(url, json=bad)
            assert r.status_code == 400, (bad, r.text)

        # the agent has them (it says so), and its own mode change is folded
        r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "again"})
        assert r.status_code == 202, r.text
        s = wait_for(server, sid, lambda s: s["status"] == "idle" and _said(s, "Two."),
                     timeout=60, what="turn 2")
        assert _said(s, "[mode: code; model=deep, web=True]")
        assert s["agent_mode"] == "ask"
        u = s["usage"]
        assert (u["input_tokens"], u["turns"], u["context_tokens"]) == (20, 2, 15)
