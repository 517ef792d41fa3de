"""What the worker says when the server closes its connection: the close code, then a retry."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

from rich.console import Console
from websockets.asyncio.server import ServerConnection, serve

from codey_protocol import codec
from codey_protocol import worker as wk
from codey_testkit.waiting import until
from codey_worker.config import Identity, WorkerConfig
from codey_worker.connection import Worker
from codey_worker.console import WorkerConsole
from codey_worker.pairing import generate_key
from codey_worker.policy import LocalPolicy


def test_a_close_by_the_server_is_reported_with_its_code_before_reconnecting(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    hellos: list[wk.Hello] = []

    async def server(ws: ServerConnection) -> None:
        # the handshake, as the server does it (the signature is not checked here)
        await ws.send(codec.encode(wk.AuthChallenge(nonce="n", server_time=time.time())))
        auth = codec.decode_worker_to_server(await ws.recv(decode=False))
        assert isinstance(auth, wk.AuthResponse)
        await ws.send(codec.encode(wk.Welcome(worker_id=auth.worker_id)))
        hello = codec.decode_worker_to_server(await ws.recv(decode=False))
        assert isinstance(hello, wk.Hello)
        hellos.append(hello)
        await ws.close(code=1011, reason="the server hit a bug")

    async def main() -> None:
        async with serve(server, "127.0.0.1", 0) as listening:
            port = listening.sockets[0].getsockname()[1]
            home = tmp_path / "codey-home"
            home.mkdir()
            worker = Worker(
                Identity(worker_id="wrk_t", server="", private_key=generate_key(),
                         credential="cred"),
                f"http://127.0.0.1:{port}", WorkerConfig(policy=LocalPolicy(allowed_roots=[
                    tmp_path])), home,
                WorkerConsole(Console(file=out, width=200, force_terminal=False)),
                handle_signals=False)
            running = asyncio.create_task(worker.run())
            await until(out.getvalue, ok=lambda text: "reconnecting in" in text, timeout=10,
                        show=str, what="the worker to say it reconnects")
            worker.stop()
            assert await asyncio.wait_for(running, 10) == 0

    asyncio.run(main())
    assert hellos, "the worker got as far as its hello"
    line = next(line for line in out.getvalue().splitlines() if "reconnecting in" in line)
    assert line.endswith("(closed with code 1011)"), line
