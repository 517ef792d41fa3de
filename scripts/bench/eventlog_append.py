"""Benchmark: durable group-committed appends vs raw sqlite3 batched inserts.

Appends ``--events`` events from ``--tasks`` concurrent tasks (one event per append call, the
hardest case for per-append overhead) to a fresh :class:`SqliteEventLog`, then inserts the same
rows with plain ``sqlite3`` ``executemany`` in transactions of ``--tasks`` rows each — the
largest group a log with that many appenders can form — with the same pragmas (WAL,
``synchronous=FULL``). Prints both throughputs and their ratio (the log's over raw), and the
time to read every event back with ``read_raw``.

Example::

    uv run python scripts/bench/eventlog_append.py --events 100000 --tasks 100
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from codey_protocol.codec import encode
from codey_protocol.events import Envelope, SessionItemUpdated
from codey_server.eventlog import SqliteEventLog


def _event(i: int) -> SessionItemUpdated:
    return SessionItemUpdated(item_id=f"item-{i % 97}", output_delta=f"line {i} of output\n")


async def bench_log(path: Path, events: int, tasks: int,
                    expected: bool = False) -> tuple[float, int, float, float]:
    """``expected``: each append carries the position it was decided on, as the engine's
    do (the log's last seq then; each task writes its own session, so none is refused)."""
    log = SqliteEventLog(path)
    await log.open()
    per_task = events // tasks

    async def appender(t: int) -> None:
        session = f"s{t}"
        for i in range(per_task):
            await log.append([(session, _event(i))],
                             expected=log.last_seq if expected else None)

    start = time.perf_counter()
    await asyncio.gather(*(appender(t) for t in range(tasks)))
    elapsed = time.perf_counter() - start
    start = time.perf_counter()
    raw = await log.read_raw(0, events + 1)
    read_elapsed = time.perf_counter() - start
    assert len(raw) == per_task * tasks, len(raw)
    start = time.perf_counter()
    decoded = await log.read(0)
    decode_elapsed = time.perf_counter() - start
    assert [env.seq for env in decoded] == list(range(1, len(raw) + 1))
    commits = log.commits
    await log.close()
    return elapsed, commits, read_elapsed, decode_elapsed


def bench_raw(path: Path, events: int, batch: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE events (seq INTEGER PRIMARY KEY, ts REAL, session_id TEXT, type TEXT,"
        " envelope BLOB)"
    )
    conn.execute("CREATE INDEX idx_events_session_id ON events (session_id)")
    ts = time.time()
    rows = [
        (
            i + 1,
            ts,
            f"s{i % batch}",
            "session_item_updated",
            encode(Envelope(seq=i + 1, ts=ts, session_id=f"s{i % batch}", event=_event(i))),
        )
        for i in range(events)
    ]
    start = time.perf_counter()
    for lo in range(0, events, batch):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", rows[lo : lo + batch])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1, help="alternate log/raw runs N times")
    parser.add_argument("--dir", default=None, help="directory for the database files")
    args = parser.parse_args()
    n = args.events
    ratios = []
    for round_ in range(args.rounds):
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            log_s, commits, read_s, decode_s = asyncio.run(
                bench_log(Path(tmp) / "log.db", n, args.tasks)
            )
            raw_s = bench_raw(Path(tmp) / "raw.db", n, args.tasks)
        ratios.append(raw_s / log_s)
        print(f"round {round_ + 1}")
        print(f"  eventlog: {n} events in {log_s:.2f}s = {n / log_s:,.0f} ev/s ({commits} commits)")
        print(
            f"  raw     : {n} events in {raw_s:.2f}s = {n / raw_s:,.0f} ev/s"
            f" (batches of {args.tasks})"
        )
        print(f"  read_raw: {n} events in {read_s * 1000:.0f} ms")
        print(f"  read    : {n} events in {decode_s * 1000:.0f} ms (decoded to Envelope)")
        print(f"  ratio   : {raw_s / log_s:.2f}")
    print(
        f"ratio (median of {args.rounds}, eventlog throughput / raw): "
        f"{statistics.median(ratios):.2f}"
    )


if __name__ == "__main__":
    main()
