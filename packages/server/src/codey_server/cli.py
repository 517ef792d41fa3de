"""``codey-server``: run the server.

    codey-server serve                                  # 127.0.0.1:8765, data in ~/.codey/server
    codey-server serve --port 0 --data-dir /tmp/codey   # any free port (printed)
    codey-server serve --host 0.0.0.0 --config cfg.json # beyond loopback: docs/security.md
    codey-server url                                    # print the link to open again
    codey-server backup /safe/codey-2026-12-01          # a copy of the data, server running
    codey-server restore /safe/codey-2026-12-01 --data-dir /tmp/new   # into a new data dir
    codey-server --version

On start it checks the data's format (codey_server.upgrades) before anything reads the data:
data written by a newer release is refused with one line and exit status 3; older data is
backed up and migrated. Then it prints the URL to open. SIGINT/SIGTERM: every socket is told
``shutdown``, in-flight appends finish, the process exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Collection, Coroutine, Iterable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import uvicorn

from codey_protocol import MAX_FRAME_BYTES
from codey_protocol.version import __version__
from codey_server.app import create_app
from codey_server.cluster.errors import SecretKeyError
from codey_server.errors import ConfigError
from codey_server.logsetup import configure_logging, install_redaction
from codey_server.settings import Settings, load_config_file
from codey_server.upgrades import startup as upgrades
from codey_server.upgrades.errors import DataTooNew, UpgradeError

if TYPE_CHECKING:
    from codey_server.agent.models import ModelProvider

__all__ = ["main", "run_loop"]

T = TypeVar("T")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codey-server", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"codey-server {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve", help="run the server",
        description="Run the Codey server.\n\nExamples:\n"
                    "  codey-server serve\n"
                    "  codey-server serve --port 0 --data-dir /tmp/codey\n"
                    "  codey-server serve --config ~/.codey/server/config.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (0: any free port)")
    serve.add_argument("--data-dir", type=Path, default=Path.home() / ".codey" / "server",
                       help="where the SQLite log and credentials live (default ~/.codey/server)")
    serve.add_argument("--config", type=Path, default=None,
                       help="JSON config (providers, origins); default DATA_DIR/config.json")
    serve.add_argument("--snapshot-every", type=int, default=None,
                       help="events between state snapshots (default 5000)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    serve.add_argument("--log-format", default="text", choices=["text", "json"],
                       help="json: one JSON object per line, for a log collector")
    serve.add_argument("--public-url", default=None,
                       help="the URL browsers use when a reverse proxy fronts the server")
    serve.add_argument("--tls", action="store_true",
                       help="a TLS reverse proxy fronts the server (cookies become Secure)")
    serve.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                       help="another origin allowed to open /ws/client (repeatable)")
    serve.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       help="another Host name to answer to, besides loopback (repeatable)")
    serve.add_argument("--no-auth", action="store_true",
                       help="no access token (refused unless bound to loopback)")
    serve.add_argument("--database-url", default=os.environ.get("CODEY_DATABASE_URL"),
                       help="postgresql://… : keep the event log in PostgreSQL (default: "
                            "SQLite in the data dir; also $CODEY_DATABASE_URL). Several "
                            "servers on one database are replicas (docs/deploy.md)")
    serve.add_argument("--replica-id", default=os.environ.get("CODEY_REPLICA_ID"),
                       help="this server's name among replicas (default: host name and a "
                            "random suffix)")
    serve.add_argument("--clock-file", type=Path, default=None,
                       help="the schedules' clock: a file holding unix seconds (for tests)")
    serve.add_argument("--direct-actions", action="store_true",
                       help="allow POST /api/workers/{id}/actions: actions with no approval "
                            "and no trace in the event log (for benchmarks and tests)")
    url = sub.add_parser(
        "url", help="print the link that logs a browser in, again",
        description="Print the link (with its access token) that logs a browser in to the "
                    "server that last ran with this data dir.\n\nExample:\n"
                    "  codey-server url\n  codey-server url --data-dir /srv/codey",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    url.add_argument("--data-dir", type=Path, default=Path.home() / ".codey" / "server",
                     help="the server's data dir (default ~/.codey/server)")
    backup = sub.add_parser(
        "backup", help="copy the data (the event log and the data dir's files) into a folder",
        description="Copy a server's data into PATH (a new or empty folder): the event log "
                    "with SQLite's online backup, so the server may keep running, and every "
                    "other file of the data dir. With PostgreSQL the folder gets the data "
                    "dir's files, and the database is pg_dump's (docs/deploy.md).\n\n"
                    "Example:\n  codey-server backup /safe/codey-2026-12-01\n"
                    "  codey-server backup /safe/codey --data-dir /srv/codey",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    backup.add_argument("path", type=Path, metavar="PATH", help="a new or empty folder")
    backup.add_argument("--data-dir", type=Path, default=Path.home() / ".codey" / "server",
                        help="the server's data dir (default ~/.codey/server)")
    backup.add_argument("--database-url", default=os.environ.get("CODEY_DATABASE_URL"),
                        help="the server's PostgreSQL, if it has one (also "
                             "$CODEY_DATABASE_URL): only the data dir's files are copied")
    restore = sub.add_parser(
        "restore", help="put a backup into a data dir",
        description="Restore the backup in PATH (made by `codey-server backup`, or by the "
                    "server before a migration, under DATA_DIR/backups/) into a data dir "
                    "that is new or empty. Stop the server of that data dir first.\n\n"
                    "Example:\n  codey-server restore /safe/codey-2026-12-01 "
                    "--data-dir ~/.codey/server-restored\n"
                    "  codey-server restore /safe/codey-2026-12-01 --force   # replace the "
                    "data in ~/.codey/server",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    restore.add_argument("path", type=Path, metavar="PATH", help="the backup's folder")
    restore.add_argument("--data-dir", type=Path, default=Path.home() / ".codey" / "server",
                         help="where to restore it (default ~/.codey/server)")
    restore.add_argument("--force", action="store_true",
                         help="replace what the data dir holds (its backups/ stay)")
    return parser


#: the base URL of the server that last ran with a data dir (no secret in it)
URL_FILE = "server.url"


def print_url(args: argparse.Namespace) -> int:
    data_dir = args.data_dir.expanduser()
    try:
        base = (data_dir / URL_FILE).read_text().strip()
    except OSError:
        print(f"codey-server: no server has run with {data_dir} yet; start one with "
              "`codey-server serve`", file=sys.stderr)
        return 2
    token_path = data_dir / "access_token"
    token = token_path.read_text().strip() if token_path.exists() else ""
    query = f"?token={token}" if token else ""
    _line(f"Open {base}/{query} in your browser")
    return 0


def backup_data(args: argparse.Namespace) -> int:
    from codey_server.upgrades.backup import backup

    data_dir, dest = args.data_dir.expanduser(), args.path.expanduser()
    os.umask(0o077)  # the copy holds credentials and the log: for this user only
    if not data_dir.is_dir():
        print(f"codey-server: no data dir at {data_dir}", file=sys.stderr)
        return 2
    try:
        manifest = backup(data_dir, dest,
                          db_path=None if args.database_url else data_dir / "events.db")
    except UpgradeError as err:
        print(err, file=sys.stderr)
        return 2
    if args.database_url:
        _line(f"codey-server: backed up the {manifest.files} files of {data_dir} to {dest}; "
              "the log and the shared state are in PostgreSQL: pg_dump --format=custom "
              f"--file {dest}/codey.pgdump \"$CODEY_DATABASE_URL\" (docs/deploy.md)")
    else:
        _line(f"codey-server: backed up {data_dir} (the log to seq {manifest.seq}, "
              f"{manifest.files} other files, data format {manifest.format}) to {dest}")
    return 0


def restore_data(args: argparse.Namespace) -> int:
    from codey_server.upgrades.backup import restore

    data_dir, folder = args.data_dir.expanduser(), args.path.expanduser()
    os.umask(0o077)
    try:
        manifest = restore(folder, data_dir, force=args.force)
    except UpgradeError as err:
        print(err, file=sys.stderr)
        return 2
    more = (" (its database is PostgreSQL: restore that with pg_restore, docs/deploy.md)"
            if manifest.database == "postgresql" else "")
    _line(f"codey-server: restored {folder} (made by codey {manifest.version}, data format "
          f"{manifest.format}, the log to seq {manifest.seq}) into {data_dir}{more}; start "
          f"it with: codey-server serve --data-dir {data_dir}")
    return 0


def _check_secret_key(settings: Settings) -> None:
    """Among replicas, a malformed key stops the start (SecretKeyError); a missing one is
    said: provider logins then cannot be kept (the environment's API keys still work)."""
    from codey_server.cluster.crypto import KEY_ENV, SecretKey

    if SecretKey.load(settings.secret_key_file) is None:
        logging.getLogger("codey").warning(
            "no secret key ($%s or secret_key_file): provider logins and API keys entered in "
            "the browser cannot be stored; see docs/security.md", KEY_ENV)


#: how long browsers' sockets get to send ``shutdown`` and close before uvicorn closes them
TELL_BROWSERS_S = 0.3


class _Server(uvicorn.Server):
    """uvicorn, but browsers hear ``shutdown`` before the sockets close, and a stop begins
    at once rather than at uvicorn's next tick."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        app_state = getattr(self.config.app, "state", None)
        services = getattr(app_state, "services", None)
        if services is not None and not self.should_exit:
            services.clients.begin_shutdown()
            asyncio.get_event_loop().create_task(self._exit_once_told(services, sig, frame))
            return
        self._exit(sig, frame)

    async def _exit_once_told(self, services: Any, sig: int, frame: FrameType | None) -> None:
        # as soon as every browser socket has sent it and closed (none open: now), the
        # rest after TELL_BROWSERS_S; it was a fixed 0.3 s, paid by every stop
        await services.clients.all_closed(TELL_BROWSERS_S)
        self._exit(sig, frame)

    def _exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        # A requested shutdown is a clean exit (status 0), so uvicorn must not re-raise it.
        self._captured_signals.clear()
        if self._exiting is not None:
            self._exiting.set()

    _exiting: asyncio.Event | None = None

    async def main_loop(self) -> None:
        # uvicorn's loop, which looks at should_exit every 0.1 s; this one also wakes when
        # _exit sets it (a stop then takes no tick's wait)
        self._exiting = asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exiting.wait(), 0.1)


def serve(args: argparse.Namespace) -> int:
    settings = Settings(host=args.host, port=args.port, data_dir=args.data_dir.expanduser(),
                        log_level=args.log_level, public_url=args.public_url, tls=args.tls,
                        allowed_origins=args.allowed_origin, allowed_hosts=args.allowed_host,
                        auth_required=not args.no_auth,
                        direct_actions=args.direct_actions, clock_file=args.clock_file,
                        database_url=args.database_url, replica_id=args.replica_id)
    if args.snapshot_every:
        settings = msgspec.structs.replace(settings, snapshot_every=args.snapshot_every)
    config_path = args.config or settings.data_dir / "config.json"
    # the log, the credentials and the access token are for this user only: nothing this
    # process creates (SQLite's -wal/-shm included) is readable by anyone else
    os.umask(0o077)
    configure_logging(args.log_level, sys.stderr, args.log_format)
    try:
        settings = load_config_file(settings, config_path)
        for warning in settings.check():
            logging.getLogger("codey").warning(warning)
        if settings.database_url:
            _check_secret_key(settings)
    except (ConfigError, SecretKeyError) as err:
        print(f"codey-server: {err}", file=sys.stderr)
        return 2
    # the data's format, before anything reads the data: a newer release's data is refused
    # (one line, no traceback), older data backed up and migrated
    try:
        upgrades.prepare(settings)
    except DataTooNew as err:
        print(err, file=sys.stderr)
        return 3
    except UpgradeError as err:
        print(err, file=sys.stderr)
        return 2

    # IPPROTO_TCP: asyncio sets TCP_NODELAY only on TCP sockets it can tell are TCP; without
    # it every keep-alive response waits ~40 ms for a delayed ACK
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as err:
        print(f"codey-server: cannot bind {settings.host}:{settings.port}: {err}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    settings = msgspec.structs.replace(settings, port=port)
    app = create_app(settings)
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    base = (settings.public_url or f"http://{host}:{port}").rstrip("/")
    (settings.data_dir / URL_FILE).write_text(base + "\n")  # for `codey-server url`
    # log_config=None: uvicorn adds no handlers, its records reach the root handler (and its
    # redaction filter); its per-request lines only at --log-level debug
    config = uvicorn.Config(app, log_config=None,
                            log_level="debug" if args.log_level == "debug" else "warning",
                            ws_max_size=MAX_FRAME_BYTES + 1024,
                            ws_ping_interval=20, ws_ping_timeout=20, lifespan="on",
                            timeout_graceful_shutdown=5,
                            # uvicorn would believe X-Forwarded-For from 127.0.0.1 (or
                            # $FORWARDED_ALLOW_IPS) on its own; only trusted_proxies may decide
                            # that (http/clientaddr.py), so a local process cannot pose as
                            # another client
                            proxy_headers=False)
    install_redaction()
    server = _Server(config)

    async def run() -> None:
        async def announce() -> None:
            while not server.started:
                await asyncio.sleep(0.01)
            # the token is known once the services started: among replicas it is the
            # cluster's, read from the database
            services = app.state.services
            # what an upgrade of the data changed, told to the browsers once (an event)
            await upgrades.announce(services.engine, settings.data_dir)
            token = services.access.token if settings.auth_required else None
            query = f"?token={token}" if token else ""
            # one write per line: unbuffered print() writes the text and its newline apart,
            # and a log line from another thread could land in between (stdout and stderr
            # often share one file)
            _line(f"codey-server listening on http://{host}:{port}")
            _line(providers_line(services.agent.providers.values(),
                                 services.engine.context.file_providers, base))
            _line(f"Open {base}/{query} in your browser")

        task = asyncio.create_task(announce())
        await server.serve(sockets=[sock])
        task.cancel()

    run_loop(run())
    return 0


def providers_line(providers: Iterable[ModelProvider], from_file: Collection[str],
                   base: str) -> str:
    """Where the server stands with models: the providers it loaded, or what to do."""
    said = [f"{p.name} ({p.config.kind}, "
            f"{len(p.models)} model{'s' if len(p.models) != 1 else ''}"
            f"{'' if p.name in from_file else ', from Settings'})" for p in providers]
    if not said:
        return f"codey-server: no model provider: open Settings → Models ({base}/#/settings)"
    return "codey-server: model providers: " + ", ".join(said)


def _line(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop where it is installed (everywhere but Windows), else on asyncio's
    own loop. ``CODEY_EVENT_LOOP=asyncio`` picks asyncio's loop, e.g. to rule uvloop out.

    Why uvloop: every action crosses the worker socket twice, and uvloop's socket and
    callback handling in C cut a 1 KiB ``read_file`` round trip by about a fifth
    (``scripts/bench/actions.py``).
    """
    if os.environ.get("CODEY_EVENT_LOOP", "").lower() != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(main)
    return asyncio.run(main)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        # SIGPIPE stays ignored (Python's default): with SIG_DFL a write to a socket whose
        # peer had just reset it would kill the whole server instead of raising EPIPE
        return serve(args)
    if args.command == "url":
        return print_url(args)
    if args.command == "backup":
        return backup_data(args)
    if args.command == "restore":
        return restore_data(args)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
