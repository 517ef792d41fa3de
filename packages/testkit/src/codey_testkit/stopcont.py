"""STOP/CONT rounds (issue 23): the replica that runs a session is paused with ``kill -STOP``
for longer than its lease, another replica takes the session over, and the paused one is
resumed with ``kill -CONT`` — still believing it runs the session. Fencing must keep it from
appending anything for the session after the take-over.

``scripts/stopcont.py`` runs many rounds; ``test_fencing.py`` runs one of each kind through
the same code. Everything is real: three codey-server replicas on one throwaway PostgreSQL,
the scripted model server, a paired codey-worker (linked to the second replica, which is
never paused; the session runs on the first or the third). Each round:

- ``stream``: the model streams a long answer slowly; the owner is paused mid-stream. The
  new owner marks the cut answer partial and calls the model again (a quick answer).
- ``command``: the model runs a command that marks a file, prints ``start``, sleeps, prints
  ``middle`` (while the owner is paused), sleeps, prints ``end``; the owner is paused after
  ``start`` showed. The new owner re-sends the action and carries the output on.

What a round checks, from the ``codey_events`` rows of the session (each row carries the
process that appended it, ``origin``) and from the state:

- **stale appends**: rows of the old owner stamped after the pause, or after the new owner's
  first row since the pause — must be none (``origin`` names the replica);
- the take-over time (pause → the lease row has another owner, with a higher epoch) — at
  most :data:`TAKE_OVER_GOAL_S`;
- the session finished (idle, the expected last answer), its last rows the new owner's;
- ``command``: the command ran once (its mark is in the file once), and the call's output
  is ``start``, ``middle``, ``end`` — each once, in order: nothing lost, nothing repeated;
- the old replica said in its log that it stopped the session's turn.
"""

from __future__ import annotations

import random
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from codey_protocol import codec
from codey_protocol import events as ev
from codey_testkit.model_handle import start_model_server
from codey_testkit.postgres import PostgresCluster
from codey_testkit.scenarios import provider_config, session
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import WaitTimedOut, wait_until

__all__ = ["KINDS", "PAUSE_S", "TAKE_OVER_GOAL_S", "Kind", "Round", "StopContCluster"]

Kind = Literal["stream", "command"]
#: the kinds of round, which the loop takes in turn
KINDS: tuple[Kind, ...] = ("stream", "command")

#: how long the owner stays paused: well past its 6 s lease (the issue paused for 15 s)
PAUSE_S = 15.0
#: a take-over must come within this many seconds of the pause
TAKE_OVER_GOAL_S = 10.0
#: the slow answer of a ``stream`` round: about 30 s at its pace, far longer than a pause
SLOW_TEXT = " ".join(f"word{n}" for n in range(600))
#: the replicas: the session runs on the first or the third; the worker is on the second
REPLICAS = ("r0", "r1", "r2")


@dataclass
class Round:
    number: int
    kind: Kind
    owner: str = ""
    new_owner: str = ""
    epochs: tuple[int, int] = (0, 0)
    took_over_s: float | None = None
    stale: list[int] = field(default_factory=list)  # seqs the old owner appended too late
    finished: bool = False
    finished_by_new_owner: bool = False
    old_stopped: bool = False  # the old replica logged that it stopped the session's turn
    runs: int | None = None  # command: how often its mark is in the file
    output: str | None = None  # command: the call's output
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        took = f"{self.took_over_s:.1f} s" if self.took_over_s is not None else "never"
        return (f"round {self.number:2d} {self.kind:7s} {self.owner}→{self.new_owner or '?'} "
                f"epoch {self.epochs[0]}→{self.epochs[1]}: take-over {took}, stale appends "
                f"{len(self.stale)}" + ("" if self.ok else f"; {'; '.join(self.problems)}"))


def _script(rounds: int) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for n in range(rounds):
        # "stream-1." is not inside "stream-10.": each round's prompt matches its own steps
        steps += [
            {"match": {"user": f"stream-{n}."}, "times": 1,
             "reply": {"text": SLOW_TEXT, "chunk_size": 8, "delay_ms": 50}},
            {"match": {"user": f"stream-{n}."}, "reply": {"text": f"Again, quickly {n}."}},
            {"match": {"user": f"command-{n}."}, "reply": {"calls": [{
                "name": "shell", "arguments": {"command": ["bash", "-c", _command(n)]}}]}},
            {"match": {"tool": "shell", "tool_output": f"end-{n}."},
             "reply": {"text": f"Ran it once {n}."}},
        ]
    steps.append({"match": {"any": True}, "reply": {"text": "unexpected"}})
    return {"model": "scripted-1", "steps": steps}


#: when a command round's ``end`` comes, in seconds after ``middle`` (2 s after ``start``;
#: the pause begins just after ``start``): after the resume, before the take-over, between
#: the two, about at the take-over — the command rounds take these in turn
END_AFTER_S = (18, 3, 11, 6)


def _command(n: int) -> str:
    end_after = END_AFTER_S[(n // 2) % len(END_AFTER_S)]
    # (in the workdir: the command runs in the worker's sandbox, which writes nowhere else)
    return (f"echo ran >> runs-{n}.txt; echo start-{n}.; sleep 2; echo middle-{n}.; "
            f"sleep {end_after}; echo end-{n}.")


class StopContCluster:
    """Three replicas, the model and a worker, for any number of rounds (see the module
    docstring). ``dsn``: an empty database to use (else a throwaway PostgreSQL is started).

    ``with StopContCluster(root, rounds=20) as c: c.round(0, "stream")``
    """

    def __init__(self, root: Path, *, rounds: int, dsn: str | None = None,
                 pause_s: float = PAUSE_S) -> None:
        self.root = Path(root)
        self.rounds = rounds
        self.dsn = dsn
        self.pause_s = pause_s
        self.replicas: dict[str, ServerProcess] = {}
        self.worker: WorkerProcess | None = None
        self.workdir = Path()
        self._stack = ExitStack()

    def __enter__(self) -> StopContCluster:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _start(self) -> None:
        if self.dsn is None:
            pg = self._stack.enter_context(PostgresCluster())
            self.dsn = pg.create_database("stopcont")
        model = self._stack.enter_context(start_model_server(_script(self.rounds),
                                                             self.root / "model"))
        for name in REPLICAS:
            replica = ServerProcess(self.root / name, config=provider_config(model),
                                    extra_args=["--database-url", self.dsn,
                                                "--replica-id", name])
            self.replicas[name] = replica
            self._stack.callback(replica.stop)
            self._stack.callback(replica.resume)  # (first: a paused process cannot stop)
            replica.start()
        self.worker = WorkerProcess(self.replicas["r1"], self.root / "worker").start()
        self._stack.callback(self.worker.stop)
        self.workdir = Path(self.worker.workdir("stopcont"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        for replica in self.replicas.values():
            _wait(lambda r=replica: _worker_seen(r, self.worker_id), 30,
                  "every replica to see the worker")

    @property
    def worker_id(self) -> str:
        assert self.worker is not None
        return self.worker.worker_id

    # a round ----------------------------------------------------------------------------

    def round(self, n: int, kind: Kind, *, rng: random.Random | None = None) -> Round:
        """Round ``n`` (each number once: the script has a prompt per round)."""
        rng = rng or random.Random(n)
        result = Round(n, kind, owner=("r0", "r2")[n % 2])
        owner = self.replicas[result.owner]
        watcher = self.replicas["r1"]  # never paused: the browser's view
        r = owner.http.post("/api/sessions", json={
            "worker_id": self.worker_id, "workdir": str(self.workdir),
            "prompt": f"{kind}-{n}.", "policy": "full-auto"})
        if r.status_code != 201:
            result.problems.append(f"the session was not created: {r.status_code} {r.text}")
            return result
        sid = str(r.json()["session_id"])
        lease = f"session:{sid}"
        _wait(lambda: self._lease(lease)[0] == result.owner, 20,
              f"{result.owner} to take the lease of {sid}")
        if kind == "stream":
            _wait(lambda: _streaming_text(session(watcher, sid)) >= 40, 30,
                  "the answer to stream")
            time.sleep(rng.uniform(0.0, 1.5))  # deliberate: a pause at a random point
        else:
            _wait(lambda: f"start-{n}." in _output(session(watcher, sid)), 30,
                  "the command's first output")
        result.epochs = (self._lease(lease)[1], 0)
        owner_log = len(owner.log_text())
        paused_at, paused_wall = time.monotonic(), time.time()
        owner.pause()
        try:
            import psycopg

            # (one connection: a poll every 50 ms; the new owner may finish the turn and
            # release the lease between two, but its epoch stays)
            with psycopg.connect(self.dsn or "", autocommit=True) as conn:
                while time.monotonic() - paused_at < self.pause_s:
                    row = conn.execute("SELECT owner, epoch FROM codey_leases WHERE name = %s",
                                       (lease,)).fetchone()
                    if result.took_over_s is None and row is not None \
                            and row[1] > result.epochs[0]:
                        result.took_over_s = time.monotonic() - paused_at
                        result.new_owner, result.epochs = row[0], (result.epochs[0], row[1])
                    time.sleep(0.05)
            if result.took_over_s is None:
                result.problems.append(f"nobody took the session over in {self.pause_s:.0f} s "
                                       f"(the database meanwhile: {self._activity()})")
        finally:
            owner.resume()
        if result.took_over_s is not None and result.took_over_s > TAKE_OVER_GOAL_S:
            result.problems.append(f"the take-over took {result.took_over_s:.1f} s")
        if result.epochs[1] and result.epochs[1] <= result.epochs[0]:
            result.problems.append(f"the epoch did not rise: {result.epochs}")
        last = f"Again, quickly {n}." if kind == "stream" else f"Ran it once {n}."
        try:
            _wait(lambda: _done(session(watcher, sid), last), 60, "the session to finish")
            result.finished = True
        except WaitTimedOut as err:
            result.problems.append(str(err))
        # the old replica, awake: it notices within a renewal, and must append nothing
        try:
            _wait(lambda: _says_stopped(owner.log_text()[owner_log:], sid), 15,
                  "the old replica to say it stopped the turn")
            result.old_stopped = True
        except WaitTimedOut:
            result.problems.append("the old replica never said it stopped the turn")
        # deliberate: a stale append would come from work the resumed replica still had in
        # flight, and nothing it shows marks the end of that work; a second is plenty for it
        time.sleep(1.0)
        self._check_rows(result, sid, paused_wall)
        if kind == "command":
            self._check_command(result, n, session(watcher, sid))
        else:
            self._check_stream(result, session(watcher, sid))
        return result

    def _lease(self, name: str) -> tuple[str, int]:
        """The lease's owner ("" when expired or not there) and epoch."""
        import psycopg

        with psycopg.connect(self.dsn or "") as conn:
            row = conn.execute("SELECT owner, epoch, expires > now() FROM codey_leases "
                               "WHERE name = %s", (name,)).fetchone()
        if row is None:
            return "", 0
        return (str(row[0]) if row[2] else ""), int(row[1])

    def _activity(self) -> str:
        """The database's sessions that wait or sit in a transaction (for a report)."""
        import psycopg

        with psycopg.connect(self.dsn or "") as conn:
            rows = conn.execute(
                "SELECT application_name, state, wait_event_type, wait_event, "
                "left(query, 80) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND (state <> 'idle' OR wait_event_type = 'Lock')"
            ).fetchall()
        return "; ".join(" ".join(str(c) for c in row) for row in rows) or "nothing waits"

    def _check_rows(self, result: Round, sid: str, paused_wall: float) -> None:
        import psycopg

        with psycopg.connect(self.dsn or "") as conn:
            found = conn.execute("SELECT seq, ts, origin, type, envelope FROM codey_events "
                                 "WHERE session_id = %s ORDER BY seq", (sid,)).fetchall()
        envelopes = {row[0]: codec.decode_envelope(bytes(row[4])) for row in found}
        # (origin: "<replica id>/<token of the process>")
        rows = [(seq, ts, (origin or "").split("/", 1)[0], kind)
                for seq, ts, origin, kind, _ in found]
        old, new = result.owner, result.new_owner
        # the old owner cannot append while paused, and the take-over came before the
        # resume: any row of it stamped after the pause is stale, as is any after the new
        # owner's first row since the pause
        since = [seq for seq, ts, replica, _ in rows if replica == new and ts >= paused_wall]
        taken = since[0] if since else None
        result.stale = [seq for seq, ts, replica, _ in rows if replica == old and (
            ts >= paused_wall or (taken is not None and seq > taken))]
        if result.stale:
            shown = "; ".join(f"{seq}: {envelopes[seq].event!r:.160}" for seq in result.stale[:5])
            result.problems.append(f"{len(result.stale)} stale appends (the new owner's first "
                                   f"row since the pause: {taken}): {shown}")
        statuses = [replica for _, _, replica, kind in rows if kind == "session_status_changed"]
        result.finished_by_new_owner = bool(statuses) and statuses[-1] == new
        if not result.finished_by_new_owner:
            result.problems.append(f"the session's last status came from "
                                   f"{statuses[-1] if statuses else 'nobody'}, not {new}")

    def _check_command(self, result: Round, n: int, s: dict[str, Any]) -> None:
        runs = self.workdir / f"runs-{n}.txt"
        result.runs = runs.read_text().split().count("ran") if runs.exists() else 0
        if result.runs != 1:
            result.problems.append(f"the command ran {result.runs} times")
        result.output = _output(s)
        marks = [line for line in result.output.splitlines() if line.endswith(f"-{n}.")]
        if marks != [f"start-{n}.", f"middle-{n}.", f"end-{n}."]:
            result.problems.append(f"the output lost or repeated something: {marks}")

    def _check_stream(self, result: Round, s: dict[str, Any]) -> None:
        answers = [i for i in s["items"] if i["kind"] == "assistant_message"]
        if len(answers) != 2 or not answers[0].get("partial") \
                or not SLOW_TEXT.startswith(answers[0]["text"]):
            result.problems.append(
                f"expected the cut answer marked partial, then the new one: "
                f"{[(a.get('partial'), a['text'][:40]) for a in answers]}")

    def export_session(self, sid: str) -> list[ev.Envelope]:
        """The session's events as stored (for a failing round's report)."""
        import psycopg

        with psycopg.connect(self.dsn or "") as conn:
            rows = conn.execute("SELECT envelope FROM codey_events WHERE session_id = %s "
                                "ORDER BY seq", (sid,)).fetchall()
        return [codec.decode_envelope(bytes(r[0])) for r in rows]


def _says_stopped(log: str, sid: str) -> bool:
    return f"session {sid}: stopped its turn here" in log or \
        f"session {sid}: its lease went to another replica" in log


def _worker_seen(server: ServerProcess, worker_id: str) -> bool:
    info = server.http.get("/api/state/bootstrap").json()["state"]["workers"].get(worker_id)
    return bool(info and info["connected"])


def _streaming_text(s: dict[str, Any]) -> int:
    answers = [i for i in s["items"] if i["kind"] == "assistant_message"]
    return len(answers[0]["text"]) if answers else 0


def _output(s: dict[str, Any]) -> str:
    calls = [i for i in s["items"] if i["kind"] == "tool_call"]
    return str(calls[0].get("output") or "") if calls else ""


def _done(s: dict[str, Any], last: str) -> bool:
    return bool(s["status"] == "idle" and s["items"][-1]["kind"] == "assistant_message"
                and s["items"][-1]["text"] == last)


def _wait(check: Any, timeout: float, what: str) -> None:
    # (a replica may be busy or restarting: an error is a reason to look again)
    wait_until(check, timeout=timeout, interval=0.1, retry=Exception, what=what)
