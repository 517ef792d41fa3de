"""web_fetch and web_search through the real server, worker and scripted model: the server
fetches (the test kit's site on 127.0.0.2, let through by the settings' allow list as an
operator's public site would be), a prompt-injected model's fetch of the server's own API is
refused with a result it sees, a search goes to a SearXNG-shaped backend, and under
``suggest`` a fetch asks until its host is approved for the session (a URL naming the
server's own address is refused before anyone is asked)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codey_server.agent.tools.web import FETCH_MARK
from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.scenarios import idle, provider_config, tools, wait_for
from codey_testkit.search_service import SearchServiceHandle
from codey_testkit.stack import ServerProcess, WorkerProcess

END = {"match": {"any": True}, "reply": {"text": "unexpected"}}


@pytest.fixture
def script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [END]}  # each test sets its own


@pytest.fixture
def site(tmp_path: Path) -> Iterator[SearchServiceHandle]:
    with SearchServiceHandle(tmp_path / "site", host="127.0.0.2") as handle:
        yield handle


@pytest.fixture
def server(tmp_path: Path, model: ModelServerHandle,
           site: SearchServiceHandle) -> Iterator[ServerProcess]:
    config = {**provider_config(model), "web": {
        "fetch_allow": ["127.0.0.2/32"], "fetch_timeout_s": 30,
        "search": {"kind": "searxng", "url": site.url}}}
    with ServerProcess(tmp_path / "server", config=config) as proc:
        yield proc


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"calls": [{"name": name, "arguments": arguments}]}


def _session(server: ServerProcess, worker: WorkerProcess, prompt: str, policy: str) -> str:
    wd = Path(worker.workdir("web"))
    wd.mkdir(parents=True, exist_ok=True)
    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": str(wd), "prompt": prompt,
        "policy": policy})
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def test_a_prompt_injected_fetch_of_the_servers_api_is_refused_and_the_web_is_read(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess,
        site: SearchServiceHandle) -> None:
    api = f"{server.url}/api/sessions"
    model.set_script({"model": "scripted-1", "steps": [
        {"match": {"user": "read the docs"}, "reply": _call("web_fetch", url=api)},
        {"match": {"tool": "web_fetch", "tool_output": "refused:"},
         "reply": _call("web_fetch", url=f"{site.url}/page", prompt="the title")},
        {"match": {"tool": "web_fetch", "tool_output": "# Codey test page"},
         "reply": _call("web_search", query="codey hooks")},
        {"match": {"tool": "web_search", "tool_output": "Result 1 for codey hooks"},
         "reply": {"text": "Read and searched."}},
        END]})
    sid = _session(server, worker, "read the docs", "full-auto")
    s = wait_for(server, sid, idle, timeout=60, what="the turn to end")
    assert s["items"][-1]["text"] == "Read and searched."
    injected, page, found = tools(s)
    assert injected["status"] == "rejected", injected
    assert injected["result"].startswith("refused: 127.0.0.1 is a loopback address")
    assert page["status"] == "done" and page["path"] == f"{site.url}/page"
    assert "You asked: the title" in page["result"]
    assert "Hello from the [docs](https://example.org/docs)." in page["result"]
    assert "script text" not in page["result"]
    assert found["status"] == "done"
    assert "https://example.org/codey hooks/1" in found["result"]
    assert [q["q"] for q in site.queries()] == ["codey hooks"]
    assert not s["approvals"], "full-auto asks for no fetch"


def test_under_suggest_a_fetch_asks_until_its_host_is_approved_for_the_session(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess,
        site: SearchServiceHandle) -> None:
    model.set_script({"model": "scripted-1", "steps": [
        # a literal loopback address: refused at once, no approval asked for a fetch that
        # could not happen
        {"match": {"user": "fetch twice"},
         "reply": _call("web_fetch", url=f"{server.url}/api/sessions")},
        {"match": {"tool": "web_fetch", "tool_output": "refused:"},
         "reply": _call("web_fetch", url=f"{site.url}/page")},
        {"match": {"tool": "web_fetch", "tool_output": "# Codey test page"},
         "reply": _call("web_fetch", url=f"{site.url}/text")},
        {"match": {"tool": "web_fetch", "tool_output": "plain text here"},
         "reply": {"text": "Fetched both."}},
        END]})
    sid = _session(server, worker, "fetch twice", "suggest")
    s = wait_for(server, sid, lambda s: any(a["status"] == "pending"
                                            for a in s["approvals"].values()),
                 timeout=60, what="the fetch's approval")
    [approval] = s["approvals"].values()
    assert approval["kind"] == "web" and approval["path"] == f"{site.url}/page"
    assert approval["command"] == [FETCH_MARK, "127.0.0.2"]
    assert site_requests(site) == 0, "nothing is fetched before the user says so"
    r = server.http.post(f"/api/sessions/{sid}/approvals/{approval['approval_id']}",
                         json={"decision": "approve_for_session", "message": ""})
    assert r.status_code == 200, r.text
    s = wait_for(server, sid, idle, timeout=60, what="the turn to end")
    assert s["items"][-1]["text"] == "Fetched both."
    assert len(s["approvals"]) == 1, "the same host is not asked about again"
    assert [t["status"] for t in tools(s)] == ["rejected", "done", "done"]
    assert tools(s)[0]["result"].startswith("refused: 127.0.0.1 is a loopback address")
    assert s["approved_prefixes"] == [[FETCH_MARK, "127.0.0.2"]]
    assert site_requests(site) == 2


def site_requests(site: SearchServiceHandle) -> int:
    """Requests the site logged (its access log on stderr), the test's own aside."""
    return sum(1 for line in site.process.read_log().splitlines()
               if '"GET /page' in line or '"GET /text' in line)


def test_settings_tools_round_trip_and_take_effect(
        model: ModelServerHandle, server: ServerProcess, worker: WorkerProcess,
        site: SearchServiceHandle) -> None:
    """Settings → Tools: the web tools set from the browser's route, over config.json; the
    Brave key kept (0600) and never sent back; a listed domain is fetched without asking, and
    searches go to the backend set there, with its key."""
    r = server.http.get("/api/web-tools")
    assert r.status_code == 200 and r.json()["source"] == "config.json", r.text
    assert r.json()["editable"] is True
    body = {"fetch_allow": ["127.0.0.2/32"], "fetch_domains": ["127.0.0.2"],
            "search_kind": "brave", "search_url": site.url, "search_key": "brave-test-key"}
    r = server.http.put("/api/web-tools", json=body)
    assert r.status_code == 200, r.text
    info = r.json()
    assert (info["source"], info["search_kind"], info["search_key_stored"],
            info["search_key_set"], info["fetch_domains"]) == (
        "settings", "brave", True, True, ["127.0.0.2"])
    assert "brave-test-key" not in r.text
    assert "brave-test-key" not in server.http.get("/api/web-tools").text
    kept = server.data_dir / "web_tools.json"
    assert kept.stat().st_mode & 0o777 == 0o600
    # the key is kept when not sent again; what does not read is refused
    r = server.http.put("/api/web-tools", json={**body, "search_key": None})
    assert r.status_code == 200 and r.json()["search_key_stored"] is True, r.text
    for bad in ({"fetch_allow": ["not-a-network"]}, {"fetch_domains": ["two words"]},
                {"search_kind": "searxng", "search_url": "ftp://x"},
                {"search_key": "with space"}, {"nope": 1}):
        r = server.http.put("/api/web-tools", json={**body, **bad})
        assert r.status_code == 400, (bad, r.text)

    model.set_script({"model": "scripted-1", "steps": [
        {"match": {"user": "look it up"}, "reply": _call("web_fetch", url=f"{site.url}/page")},
        {"match": {"tool": "web_fetch", "tool_output": "# Codey test page"},
         "reply": _call("web_search", query="codey settings")},
        {"match": {"tool": "web_search", "tool_output": "codey settings"},
         "reply": {"text": "Looked it up."}},
        END]})
    sid = _session(server, worker, "look it up", "suggest")
    s = wait_for(server, sid, lambda s: any(a["status"] == "pending"
                                            for a in s["approvals"].values()),
                 timeout=60, what="the search's approval")
    [approval] = s["approvals"].values()  # the fetch of a listed domain asked nothing
    assert approval["command"][0] == "\0web_search"
    r = server.http.post(f"/api/sessions/{sid}/approvals/{approval['approval_id']}",
                         json={"decision": "approve", "message": ""})
    assert r.status_code == 200, r.text
    s = wait_for(server, sid, idle, timeout=60, what="the turn to end")
    assert s["items"][-1]["text"] == "Looked it up."
    assert [t["status"] for t in tools(s)] == ["done", "done"]
    assert [(q["api"], q["q"], q["token"]) for q in site.queries()] == [
        ("brave", "codey settings", "brave-test-key")]
