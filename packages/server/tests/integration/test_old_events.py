"""A real server on a log an older release wrote (the rows ``745192a`` stored, in its shape):
the session's export is those rows byte for byte, and a browser gets them upcast — complete,
a command of then with ``sandbox: none``."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from codey_protocol.upcasting import version_of
from codey_server.eventlog.contract import OLD_ROWS
from codey_server.eventlog.sqlite import _SCHEMA
from codey_testkit.stack import ServerProcess
from codey_testkit.wsclient import BrowserSocket

#: the command's end and the model's answer, as 745192a stored them: the turn is over
ROWS = [*OLD_ROWS,
        b'{"seq":5,"ts":1795876826.25,"session_id":"s1","event":{"type":"action_finished",'
        b'"action_id":"a1","outcome":"result"}}',
        b'{"seq":6,"ts":1795876827.5,"session_id":"s1","event":{"type":"session_item_appended",'
        b'"item":{"kind":"assistant_message","id":"i3","ts":1795876827.5,"text":"all green",'
        b'"streaming":false,"refusal":false,"partial":false}}}']


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    conn = sqlite3.connect(data / "events.db")
    conn.executescript(_SCHEMA)
    for raw in ROWS:
        env = json.loads(raw)
        conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                     (env["seq"], env["ts"], env["session_id"], env["event"]["type"], raw))
    conn.commit()
    conn.close()
    proc = ServerProcess(data)
    try:
        yield proc.start()
    finally:
        proc.stop()


def test_the_export_is_the_stored_events_and_a_browser_gets_them_upcast(
        server: ServerProcess) -> None:
    r = server.http.get("/api/sessions/s1/log")
    assert r.status_code == 200
    assert r.content == b"".join(raw + b"\n" for raw in ROWS if b'"session_id":"s1"' in raw)
    assert b"workspace-write" not in r.content and b'"version"' not in r.content

    browser = BrowserSocket(server, after_seq=1)  # events, not a snapshot
    browser.until_seq(len(ROWS))
    browser.close()
    sent = {env["seq"]: env for env in browser.envelopes}
    action = sent[4]["event"]["action"]
    assert (action["sandbox"], action["network"]) == ("none", True)
    assert sent[2]["event"]["sandbox"] == "none" and sent[2]["event"]["origin"] == "unknown"
    assert all(env["version"] == version_of(env["event"]["type"]) for env in sent.values())

    state = server.http.get("/api/state/bootstrap").json()["state"]
    session = state["sessions"]["s1"]
    # made before the sandbox: it runs in one from now on
    assert (session["sandbox"], session["network"]) == ("workspace-write", False)
    assert session["pending_actions"] == {}
