"""The real Codey processes, started for tests, the e2e suite and benchmarks.

    with ServerProcess(tmp_path / "server") as server:   # codey-server on port 0
        server.url, server.ws_url, server.http          # base URL, ws URL, an httpx.Client
        server.kill9(); server.restart()                # same data dir, new port
        server.pause(); server.resume()                 # kill -STOP, kill -CONT
        with WorkerProcess(server, tmp_path / "w1") as worker:   # paired through the HTTP API
            worker.worker_id, worker.root                # its id, a workdir root it may use

Every process gets its own temporary home; nothing is shared between tests.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import httpx

from codey_testkit.procs import ManagedProcess, StopsOnExit
from codey_testkit.waiting import WaitTimedOut, wait_until

__all__ = ["ServerProcess", "WorkerProcess"]


class ServerProcess(StopsOnExit):
    """A real ``codey-server serve`` on 127.0.0.1, port 0, data in ``data_dir``.

    ``config`` (a dict) is written to ``data_dir/config.json`` before the start.
    ``auth_token``: once the server prints its access URL, :attr:`http` carries the cookie.
    """

    def __init__(self, data_dir: Path, *, config: dict[str, Any] | None = None,
                 log_dir: Path | None = None, extra_args: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.config = config
        self.log_dir = Path(log_dir) if log_dir else self.data_dir.parent / "logs"
        self.extra_args = extra_args or []
        self.env = env or {}
        self.proc: ManagedProcess | None = None
        self.url = ""
        self.token: str | None = None
        self._http: httpx.Client | None = None
        self.starts = 0

    # lifecycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> Self:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.config is not None:
            (self.data_dir / "config.json").write_text(json.dumps(self.config))
        self.starts += 1
        self.proc = ManagedProcess(f"server-{self.starts}", log_dir=self.log_dir)
        # a restart keeps the port, so workers and browsers find the server again
        port = self.url.rsplit(":", 1)[1] if self.url else "0"
        self.proc.start([sys.executable, "-m", "codey_server.cli", "serve", "--port", port,
                         "--data-dir", str(self.data_dir), *self.extra_args], env=self.env)
        match = self.proc.wait_for_line(
            r"codey-server listening on (http://[\w.\-\[\]:]+:\d+)", timeout=timeout)
        self.url = match.group(1).rstrip("/")
        opened = self.proc.wait_for_line(r"Open (http://\S+) in your browser",
                                        timeout=timeout).group(1)
        token = parse_qs(urlsplit(opened).query).get("token")
        self.token = token[0] if token else None
        if self._http is not None:
            self._http.close()
            self._http = None
        return self

    def stop(self, timeout: float = 15.0) -> int | None:
        if self._http is not None:
            self._http.close()
            self._http = None
        if self.proc is None:
            return None
        return self.proc.stop(signal.SIGTERM, timeout=timeout)

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill9()

    def pause(self) -> None:
        """``kill -STOP``: the process stops where it is, sockets and connections open, and
        believes nothing happened once resumed (a GC pause, a stalled VM)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """``kill -CONT`` after :meth:`pause`."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> Self:
        self.stop()
        return self.start()

    def __enter__(self) -> Self:
        # ``with proc.start(...):`` must not start a second one: a second worker with the
        # same identity made the server drop the first in the middle of its command
        if self.proc is not None and self.proc.running:
            return self
        return self.start()


    # talking to it ------------------------------------------------------------------------

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http"):] + "/ws/client"

    @property
    def worker_ws_url(self) -> str:
        return "ws" + self.url[len("http"):] + "/ws/worker"

    @property
    def origin(self) -> str:
        return self.url

    @property
    def http(self) -> httpx.Client:
        """An httpx client with the browser's credentials (cookie and Origin)."""
        if self._http is None:
            self._http = httpx.Client(base_url=self.url, timeout=30.0,
                                      headers={"Origin": self.url})
            if self.token:
                r = self._http.get(f"/?token={self.token}", follow_redirects=False)
                if r.status_code >= 400:
                    raise RuntimeError(f"login with the access token failed: {r.status_code}")
        return self._http

    def cookie_header(self) -> dict[str, str]:
        """Headers a websocket client needs to pass as the logged-in browser."""
        jar = self.http.cookies
        cookie = "; ".join(f"{k}={v}" for k, v in jar.items())
        headers = {"Origin": self.url}
        if cookie:
            headers["Cookie"] = cookie
        return headers

    def log_text(self) -> str:
        if self.proc is None or self.proc.log_path is None:
            return ""
        return self.proc.log_path.read_text(errors="replace")


class WorkerProcess(StopsOnExit):
    """A real ``codey-worker`` with its own ``CODEY_HOME``, paired with ``server`` on start.

    Pairing goes the way a browser does it: read the code the worker prints, find the request
    with ``GET /api/pairing/requests``, approve it with the code. ``home`` stands for the
    user's home directory: ``CODEY_HOME`` is ``home/.codey`` (:attr:`codey_home`), as by
    default, and ``root`` = ``home/projects`` is an allowed root (the worker config written on
    first start allows only it); sessions' workdirs go inside. The worker refuses any path in
    its own ``CODEY_HOME``, so workdirs must not be put there. ``env`` is laid over the
    environment of its next starts (a ``PATH`` whose ``bwrap`` fails: a machine without a
    sandbox).
    """

    def __init__(self, server: ServerProcess, home: Path, *,
                 config: dict[str, Any] | None = None, name: str = "worker",
                 env: dict[str, str] | None = None) -> None:
        self.server = server
        self.env = dict(env or {})
        self.home = Path(home)
        self.codey_home = self.home / ".codey"
        self.root = self.home / "projects"
        self.config = config
        self.name = name
        self.proc: ManagedProcess | None = None
        self.starts = 0
        self.pair_line: str | None = None
        self.pair_url: str | None = None

    @property
    def worker_id(self) -> str:
        data: dict[str, Any] = json.loads((self.codey_home / "worker.json").read_text())
        return str(data["worker_id"])

    @property
    def paired(self) -> bool:
        return (self.codey_home / "worker.json").exists()

    def start(self, timeout: float = 30.0, *, wait_connected: bool = True,
              pair: bool = True) -> Self:
        """Start the worker; a first start pairs it unless ``pair`` is False.

        With ``pair=False`` an unpaired worker is left waiting after printing its link
        (:attr:`pair_line`, :attr:`pair_url`): the caller approves it (a browser, a test),
        then calls :meth:`wait_connected`.
        """
        self.codey_home.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        cfg_path = self.codey_home / "worker-config.json"
        if not cfg_path.exists():
            # worktrees in the test's home too, never the real ~/.codey-worktrees
            cfg = {"allowed_roots": [str(self.root)],
                   "worktrees_dir": str(self.home / "worktrees"), **(self.config or {})}
            cfg_path.write_text(json.dumps(cfg))
        self.starts += 1
        self.proc = ManagedProcess(f"{self.name}-{self.starts}", log_dir=self.home / "logs")
        was_paired = self.paired
        self.proc.start([sys.executable, "-m", "codey_worker.cli", "--server", self.server.url],
                        env={**self.env, "CODEY_HOME": str(self.codey_home)})
        if not was_paired:
            match = self.proc.wait_for_line(r"Open (\S+)/#/pair/(\S+) to link this machine",
                                            timeout=timeout)
            self.pair_line = match.group(0)
            self.pair_url = f"{match.group(1)}/#/pair/{match.group(2)}"
            if not pair:
                return self
            self.approve(match.group(2))
        if wait_connected:
            self.wait_connected(timeout)
        return self

    def approve(self, code: str) -> None:
        pending = self.server.http.get("/api/pairing/requests").json()
        request = next(p for p in pending if p["code"] == code)
        r = self.server.http.post(f"/api/pairing/requests/{request['request_id']}/approve",
                                  json={"code": code})
        if r.status_code != 200:
            raise RuntimeError(f"approving {code} failed: {r.status_code} {r.text}")

    def wait_connected(self, timeout: float = 30.0) -> None:
        """Until the server's state shows this worker connected."""

        def connected() -> bool:
            if self.paired:
                state = self.server.http.get("/api/state/bootstrap").json()["state"]
                info = state["workers"].get(self.worker_id)
                if info and info["connected"]:
                    return True
            if self.proc is not None and not self.proc.running:
                raise RuntimeError(f"worker exited: {self.log_text()[-2000:]}")
            return False

        try:
            wait_until(connected, timeout=timeout, interval=0.05,
                       what=f"{self.name} to show as connected")
        except WaitTimedOut as timed_out:
            raise WaitTimedOut(f"{timed_out}; its log: {self.log_text()[-2000:]}") from None

    def workdir(self, name: str) -> str:
        return str(self.root / name)

    def stop(self, timeout: float = 15.0) -> int | None:
        return self.proc.stop(signal.SIGTERM, timeout=timeout) if self.proc else None

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill9()

    def __enter__(self) -> Self:
        # ``with proc.start(...):`` must not start a second one: a second worker with the
        # same identity made the server drop the first in the middle of its command
        if self.proc is not None and self.proc.running:
            return self
        return self.start()


    def log_text(self) -> str:
        if self.proc is None or self.proc.log_path is None:
            return ""
        return self.proc.log_path.read_text(errors="replace")
