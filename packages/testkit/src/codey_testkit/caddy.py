"""A throwaway Caddy reverse proxy for tests, from Debian's binary (``apt install caddy``).

    with CaddyProcess() as proxy:                          # a free port on 127.0.0.1
        server = ServerProcess(..., extra_args=["--public-url", proxy.url]).start()
        proxy.start([server.url])                          # http://127.0.0.1:<port> → server

The site block is docs/deploy.md's (``reverse_proxy`` to every replica with ``least_conn``,
``health_uri /api/health``, ``fail_duration 10s``: :data:`DEPLOY_DIRECTIVES`, which a unit test
holds equal to the document) on a plain-HTTP address instead of a domain. The global options
and environment keep Caddy to its directory: no admin endpoint (port 2019 would clash between
tests), no automatic HTTPS, its storage and autosaved config under the temporary root. Caddy
runs in the foreground as a child of the test, never as the system service.

Raises :class:`CaddyMissing` (a :class:`TestkitError`) when Caddy is not installed; tests
turn that into a skip with :func:`require_caddy`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit

from codey_testkit.errors import TestkitError
from codey_testkit.procs import ManagedProcess, StopsOnExit, free_port
from codey_testkit.waiting import WaitTimedOut, wait_until

__all__ = ["DEPLOY_DIRECTIVES", "CaddyMissing", "CaddyProcess", "caddy_bin", "require_caddy"]

_INSTALL_HINT = "apt-get install -y caddy (./scripts/test does it)"

#: the lines inside docs/deploy.md's ``reverse_proxy`` block for replicas
DEPLOY_DIRECTIVES = ("lb_policy least_conn", "health_uri /api/health", "fail_duration 10s")


class CaddyMissing(TestkitError):
    """Caddy is not installed on this machine."""


def caddy_bin() -> Path | None:
    for candidate in ("/usr/bin/caddy", shutil.which("caddy")):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def require_caddy() -> Path:
    """Caddy's path, or skip the calling test with the reason (for fixtures)."""
    found = caddy_bin()
    if found is None:
        import pytest

        pytest.skip(f"caddy is not installed: {_INSTALL_HINT}")
    return found


def caddyfile(root: Path, port: int, upstreams: Sequence[str]) -> str:
    directives = "\n".join(f"        {d}" for d in DEPLOY_DIRECTIVES)
    return f"""# written by codey_testkit.caddy for one test
{{
    admin off
    auto_https off
    storage file_system {root}/data
}}
http://127.0.0.1:{port} {{
    reverse_proxy {" ".join(upstreams)} {{
{directives}
    }}
}}
"""


class CaddyProcess(StopsOnExit):
    """Caddy on ``127.0.0.1:<free port>`` in front of the servers given to :meth:`start`."""

    def __init__(self, *, root: Path | None = None) -> None:
        found = caddy_bin()
        if found is None:
            raise CaddyMissing(f"caddy is not installed: {_INSTALL_HINT}")
        self.bin = found
        self.port = free_port()
        self._remove_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="codey-caddy-", dir="/tmp")) if root is None \
            else Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, upstreams: Sequence[str], timeout: float = 15.0) -> Self:
        """Write the Caddyfile for ``upstreams`` and start Caddy; return once it listens."""
        if self.proc is not None:
            raise TestkitError("caddy: already started")
        if not upstreams:
            raise TestkitError("caddy: no upstream server to proxy to")
        hosts = [urlsplit(u).netloc if "://" in u else u for u in upstreams]
        conf = self.root / "Caddyfile"
        conf.write_text(caddyfile(self.root, self.port, hosts))
        home = self.root / "home"
        home.mkdir(exist_ok=True)
        self.proc = ManagedProcess("caddy", log_dir=self.root)
        self.proc.start([str(self.bin), "run", "--config", str(conf), "--adapter", "caddyfile"],
                        env={"HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
                             "XDG_CONFIG_HOME": str(home / "config")})
        proc = self.proc

        def listening() -> bool:
            if not proc.running:
                raise TestkitError(f"caddy exited with {proc.returncode}: "
                                   f"{proc.read_log()[-2000:]}")
            return self._listening()

        try:
            wait_until(listening, timeout=timeout, what=f"caddy to listen on {self.url}")
        except WaitTimedOut as timed_out:
            raise WaitTimedOut(f"{timed_out}: {proc.read_log()[-2000:]}") from None
        return self

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop Caddy (SIGTERM: it does not wait for open WebSockets) and remove its
        directory unless it was given; idempotent."""
        code = None
        if self.proc is not None:
            code = self.proc.stop(signal.SIGTERM, timeout=timeout)
            self.proc = None
        if self._remove_root:
            shutil.rmtree(self.root, ignore_errors=True)
        return code

    def __enter__(self) -> Self:
        return self
