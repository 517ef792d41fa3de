"""The browser's pure parts of a session's processes, run by node: the live tails kept beside
the store (``web/tails.js``: whole on a reset, appended otherwise, the newest
``PROCESS_TAIL_KEPT`` characters, never half a surrogate pair) and what a dashboard card says
of the processes a session still runs (``web/views/common.js``).

``e2e/test_process_live.py`` shows both on the page."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.state import PROCESS_TAIL_KEPT

WEB = Path(__file__).resolve().parents[4] / "web"

_NODE = """
import { readFileSync } from "node:fs";
const [tailsUrl, commonUrl] = process.argv.slice(1);
const request = readFileSync(0, "utf8");  // on stdin: it can be larger than an argument
const { Tails, keepTail } = await import(tailsUrl);
const { liveProcesses, processesWords } = await import(commonUrl);
const { frames, sessions, words, keep } = JSON.parse(request);
const tails = new Tails();
const seen = [];
tails.subscribe((ids) => seen.push(ids));
for (const frame of frames) tails.apply(frame);
const out = {
  tails: Object.fromEntries([...new Set(frames.flatMap((f) => f.tails.map((t) => t.process_id)))]
    .map((id) => [id, tails.get(id)])),
  seen,
  live: sessions.map(liveProcesses),
  words: words.map(processesWords),
  keep: keep.map(keepTail),
};
tails.prune("s1", ["p2"]);
out.pruned = [tails.get("p1"), tails.get("p2") !== null, tails.get("q1") !== null];
console.log(JSON.stringify(out));
"""


def run(**request: Any) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: this test runs web/tails.js under Node.js "
                    "(Debian's nodejs; ./scripts/test installs it)", pytrace=False)
    request = {"frames": [], "sessions": [], "words": [], "keep": [], **request}
    out = subprocess.run([node, "--input-type=module", "-e", _NODE,
                          (WEB / "tails.js").as_uri(), (WEB / "views" / "common.js").as_uri()],
                         input=json.dumps(request), capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def tail(pid: str, text: str, reset: bool = False, session: str = "s1") -> dict[str, Any]:
    return {"session_id": session, "process_id": pid, "text": text, "reset": reset}


def test_tails_append_reset_and_keep_the_newest_part() -> None:
    big = "x" * PROCESS_TAIL_KEPT
    got = run(frames=[
        {"tails": [tail("p1", "a\n", True), tail("p2", "first\n")]},  # p2: none yet, whole
        {"tails": [tail("p1", "b\n")]},
        {"tails": [tail("p2", big)]},
        {"tails": [tail("p3", "old", True)]},
        {"tails": [tail("p3", "new\n", True)]},
        {"tails": [tail("q1", "other", True, session="s2")]},
    ])
    assert got["tails"]["p1"] == {"session_id": "s1", "text": "a\nb\n", "cut": False}
    assert got["tails"]["p2"] == {"session_id": "s1", "text": big, "cut": True}
    assert got["tails"]["p3"]["text"] == "new\n"
    assert got["seen"] == [["p1", "p2"], ["p1"], ["p2"], ["p3"], ["p3"], ["q1"]]
    # a session's tails of processes it no longer lists go; another session's stay
    assert got["pruned"] == [None, True, True]


def test_a_tail_is_never_cut_inside_a_surrogate_pair() -> None:
    # two UTF-16 units each, and one after them: the newest PROCESS_TAIL_KEPT units start
    # with the second half of a pair, which goes too
    text = "🙂" * PROCESS_TAIL_KEPT + "b"
    (kept, cut), (short, short_cut) = run(keep=[text, "ok"])["keep"]
    units = len(kept.encode("utf-16-le")) // 2
    assert cut and units == PROCESS_TAIL_KEPT - 1 and kept == "🙂" * (units // 2) + "b"
    assert (short, short_cut) == ("ok", False)


def test_a_card_counts_the_processes_that_may_still_run() -> None:
    def session(*statuses: str) -> dict[str, Any]:
        return {"processes": [{"status": s} for s in statuses]}

    got = run(sessions=[session(), session("running"), session("running", "stopping", "ended",
                                                                "gone"), {}],
              words=[0, 1, 2, 16])
    assert got["live"] == [0, 1, 2, 0]
    assert got["words"] == ["", "1 process running", "2 processes running",
                            "16 processes running"]
