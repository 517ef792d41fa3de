"""A throwaway PostgreSQL cluster for tests, from Debian's binaries (``apt install postgresql``).

    with PostgresCluster() as pg:
        url = pg.create_database("t1")      # postgresql://codey@/t1?host=<socket dir>&port=<p>

``initdb`` into a temporary directory, ``pg_ctl`` on a free port with its unix socket in that
directory (no TCP), trust authentication for the local user ``codey``; stopped and removed on
exit. Never a system service. PostgreSQL refuses to run as root: as root, the cluster runs as
the ``postgres`` system user (the Debian package creates it) in a directory it owns.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Self

from codey_testkit.errors import TestkitError

__all__ = ["PostgresCluster", "pg_bin"]


def pg_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` with initdb, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresCluster:
    def __init__(self) -> None:
        found = pg_bin()
        if found is None:
            raise TestkitError("PostgreSQL is not installed: apt-get install -y postgresql "
                               "(./scripts/test does it)")
        self.bin = found
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="codey-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.sockets = self.root  # the unix socket lives next to the data
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.started = False

    def _run(self, *args: str) -> None:
        result = subprocess.run([*self._as, *args], capture_output=True, text=True,
                                timeout=120, check=False)
        if result.returncode != 0:
            raise TestkitError(f"{args[0]} failed: {result.stderr.strip()[-800:]}")

    def start(self) -> Self:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "codey",
                  "--auth=trust", "-E", "UTF8", "--no-sync")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l",
                  str(self.root / "server.log"), "-w", "-o",
                  f"-p {self.port} -k {self.sockets} -c listen_addresses='' -c fsync=off",
                  "start")
        self.started = True
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://codey@/{database}?host={self.sockets}&port={self.port}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.started:
            self.started = False
            subprocess.run([*self._as, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m",
                            "immediate", "-w", "stop"], capture_output=True, timeout=60,
                           check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
