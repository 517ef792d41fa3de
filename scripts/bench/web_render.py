"""Benchmark the web client in Chromium: (a) JS fold throughput, (b) rendering a big session.

    uv run python scripts/bench/web_render.py            # 100k events, 10k items
    uv run python scripts/bench/web_render.py --events 20000 --items 2000

(a) folds N recorded envelopes (encoded by codey_protocol, a realistic mix of item appends and
streamed deltas over 20 sessions) with ``web/store.js`` and prints events/s (goal ≥ 10,000/s).
(b) injects a state with one session of M items into the app and times opening that session
(route → DOM built → layout → next frame), goal ≤ 500 ms.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import statistics
import threading
from pathlib import Path
from typing import Any

import msgspec
from playwright.sync_api import sync_playwright

from codey_protocol import encode
from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.features import apply

WEB = Path(__file__).resolve().parents[2] / "web"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
FOLD_GOAL = 10_000
RENDER_GOAL_MS = 500.0


class _Gen:
    def __init__(self) -> None:
        self.envelopes: list[ev.Envelope] = []
        self.ts = 1_700_000_000.0

    def add(self, sid: str | None, event: Any) -> None:
        self.ts += 0.01
        self.envelopes.append(ev.Envelope(seq=len(self.envelopes) + 1, ts=self.ts,
                                          session_id=sid, event=event))


def _turn(g: _Gen, sid: str, k: int, deltas: int) -> None:
    """About 2 * deltas + 8 events: a prompt, a streamed answer, a command with output."""
    g.add(sid, ev.SessionStatusChanged(status="running"))
    g.add(sid, ev.SessionItemAppended(item=ev.UserMessage(id=f"{sid}u{k}", ts=g.ts,
                                                          text=f"step {k}: fix the tests")))
    mid = f"{sid}m{k}"
    g.add(sid, ev.SessionItemAppended(item=ev.AssistantMessage(id=mid, ts=g.ts, streaming=True)))
    for i in range(deltas):
        g.add(sid, ev.SessionItemUpdated(item_id=mid, text_delta=f"word{i} **bold** `code` "))
    g.add(sid, ev.SessionItemUpdated(item_id=mid, streaming=False))
    tid = f"{sid}t{k}"
    argv = ["pytest", "-q", f"tests/test_{k}.py"]
    g.add(sid, ev.SessionItemAppended(item=ev.ToolCall(
        id=tid, ts=g.ts, call_id=f"c{k}", name="shell", arguments=json.dumps({"command": argv}),
        command=argv, status="running")))
    for i in range(deltas):
        g.add(sid, ev.SessionItemUpdated(item_id=tid, output_delta=f"\x1b[32m.\x1b[0m line {i}\n"))
    g.add(sid, ev.SessionItemUpdated(item_id=tid, status="done", exit_code=0, result="ok"))
    g.add(sid, ev.TokenUsageRecorded(input_tokens=100, output_tokens=50, total_tokens=150))
    g.add(sid, ev.SessionStatusChanged(status="idle"))


def fold_log(n_events: int, sessions: int = 20) -> list[ev.Envelope]:
    g = _Gen()
    g.add(None, ev.WorkerPaired(worker_id="w1", request_id="r1", hostname="bench", os="Linux",
                                python_version="3.11", worker_version="0", roots=["/w"],
                                public_key="k"))
    for s in range(sessions):
        g.add(f"s{s}", ev.SessionCreated(title=f"Session {s}", worker_id="w1", workdir="/w",
                                         provider="p", model="m"))
    k = 0
    while len(g.envelopes) < n_events:
        for s in range(sessions):
            _turn(g, f"s{s}", k, deltas=20)
        k += 1
    return g.envelopes[:n_events]


def big_session_state(n_items: int) -> dict[str, Any]:
    """A folded state with session "big" holding ``n_items`` items of every common kind."""
    g = _Gen()
    g.add(None, ev.WorkerPaired(worker_id="w1", request_id="r1", hostname="bench", os="Linux",
                                python_version="3.11", worker_version="0", roots=["/w"],
                                public_key="k"))
    g.add(None, ev.WorkerConnected(worker_id="w1", hostname="bench", os="Linux",
                                   worker_version="0"))
    g.add("big", ev.SessionCreated(title="Big session", worker_id="w1", workdir="/w",
                                   provider="p", model="m"))
    diff = "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n-a = 1\n+a = 2\n b = 3\n"
    for i in range(n_items):
        kind = i % 5
        if kind == 0:
            item: Any = ev.UserMessage(id=f"i{i}", ts=g.ts, text=f"please do step {i}")
        elif kind == 1:
            item = ev.AssistantMessage(id=f"i{i}", ts=g.ts, text=(
                f"Done with **step {i}**.\n\n- read `a.py`\n- edit it\n\n```py\nx = {i}\n```"))
        elif kind == 2:
            item = ev.ToolCall(id=f"i{i}", ts=g.ts, call_id=f"c{i}", name="shell",
                               arguments="{}", command=["ls", "-la"], status="done",
                               exit_code=0, output="\x1b[34mtotal 8\x1b[0m\nfile.py\n" * 5)
        elif kind == 3:
            item = ev.ToolCall(id=f"i{i}", ts=g.ts, call_id=f"c{i}", name="apply_patch",
                               arguments="{}", status="done", diff=diff)
        else:
            item = ev.Reasoning(id=f"i{i}", ts=g.ts, text=f"thinking about {i}")
        g.add("big", ev.SessionItemAppended(item=item))
    state = State()
    for env in g.envelopes:
        state = apply(state, env)
    return msgspec.to_builtins(state)  # type: ignore[no-any-return]


def _serve(extra: dict[str, bytes]) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            body = extra.get(self.path)
            if body is None:
                super().do_GET()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(WEB)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


_FOLD_JS = """async (runs) => {
  const m = await import('/store.js');
  const text = await (await fetch('/__bench/events.json')).text();
  const rates = [];
  for (let r = 0; r < runs; r++) {
    const envs = JSON.parse(text);  // fresh objects: the fold mutates appended items
    const state = m.emptyState();
    const t0 = performance.now();
    for (let i = 0; i < envs.length; i++) m.apply(state, envs[i]);
    const dt = performance.now() - t0;
    rates.push(envs.length / (dt / 1000));
  }
  return rates;
}"""

_RENDER_JS = """async () => {
  const app = window.__codey.app;
  const snap = await (await fetch('/__bench/state.json')).json();
  window.__codey.store.replace(snap.seq, snap);
  history.replaceState(null, '', '#/');
  app.route();
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const t0 = performance.now();
  history.replaceState(null, '', '#/session/big');
  app.route();
  document.body.getBoundingClientRect();  // force style and layout
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));  // and a paint
  const ms = performance.now() - t0;
  return { ms, items: document.querySelectorAll('[data-testid=item]').length };
}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    envelopes = fold_log(args.events)
    events_json = ("[" + ",".join(encode(e).decode() for e in envelopes) + "]").encode()
    state_json = json.dumps(big_session_state(args.items)).encode()
    server, base = _serve({"/__bench/events.json": events_json,
                           "/__bench/state.json": state_json})
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(base + "/index.html?offline#/")
            page.wait_for_function("window.__codey !== undefined")
            rates = page.evaluate(_FOLD_JS, args.runs)
            renders = [page.evaluate(_RENDER_JS) for _ in range(args.runs)]
            browser.close()
    finally:
        server.shutdown()
        server.server_close()

    fold = statistics.median(rates)
    times = [r["ms"] for r in renders]
    render = statistics.median(times)
    print(f"JS fold: {len(envelopes):,} events, median {fold:,.0f} events/s "
          f"(runs: {', '.join(f'{r:,.0f}' for r in rates)}) — goal ≥ {FOLD_GOAL:,}/s "
          f"{'OK' if fold >= FOLD_GOAL else 'MISSED'}")
    print(f"Render: session of {args.items:,} items ({renders[0]['items']} built), median "
          f"{render:.1f} ms (runs: {', '.join(f'{t:.1f}' for t in times)}) — "
          f"goal ≤ {RENDER_GOAL_MS:.0f} ms {'OK' if render <= RENDER_GOAL_MS else 'MISSED'}")


if __name__ == "__main__":
    main()
