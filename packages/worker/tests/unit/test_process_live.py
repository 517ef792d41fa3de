"""A ``live`` process, watched for the browser (issue 33, items 3 and 4): its output pushed as
a bounded tail apart from the model's reads, the ports it listens on inside a network of its
own, its end; and a port of it forwarded to this machine's loopback on the user's click.

The pure parts (the tail's ring and pushes, /proc/net/tcp) first; then real processes, bare
and in bubblewrap, and a forward made by an unprivileged user."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from codey_protocol import codec
from codey_protocol import worker as wk
from codey_protocol.state import PROCESS_TAIL_BYTES, PROCESS_TAIL_KEPT
from codey_worker.confine import ActionRefused
from codey_worker.forward import parse_listening
from codey_worker.policy import LocalPolicy
from codey_worker.processes import ProcessTable, _Live
from codey_worker.sandbox import Sandbox, detect
from codey_worker.shell import CHUNK_MAX, CommandRegistry

T = TypeVar("T")
BWRAP = pytest.mark.skipif(detect().kind != "bwrap", reason=f"no bubblewrap: {detect().reason}")


def arun(make: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(make())  # type: ignore[arg-type]


# -- the tail's ring and its pushes (pure) ------------------------------------------------------


def test_a_tail_pushes_what_came_and_waits_for_a_whole_chunk_or_the_timer() -> None:
    live = _Live()
    assert live.add(b"one\n") is False  # the timer pushes it
    assert live.take(final=False) == ("one\n", False)
    assert live.take(final=False) is None  # nothing new
    assert live.add(b"x" * (CHUNK_MAX - 1)) is False
    assert live.add(b"y") is True  # a whole chunk: now
    assert live.take(final=False) == ("x" * (CHUNK_MAX - 1) + "y", False)
    everything = b"one\n" + b"x" * (CHUNK_MAX - 1) + b"y"
    assert bytes(live.ring) == everything[-PROCESS_TAIL_BYTES:]  # the newest, at most


def test_a_tail_keeps_a_character_cut_in_two_until_its_rest_comes() -> None:
    live = _Live()
    snowman = "☃".encode()
    live.add(b"a" + snowman[:1])
    assert live.take(final=False) == ("a", False)
    live.add(snowman[1:] + b"b")
    assert live.take(final=False) == ("☃b", False)
    live.add(snowman[:2])
    assert live.take(final=True) == ("\ufffd", False)  # the end: what there is, replaced


def test_more_than_the_ring_pending_becomes_the_whole_tail() -> None:
    live = _Live()
    live.add(b"old\n")
    assert live.add(b"z" * PROCESS_TAIL_BYTES) is True
    text, reset = live.take(final=False)  # type: ignore[misc]
    assert reset and text == "z" * PROCESS_TAIL_BYTES  # the ring: the newest bytes
    assert len(live.ring) == PROCESS_TAIL_BYTES
    live.add(b"next\n")
    assert live.take(final=False) == ("next\n", False)  # and on from there


def test_a_missed_push_sends_the_ring_whole_cut_at_a_character() -> None:
    live = _Live()
    live.add("é".encode() * (PROCESS_TAIL_BYTES // 2) + b"!")  # the ring starts mid-é
    live.take(final=False)
    live.missed()
    text, reset = live.take(final=False)  # type: ignore[misc]
    assert reset and text.endswith("é!") and "\ufffd" not in text
    assert live.take(final=False) is None


def test_listening_ports_are_read_from_proc_net_tcp() -> None:
    text = textwrap.dedent("""\
          sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid
           0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000
           1: 0100007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000
           2: 0100007F:1F40 0100007F:A2C4 01 00000000:00000000 00:00000000 00000000  1000
           3: 0100007F:ZZZZ 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000
        """)
    assert parse_listening(text) == {8000, 80}  # an established one is not listening
    six = ("  sl  local_address                         remote_address                        st\n"
           "   0: 00000000000000000000000000000000:0BB8 00000000000000000000000000000000:0000 0A\n")
    assert parse_listening(six) == {3000}
    assert parse_listening("") == set()


# -- real processes ----------------------------------------------------------------------------


class Pushes:
    """The frames a table pushed, decoded; ``down`` makes every send fail (disconnected)."""

    def __init__(self) -> None:
        self.frames: list[Any] = []
        self.down = False
        self.changed = asyncio.Event()

    async def send(self, frame: bytes) -> None:
        if self.down:
            raise ConnectionError("not connected")
        self.frames.append(codec.decode_worker_to_server(frame))
        self.changed.set()

    def tail(self, process_id: str) -> str:
        """The tail as the server would keep it (``core.tails``: cut to its newest
        ``PROCESS_TAIL_KEPT`` characters, as a whole tail followed by more text can be)."""
        text = ""
        for f in self.frames:
            if isinstance(f, wk.ProcessTail) and f.process_id == process_id:
                text = (f.data if f.reset else text + f.data)[-PROCESS_TAIL_KEPT:]
        return text

    def of(self, kind: type[T]) -> list[T]:
        return [f for f in self.frames if isinstance(f, kind)]

    async def until(self, check: Callable[[], Any], timeout: float = 20.0) -> Any:
        async def wait() -> Any:
            while not (got := check()):
                self.changed.clear()
                await self.changed.wait()
            return got

        return await asyncio.wait_for(wait(), timeout)


def table(ws: Path, home: Path, pushes: Pushes) -> ProcessTable:
    return ProcessTable(LocalPolicy(allowed_roots=[ws.parent]), Sandbox(detect(), home),
                        registry=CommandRegistry(), grace_s=2.0, send=pushes.send,
                        ports_every_s=0.1)


def start(t: ProcessTable, ws: Path, argv: list[str], **kw: Any) -> Awaitable[wk.ExecOutput]:
    kw.setdefault("yield_ms", 0)
    kw.setdefault("live", True)
    return t.start(wk.ExecStart(action_id=kw.pop("action_id", "a1"), session_id="s1",
                                argv=argv, workdir=str(ws), **kw))


@pytest.fixture
def ws(outside_tmp: Path) -> Path:
    workdir = outside_tmp / "ws"
    workdir.mkdir()
    return workdir


@pytest.mark.parametrize("mode", ["full-access", pytest.param("workspace-write", marks=BWRAP)])
def test_the_tail_is_pushed_as_it_comes_and_the_models_reads_do_not_move(
        ws: Path, tmp_path: Path, mode: str) -> None:
    """A line, then a line each time it is told: each reaches the server while the model has
    read nothing, and the model's poll then reads all of it from the start."""
    async def scenario() -> None:
        pushes = Pushes()
        t = table(ws, tmp_path / "home", pushes)
        script = "i=0; while read go; do i=$((i+1)); echo line-$i; done"
        started = await start(t, ws, ["bash", "-c", f"echo ready; {script}"], sandbox=mode)
        pid = started.process_id
        await pushes.until(lambda: "ready" in pushes.tail(pid))
        for n in (1, 2, 3):
            await t._send_input(t._get("s1", pid), b"go\n")
            await pushes.until(lambda n=n: f"line-{n}\n" in pushes.tail(pid))
        # the browser saw three lines; the model still has everything unread
        read = await t.write(wk.ExecWrite(action_id="w1", session_id="s1", process_id=pid,
                                          yield_ms=0))
        assert started.output + read.output == "ready\nline-1\nline-2\nline-3\n"
        assert pushes.tail(pid) == "ready\nline-1\nline-2\nline-3\n"
        assert not any(f.reset for f in pushes.of(wk.ProcessTail))
        await t.kill(wk.ExecKill(action_id="k", session_id="s1", process_id=pid))
        exited = await pushes.until(lambda: pushes.of(wk.ProcessExited))
        assert (exited[0].process_id, exited[0].stopped_by) == (pid, "exec_kill")
        assert isinstance(pushes.frames[-1], wk.ProcessExited)  # after its last output
        assert pushes.of(wk.ProcessPorts) == []  # it listened on nothing
        await t.close()

    arun(scenario)


def test_a_tail_not_sent_while_disconnected_goes_whole_on_the_next_connection(
        ws: Path, tmp_path: Path) -> None:
    async def scenario() -> None:
        pushes = Pushes()
        t = table(ws, tmp_path / "home", pushes)
        started = await start(t, ws, ["bash", "-c", "echo one; read go; echo two; read go"],
                              sandbox="full-access")
        pid = started.process_id
        await pushes.until(lambda: pushes.tail(pid) == "one\n")
        pushes.down = True
        await t._send_input(t._get("s1", pid), b"go\n")
        await t.write(wk.ExecWrite(action_id="w", session_id="s1", process_id=pid,
                                   yield_ms=200))
        pushes.down = False
        t.connected()
        frame = (await pushes.until(lambda: [f for f in pushes.of(wk.ProcessTail) if f.reset]))
        assert frame[0].data == "one\ntwo\n"
        await t.close()

    arun(scenario)


def test_a_process_faster_than_the_socket_gets_one_push_at_a_time_and_its_tail_whole(
        ws: Path, tmp_path: Path) -> None:
    """1.2 MB as fast as it can, to a socket that takes 20 ms a frame: pushes go one at a
    time (no pile of tasks), what piled up goes whole, and the last tail is the newest
    bytes it wrote, then its end."""
    async def scenario() -> None:
        pushes = Pushes()
        sending = 0
        most = 0

        async def slow(frame: bytes) -> None:
            nonlocal sending, most
            sending += 1
            most = max(most, sending)
            await asyncio.sleep(0.02)
            sending -= 1
            await pushes.send(frame)

        t = table(ws, tmp_path / "home", pushes)
        t.send = slow
        started = await start(t, ws, ["seq", "1", "200000"], sandbox="full-access")
        await pushes.until(lambda: pushes.of(wk.ProcessExited))
        everything = "".join(f"{n}\n" for n in range(1, 200001))
        assert pushes.tail(started.process_id) == everything[-PROCESS_TAIL_BYTES:]
        assert most == 1 and len(pushes.frames) < 100
        assert any(f.reset for f in pushes.of(wk.ProcessTail))
        # the model's read is whole (up to its own cap): the pushes took nothing from it
        read = await t.write(wk.ExecWrite(action_id="w", session_id="s1",
                                          process_id=started.process_id, yield_ms=0))
        assert (started.output + read.output).endswith("199999\n200000\n")
        await t.close()

    arun(scenario)


@BWRAP
def test_an_isolated_server_says_its_port_and_is_forwarded_on_the_loopback(
        ws: Path, tmp_path: Path) -> None:
    """Network off: the port it listens on is pushed; unreachable from here, until it is
    forwarded; the forward ends with the process."""
    (ws / "index.html").write_text("<h1>inside</h1>")

    async def scenario() -> None:
        pushes = Pushes()
        t = table(ws, tmp_path / "home", pushes)
        started = await start(t, ws, [sys.executable, "-u", "-m", "http.server", "0",
                                      "--bind", "0.0.0.0", "--directory", str(ws)],
                              sandbox="workspace-write", network=False)
        pid = started.process_id
        ports = await pushes.until(lambda: [f for f in pushes.of(wk.ProcessPorts) if f.ports])
        (port,) = ports[0].ports
        await pushes.until(lambda: f"port {port}" in pushes.tail(pid))  # what it printed
        with pytest.raises(ActionRefused) as refused:
            await t.forward(wk.ExecForward(action_id="f0", session_id="s1", process_id=pid,
                                           port=port + 1 if port < 65535 else port - 1))
        assert refused.value.code == "not_listening"
        forwarded = await t.forward(wk.ExecForward(action_id="f1", session_id="s1",
                                                   process_id=pid, port=port))
        assert forwarded.host == "127.0.0.1" and forwarded.host_port > 0
        url = f"http://127.0.0.1:{forwarded.host_port}/index.html"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
        assert body == b"<h1>inside</h1>"
        again = await t.forward(wk.ExecForward(action_id="f2", session_id="s1",
                                               process_id=pid, port=port))
        assert again.host_port == forwarded.host_port  # the same forward
        await t.kill(wk.ExecKill(action_id="k", session_id="s1", process_id=pid))
        await pushes.until(lambda: pushes.of(wk.ProcessExited))
        await t.close()
        with pytest.raises(urllib.error.URLError):
            await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5))

    arun(scenario)


@BWRAP
def test_a_process_with_the_network_is_not_forwarded(ws: Path, tmp_path: Path) -> None:
    async def scenario() -> None:
        t = table(ws, tmp_path / "home", Pushes())
        started = await start(t, ws, ["sleep", "30"], sandbox="workspace-write", network=True)
        with pytest.raises(ActionRefused) as refused:
            await t.forward(wk.ExecForward(action_id="f", session_id="s1",
                                           process_id=started.process_id, port=8000))
        assert refused.value.code == "bad_request"
        await t.close()

    arun(scenario)


_AS_NOBODY = """
import asyncio, json, sys, urllib.request
from pathlib import Path
from codey_protocol import codec, worker as wk
from codey_worker.shell import CommandRegistry
from codey_worker.policy import LocalPolicy
from codey_worker.processes import ProcessTable
from codey_worker.sandbox import Sandbox, detect

async def main(ws, home):
    ports = asyncio.Queue()
    async def send(frame):
        msg = codec.decode_worker_to_server(frame)
        if isinstance(msg, wk.ProcessPorts) and msg.ports:
            ports.put_nowait(msg.ports[0])
    t = ProcessTable(LocalPolicy(allowed_roots=[ws.parent]), Sandbox(detect(), home),
                     registry=CommandRegistry(), send=send, ports_every_s=0.1)
    out = await t.start(wk.ExecStart(action_id="a", session_id="s", argv=[
        sys.argv[3], "-m", "http.server", "0", "--directory", str(ws)], workdir=str(ws),
        live=True, yield_ms=0))
    port = await asyncio.wait_for(ports.get(), 20)
    f = await t.forward(wk.ExecForward(action_id="f", session_id="s",
                                       process_id=out.process_id, port=port))
    url = f"http://127.0.0.1:{f.host_port}/hello.txt"
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
    await t.close()
    print(json.dumps({"uid": __import__("os").getuid(), "body": body.decode()}))

asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
"""


@BWRAP
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None
                    or not os.path.exists("/usr/bin/python3"),
                    reason="needs root to become an unprivileged user (setpriv), and a "
                           "Python that user may run")
def test_an_unprivileged_worker_forwards_a_port_of_its_sandbox(outside_tmp: Path) -> None:
    """The forward needs no privilege: as ``nobody``, with no capability, the helper joins
    the user and network namespaces bwrap made for that user."""
    shared = outside_tmp / "nobody"
    (shared / "ws").mkdir(parents=True)
    (shared / "home").mkdir()
    (shared / "ws" / "hello.txt").write_text("from inside")
    os.chmod(outside_tmp, 0o711)  # (a test's own temp folder: only passed through)
    for path in (shared, shared / "ws", shared / "home"):
        os.chmod(path, 0o777)
    os.chmod(shared / "ws" / "hello.txt", 0o644)
    # the system's Python with this one's packages: the interpreter this test runs may sit
    # where that user cannot go (a home directory)
    ours = [p for p in sys.path if p and not p.startswith(sys.base_prefix)]
    run = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         "--inh-caps=-all", "--bounding-set=-all",
         "/usr/bin/python3", "-c", _AS_NOBODY, str(shared / "ws"), str(shared / "home"),
         "/usr/bin/python3"],
        capture_output=True, text=True, timeout=60, cwd=shared,
        env={**os.environ, "HOME": str(shared / "home"), "PYTHONPATH": os.pathsep.join(ours)})
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"uid": 65534, "body": "from inside"}
