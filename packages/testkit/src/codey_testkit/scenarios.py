"""Scenarios for agent-loop tests, the e2e suite and benchmarks: provider config for the
scripted model, a small project to fix, and polling helpers over the HTTP API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until


def provider_config(model: ModelServerHandle, kind: str = "chat") -> dict[str, Any]:
    return {"providers": [{"name": "scripted", "kind": kind, "base_url": model.base_url,
                           "models": ["scripted-1"]}], "default_provider": "scripted"}


def create_session(server: ServerProcess, worker: WorkerProcess, workdir: str, prompt: str,
                   policy: str = "full-auto") -> str:
    r = server.http.post("/api/sessions", json={"worker_id": worker.worker_id, "workdir": workdir,
                                                "prompt": prompt, "policy": policy})
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def session(server: ServerProcess, sid: str) -> dict[str, Any]:
    r = server.http.get(f"/api/sessions/{sid}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def last_request_text(model: ModelServerHandle) -> str:
    """The messages of the model's last chat request, as JSON text (to look for what it was
    sent, and what it was not)."""
    bodies = [r["body"] for r in model.requests("/v1/chat/completions")]
    return json.dumps(bodies[-1]["messages"])


def wait_for(server: ServerProcess, sid: str, predicate: Any, timeout: float = 30.0,
             what: str = "condition") -> dict[str, Any]:
    """The session once ``predicate(session)`` holds (looked at again while the server
    restarts); a timeout shows its status and items."""
    return wait_until(lambda: session(server, sid), ok=predicate, retry=Exception,
                      timeout=timeout, interval=0.05, what=what, show=_summary)


def _summary(s: dict[str, Any]) -> str:
    items = [(i["kind"], i.get("status"), (i.get("text") or i.get("result") or "")[:80])
             for i in s.get("items", [])]
    return f"status={s.get('status')} reason={s.get('status_reason')} items={items}"


def idle(s: dict[str, Any]) -> bool:
    return s["status"] in ("idle", "error", "waiting_user") and len(s["items"]) > 1


def tools(s: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in s["items"] if i["kind"] == "tool_call"]


def write_project(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "test_app.py").write_text(
        "from app import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('1 passed')\n")


FIX_PATCH = """*** Begin Patch
*** Update File: app.py
@@ def add(a, b):
-    return a - b
+    return a + b
*** End Patch"""


def fix_script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [
        {"match": {"user": "fix the add function"},
         "reply": {"text": "Let me look at app.py.",
                   "calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]}},
        {"match": {"tool": "read_file", "tool_output": "return a - b"},
         "reply": {"calls": [{"name": "apply_patch", "arguments": {"input": FIX_PATCH}}]}},
        {"match": {"tool": "apply_patch"},
         "reply": {"calls": [{"name": "shell",
                              "arguments": {"command": ["python3", "test_app.py"]}}]}},
        {"match": {"tool": "shell", "tool_output": "1 passed"},
         "reply": {"text": "Fixed: add now adds, and the test passes."}},
        {"match": {"any": True}, "reply": {"text": "Something went differently."}},
    ]}
