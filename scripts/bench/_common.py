"""Shared helpers for the benchmark scripts in ``scripts/bench/`` (not a test module).

- :func:`figure` prints one measured figure next to its goal, with ``ok``/``MISSED``;
- :func:`session_events` / :func:`fill_log` / :func:`fill_log_fast` build an event log of
  realistic events (a paired worker, sessions, streamed assistant text and command output);
- :func:`start_server_and_worker` gives a running ``codey-server`` with a paired, connected
  ``codey-worker`` (temp homes, port 0);
- :class:`RssSampler` samples a process's ``VmRSS`` in a thread;
- run as a script, this file is the *baseline* peer: ``python _common.py echo`` (a bare
  ``websockets`` echo server; ``echo-uvloop``: the same on uvloop) or ``python _common.py send
  FRAMES`` (a bare ``websockets`` server that answers the first message with the recorded
  frames in ``FRAMES``). They print ``listening on ws://127.0.0.1:PORT`` and run in their own
  process, like the real server.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import statistics
import struct
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from codey_protocol import events as ev
from codey_protocol.codec import encode
from codey_testkit.procs import ManagedProcess
from codey_testkit.stack import ServerProcess

# The benches measure processes as users start them: not forked from the test kit's zygote
# (codey_testkit.zygote), whose children share its imports (their RSS counts the SDKs and
# the worker's modules too) and its frozen heap (less for the GC to walk).
os.environ.setdefault("CODEY_TEST_FORK", "0")

HERE = Path(__file__).resolve().parent
PAIR_LINE = r"^Open (\S+)/#/pair/([BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}) to link"
LISTEN_LINE = r"listening on (ws://\S+)"

Pair = tuple[str | None, ev.Event]


# ---------------------------------------------------------------------------------------------
# printing


def figure(label: str, value: float, unit: str, goal: str, ok: bool | None) -> None:
    """Print ``label: value unit   goal …   ok|MISSED`` (``ok=None``: no verdict)."""
    verdict = "" if ok is None else ("ok" if ok else "MISSED")
    target = f"goal {goal:<10}" if goal else ""
    print(f"  {label:<44} {value:>10,.3f} {unit:<6} {target} {verdict}".rstrip(), flush=True)


def info(label: str, text: str) -> None:
    print(f"  {label:<44} {text}", flush=True)


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0..100), nearest-rank on the sorted values."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered)) - 1))
    return ordered[rank]


def median(values: list[float]) -> float:
    return statistics.median(values)


# ---------------------------------------------------------------------------------------------
# realistic events


def session_events(n: int, sessions: int = 20, deltas: int = 20) -> Iterator[Pair]:
    """Exactly ``n`` ``(session_id, event)`` pairs the reducers accept, as a live server writes.

    A paired worker, ``sessions`` sessions, then turns round-robin over the sessions: a user
    prompt, an assistant message streamed in ``deltas`` text deltas, a ``shell`` tool call whose
    output streams in ``deltas`` chunks, its result, token usage, status changes. Only whole
    turns are emitted (every session ends ``idle``, so a server starting on the log has nothing
    to resume); the remainder is padded with token-usage events.
    """
    ts = 1_700_000_000.0
    emitted = 0

    def pad() -> Iterator[Pair]:
        for _ in range(n - emitted):
            yield "s0", ev.TokenUsageRecorded(input_tokens=1, output_tokens=1, total_tokens=2)

    head: list[Pair] = [(None, ev.WorkerPaired(
        worker_id="w_bench", request_id="r_bench", hostname="bench", os="Linux",
        python_version="3.11", worker_version="0", roots=["/work"], public_key="k"))]
    head += [(f"s{s}", ev.SessionCreated(title=f"Session {s}", worker_id="w_bench",
                                         workdir="/work/p", provider="p", model="m"))
             for s in range(sessions)]
    if len(head) > n:
        yield from head[:n]
        return
    yield from head
    emitted = len(head)
    per_turn = 2 * deltas + 8
    k = 0
    while True:
        for s in range(sessions):
            if emitted + per_turn > n:
                yield from pad()
                return
            sid = f"s{s}"
            ts += 1.0
            mid, tid = f"{sid}m{k}", f"{sid}t{k}"
            argv = ["pytest", "-q", f"tests/test_{k}.py"]
            yield sid, ev.SessionStatusChanged(status="running")
            yield sid, ev.SessionItemAppended(item=ev.UserMessage(
                id=f"{sid}u{k}", ts=ts, text=f"step {k}: make the tests in test_{k}.py pass"))
            yield sid, ev.SessionItemAppended(item=ev.AssistantMessage(id=mid, ts=ts,
                                                                       streaming=True))
            for i in range(deltas):
                yield sid, ev.SessionItemUpdated(item_id=mid, text_delta=f"word{i} `code` ")
            yield sid, ev.SessionItemUpdated(item_id=mid, streaming=False)
            yield sid, ev.SessionItemAppended(item=ev.ToolCall(
                id=tid, ts=ts, call_id=f"c{k}", name="shell",
                arguments=json.dumps({"command": argv}), command=argv, status="running"))
            for i in range(deltas):
                yield sid, ev.SessionItemUpdated(item_id=tid,
                                                 output_delta=f"tests/test_{k}.py::t{i} PASSED\n")
            yield sid, ev.SessionItemUpdated(item_id=tid, status="done", exit_code=0,
                                             result="exit code 0")
            yield sid, ev.TokenUsageRecorded(input_tokens=1200, output_tokens=80,
                                             total_tokens=1280)
            yield sid, ev.SessionStatusChanged(status="idle")
            emitted += per_turn
        k += 1


def batched(pairs: Iterator[Pair], size: int) -> Iterator[list[Pair]]:
    batch: list[Pair] = []
    for pair in pairs:
        batch.append(pair)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


async def fill_log(db: Path, n: int, batch: int = 10_000) -> None:
    """Append ``n`` realistic events through :class:`SqliteEventLog`, ``batch`` per append."""
    from codey_server.eventlog import SqliteEventLog

    log = SqliteEventLog(db)
    await log.open()
    try:
        for group in batched(session_events(n), batch):
            await log.append(group)
    finally:
        await log.close()
    mark_current(db)


def fill_log_fast(db: Path, n: int, batch: int = 20_000) -> None:
    """Write ``n`` realistic events straight into the log's table (same schema and blobs as
    :class:`SqliteEventLog`, which creates the schema first), without fsyncs."""
    from codey_server.eventlog import SqliteEventLog
    from codey_server.eventlog.base import _tag

    async def create() -> None:
        log = SqliteEventLog(db)
        await log.open()
        await log.close()

    asyncio.run(create())
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    seq = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
    ts = time.time()
    for group in batched(session_events(n), batch):
        rows = []
        for session_id, event in group:
            seq += 1
            env = ev.Envelope(seq=seq, ts=ts, session_id=session_id, event=event)
            rows.append((seq, ts, session_id, _tag(event), encode(env)))
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO events (seq, ts, session_id, type, envelope)"
                         " VALUES (?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    mark_current(db)


def mark_current(db: Path) -> None:
    """A log written here is this release's data: marked so, the server opens it as it is
    (an unmarked one it would take for codey 0.1.0's, and back up and migrate first)."""
    from codey_server.upgrades.data import mark_current as mark

    mark(db.parent, db.name)


# ---------------------------------------------------------------------------------------------
# processes


class RssSampler:
    """Samples ``/proc/PID/status`` VmRSS (KiB) every ``interval`` s in a daemon thread.

    ``with RssSampler(pid) as rss: ...`` — then ``rss.start_kib``, ``rss.peak_kib``,
    ``rss.growth_mib`` (peak minus the first sample).
    """

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def read(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.read())
            except OSError:
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self.samples.append(self.read())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(self.read())

    @property
    def start_kib(self) -> int:
        return self.samples[0]

    @property
    def peak_kib(self) -> int:
        return max(self.samples)

    @property
    def growth_mib(self) -> float:
        return (self.peak_kib - self.start_kib) / 1024


@contextmanager
def baseline_peer(mode: str, log_dir: Path, *args: str) -> Iterator[str]:
    """Run this file as a bare websockets peer in its own process; yield its ws URL."""
    with ManagedProcess(f"baseline-{mode}", log_dir=log_dir) as proc:
        proc.start([sys.executable, str(Path(__file__).resolve()), mode, *args])
        yield proc.wait_for_url(LISTEN_LINE, timeout=20)


@contextmanager
def start_server_and_worker(root: Path, worker_env: dict[str, str] | None = None,
                            ) -> Iterator[tuple[ServerProcess, ManagedProcess, str, Path]]:
    """A server on port 0 and a paired, connected worker, all under ``root``.

    Yields ``(server, worker, worker_id, workdir)``; ``workdir`` is inside the worker's
    allowed roots. ``worker_env`` is added to the worker's environment. Both processes are
    stopped on exit.
    """
    home, work, logs = root / "home", root / "work", root / "logs"
    for path in (home, work, logs):
        path.mkdir(parents=True, exist_ok=True)
    (home / "worker-config.json").write_text(json.dumps({"allowed_roots": [str(work)]}))
    # the bench drives actions directly (POST /api/workers/{id}/actions), off by default
    with ServerProcess(root / "server", log_dir=logs, extra_args=["--direct-actions"]) as server, \
            ManagedProcess("worker", log_dir=logs) as worker:
        worker.start([sys.executable, "-m", "codey_worker.cli", "--server", server.url],
                     env={"CODEY_HOME": str(home), **(worker_env or {})})
        code = worker.wait_for_line(PAIR_LINE, timeout=30).group(2)
        pending = [p for p in server.http.get("/api/pairing/requests").json()
                   if p["code"] == code]
        r = server.http.post(f"/api/pairing/requests/{pending[0]['request_id']}/approve",
                             json={"code": code})
        r.raise_for_status()
        worker_id: str = r.json()["worker_id"]
        worker.wait_for_line(r"^connected to ", timeout=30)
        deadline = time.monotonic() + 15
        while True:  # "connected" is printed on Welcome; the registry attaches after Hello
            state = server.http.get("/api/state/bootstrap").json()["state"]
            if state["workers"].get(worker_id, {}).get("connected"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the worker never showed as connected")
            time.sleep(0.05)
        yield server, worker, worker_id, work


# ---------------------------------------------------------------------------------------------
# baseline peers (run as a script)


def write_frames(path: Path, frames: list[bytes]) -> None:
    with open(path, "wb") as f:
        for frame in frames:
            f.write(struct.pack("<I", len(frame)))
            f.write(frame)


def read_frames(path: Path) -> list[str]:
    data = path.read_bytes()
    frames, pos = [], 0
    while pos < len(data):
        (size,) = struct.unpack_from("<I", data, pos)
        frames.append(data[pos + 4: pos + 4 + size].decode())
        pos += 4 + size
    return frames


async def _serve_peer(mode: str, args: list[str]) -> None:
    from websockets.asyncio.server import ServerConnection, serve

    frames = read_frames(Path(args[0])) if mode == "send" else []

    async def handler(ws: ServerConnection) -> None:
        if mode.startswith("echo"):
            async for msg in ws:
                await ws.send(msg)
        else:
            await ws.recv()  # the subscribe
            for frame in frames:  # sent as text, like the server's event frames
                await ws.send(frame)
            await ws.wait_closed()

    # Default compression (permessage-deflate offered), like uvicorn's sockets; the client
    # decides (the read_file baseline declines it, as the worker socket does).
    async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"listening on ws://127.0.0.1:{port}", flush=True)
        await asyncio.Future()


def _main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("echo", "echo-uvloop", "send"):
        print(__doc__)
        return 2
    if argv[0] == "echo-uvloop":
        import uvloop

        uvloop.run(_serve_peer(argv[0], argv[1:]))
        return 0
    asyncio.run(_serve_peer(argv[0], argv[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
