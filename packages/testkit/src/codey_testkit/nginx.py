"""A throwaway nginx reverse proxy for tests, from Debian's binary (``apt install nginx``).

    with NginxProcess(bind="127.0.0.2") as proxy:        # a free port on 127.0.0.1
        server = ServerProcess(..., extra_args=["--public-url", proxy.url]).start()
        proxy.start([server.url])                         # http://127.0.0.1:<port> → server
        httpx.get(proxy.url + "/api/health")

The configuration is docs/deploy.md's (HTTP and WebSockets, ``Host``, ``X-Forwarded-For``,
``X-Forwarded-Proto``, hour-long read timeouts) with an upstream per server given to
:meth:`NginxProcess.start`. It is written into a temporary directory that also holds the pid
file, the logs and nginx's temporary files; nginx runs in the foreground (``daemon off``) as a
child of the test, never as a system service, and :meth:`stop` ends it and removes the
directory. ``bind``: the local address nginx connects to the servers from
(``proxy_bind``): any 127.x.y.z works on Linux, so a test can trust the proxy's address
without trusting every other local client (which come from 127.0.0.1).

Raises :class:`NginxMissing` (a :class:`TestkitError`) when nginx is not installed; tests
turn that into a skip with :func:`require_nginx`.
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

__all__ = ["DEPLOY_LOCATION", "NginxMissing", "NginxProcess", "nginx_bin", "require_nginx"]

_INSTALL_HINT = "apt-get install -y nginx (./scripts/test does it)"


class NginxMissing(TestkitError):
    """nginx is not installed on this machine."""


def nginx_bin() -> Path | None:
    """Debian's ``/usr/sbin/nginx`` (not on a normal user's PATH), else one on PATH, or None."""
    for candidate in ("/usr/sbin/nginx", shutil.which("nginx")):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def require_nginx() -> Path:
    """nginx's path, or skip the calling test with the reason (for fixtures)."""
    found = nginx_bin()
    if found is None:
        import pytest

        pytest.skip(f"nginx is not installed: {_INSTALL_HINT}")
    return found


#: the lines of docs/deploy.md's ``location /`` for replicas (a unit test holds them equal)
DEPLOY_LOCATION = (
    "proxy_pass http://codey;",
    "proxy_http_version 1.1;",
    "proxy_set_header Upgrade $http_upgrade;",
    'proxy_set_header Connection "upgrade";',
    "proxy_set_header Host $host;",
    "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
    "proxy_set_header X-Forwarded-Proto $scheme;",
    "proxy_read_timeout 1h;",
    "proxy_next_upstream error timeout;",
)


def _config(root: Path, port: int, upstreams: Sequence[str], bind: str | None) -> str:
    location = "\n            ".join(DEPLOY_LOCATION)
    servers = " ".join(f"server {u};" for u in upstreams)
    # as root, nginx's workers would switch to "nobody", which cannot use the temporary
    # directory this test made (mode 0700); no privileges are at stake in a test
    user = "user root root;" if os.geteuid() == 0 else ""
    bind_line = f"proxy_bind {bind};" if bind else ""
    return f"""
# written by codey_testkit.nginx for one test
worker_processes 1;
{user}
pid {root}/nginx.pid;
error_log {root}/error.log info;
events {{ worker_connections 512; }}
http {{
    log_format forwarded '$remote_addr "$request" $status xff="$http_x_forwarded_for" '
                         'upstream=$upstream_addr';
    access_log {root}/access.log forwarded;
    client_body_temp_path {root}/tmp/body;
    proxy_temp_path {root}/tmp/proxy;
    fastcgi_temp_path {root}/tmp/fastcgi;
    uwsgi_temp_path {root}/tmp/uwsgi;
    scgi_temp_path {root}/tmp/scgi;
    client_max_body_size 64m;

    upstream codey {{ least_conn; {servers} }}
    server {{
        listen 127.0.0.1:{port};
        server_name _;
        # docs/deploy.md's location, as an operator would paste it
        location / {{
            {location}
            {bind_line}
        }}
    }}
}}
"""


class NginxProcess(StopsOnExit):
    """nginx on ``127.0.0.1:<free port>`` in front of the servers given to :meth:`start`.

    The port is chosen at construction, so :attr:`url` is known before the servers start
    (they need it as ``--public-url``). Raises :class:`NginxMissing` if nginx is absent.
    """

    def __init__(self, *, bind: str | None = None, root: Path | None = None) -> None:
        found = nginx_bin()
        if found is None:
            raise NginxMissing(f"nginx is not installed: {_INSTALL_HINT}")
        self.bin = found
        self.bind = bind
        self.port = free_port()
        # a given root (a test's tmp_path) is kept, so its logs outlive a failing test
        self._remove_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="codey-nginx-", dir="/tmp")) if root is None \
            else Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def error_log(self) -> Path:
        return self.root / "error.log"

    @property
    def access_log(self) -> Path:
        return self.root / "access.log"

    def start(self, upstreams: Sequence[str], timeout: float = 15.0) -> Self:
        """Write the configuration for ``upstreams`` (``http://127.0.0.1:8765`` or
        ``127.0.0.1:8765``) and start nginx; return once its port accepts connections.

        Raises TestkitError with nginx's error log if it exits or does not listen in time.
        """
        if self.proc is not None:
            raise TestkitError("nginx: already started")
        if not upstreams:
            raise TestkitError("nginx: no upstream server to proxy to")
        hosts = [urlsplit(u).netloc if "://" in u else u for u in upstreams]
        (self.root / "tmp").mkdir(exist_ok=True)
        conf = self.root / "nginx.conf"
        conf.write_text(_config(self.root, self.port, hosts, self.bind))
        self.proc = ManagedProcess("nginx", log_dir=self.root)
        # -e: where errors go before the configuration is read (else /var/log/nginx)
        self.proc.start([str(self.bin), "-p", str(self.root), "-c", str(conf),
                         "-e", str(self.error_log), "-g", "daemon off;"])
        proc = self.proc

        def listening() -> bool:
            if not proc.running:
                raise TestkitError(f"nginx exited with {proc.returncode}: {self._errors()}")
            return self._listening()

        try:
            wait_until(listening, timeout=timeout, what=f"nginx to listen on {self.url}")
        except WaitTimedOut as timed_out:
            raise WaitTimedOut(f"{timed_out}: {self._errors()}") from None
        return self

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _errors(self) -> str:
        text = self.error_log.read_text(errors="replace") if self.error_log.exists() else ""
        output = self.proc.read_log() if self.proc is not None else ""
        return (text + output).strip()[-2000:] or "(no output)"

    def access_lines(self) -> list[str]:
        """The access log so far: ``peer "request" status xff="…" upstream=…`` per line."""
        if not self.access_log.exists():
            return []
        return self.access_log.read_text(errors="replace").splitlines()

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop nginx and remove its directory (unless it was given); return its exit status.

        SIGTERM is nginx's fast shutdown: a graceful one (SIGQUIT) would wait for every open
        WebSocket to close, which the workers' and browsers' sockets never do on their own.
        SIGKILL after ``timeout``. Idempotent."""
        code = None
        if self.proc is not None:
            code = self.proc.stop(signal.SIGTERM, timeout=timeout)
        if self._remove_root:
            shutil.rmtree(self.root, ignore_errors=True)
        return code

    def __enter__(self) -> Self:
        return self
