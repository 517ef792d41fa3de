"""``codey-worker``: pair this machine with a Codey server and run its actions.

Commands (each has ``--help`` with an example)::

    codey-worker [--server URL]          pair if needed, then connect and serve
    codey-worker --version               print the version (every Codey package has the same)
    codey-worker status                  paired? worker id, server, roots, MCP servers, sandbox
    codey-worker unpair                  forget this machine's identity (worker.json)
    codey-worker apply-patch PATCH       apply a Codex-format patch in the current directory

Exit codes: 0 done (or stopped by a signal), 1 not paired / pairing refused / patch failed,
2 bad usage or a bad config file, 3 the server no longer knows this machine (unlinked),
4 the server speaks another protocol version (the message says which side to upgrade).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from codey_protocol.version import __version__
from codey_worker.config import (
    ConfigError,
    codey_home,
    delete_identity,
    load_config,
    load_identity,
    resolve_server,
    save_identity,
)
from codey_worker.console import WorkerConsole

__all__ = ["build_parser", "main", "run_loop"]

T = TypeVar("T")

EXIT_NOT_PAIRED = 1
EXIT_USAGE = 2

_RUN_HELP = """\
Pair this machine with a Codey server if it is not paired yet (prints one line with a link
to open in the browser; nothing is typed here), then connect and run the server's actions
until stopped with Ctrl-C or SIGTERM.

The server URL comes from --server, else $CODEY_SERVER, else the one stored when pairing.
Files live in $CODEY_HOME (default ~/.codey).

example:
  codey-worker --server http://127.0.0.1:8600
"""

_STATUS_HELP = """\
Show whether this machine is paired, its worker id, the server, the allowed roots, the
configured MCP servers and the sandbox commands run in. Exits 0 when paired, 1 when not.

example:
  codey-worker status
"""

_UNPAIR_HELP = """\
Delete this machine's identity (worker.json) so the next run pairs again. The server keeps
its record until you revoke the worker in the browser.

example:
  codey-worker unpair
"""

_APPLY_HELP = """\
Apply a patch in the Codex apply_patch format to files under the current directory. PATCH is
the patch text itself, a file holding it, or - to read it from stdin. All or nothing: a patch
that does not apply changes no file. Prints one line per file (M/A/D/R path (+added -removed)).

example:
  codey-worker apply-patch fix.patch
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codey-worker", description=_RUN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"codey-worker {__version__}",
                        help="print the version and exit")
    parser.add_argument("--server", metavar="URL",
                        help="the Codey server, e.g. http://127.0.0.1:8600")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, text, summary in (
        ("status", _STATUS_HELP, "show whether this machine is paired, and with what"),
        ("unpair", _UNPAIR_HELP, "forget this machine's identity"),
        ("apply-patch", _APPLY_HELP, "apply a Codex-format patch in the current directory"),
    ):
        cmd = sub.add_parser(name, help=summary, description=text,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == "apply-patch":
            cmd.add_argument("patch", metavar="PATCH", help="patch text, a file, or - for stdin")
    return parser


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on asyncio's own loop; ``CODEY_EVENT_LOOP=uvloop`` picks uvloop where it
    is installed (the server's default; ``asyncio`` there turns it off).

    Why not uvloop in the worker (issue 27, ``scripts/bench/actions.py`` d, a and f): it
    spawns a command with libuv's ``fork``, where asyncio's loop uses CPython's ``vfork``
    path, and a command step took 5–7 ms on uvloop against 1.4–1.7 ms on asyncio's loop
    (the bare spawn of ``true``: 3.5–4.5 ms against 0.7–0.9 ms); a 1 KiB ``read_file``
    round trip measured the same on both (0.52–0.57 against 0.54–0.60 ms, the server on
    uvloop); and an idle worker that never imports uvloop is 2.1 MiB smaller.
    """
    with worker_runner() as runner:
        return runner.run(main)


def worker_runner() -> asyncio.Runner:
    """The worker's event loop (see :func:`run_loop`), for it and for the benches that time
    its executors: asyncio's, its children waited for through pidfds, or uvloop."""
    if os.environ.get("CODEY_EVENT_LOOP", "").lower() == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    watch_children_by_pidfd()
    return asyncio.Runner()


def watch_children_by_pidfd() -> None:
    """Wait for the commands' exits on the loop, through a pidfd each (Linux 5.3+), as
    Python 3.12 does by default. Python 3.11's default waits for each child in a thread of
    its own: one more thread per command, started at each spawn, and one per process an
    agent keeps running (``exec``). Where there are no pidfds (an older kernel, a seccomp
    filter that refuses them, another OS) the default stays."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return
    asyncio.set_child_watcher(asyncio.PidfdChildWatcher())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    args = build_parser().parse_args(argv)
    console = WorkerConsole()
    home = codey_home()
    try:
        if args.command == "status":
            return _status(home, args.server, console)
        if args.command == "unpair":
            return _unpair(home, console)
        if args.command == "apply-patch":
            from codey_worker.patch import apply_patch_cli

            return apply_patch_cli(args.patch, Path.cwd(), sys.stdout)
        return _run(home, args.server, console)
    except ConfigError as exc:
        console.error(str(exc))
        return EXIT_USAGE


def _status(home: Path, server_flag: str | None, console: WorkerConsole) -> int:
    identity = load_identity(home)
    config = load_config(home)
    server = resolve_server(server_flag, identity)
    if identity is None:
        console.info(f"not paired (home: {home})")
    else:
        console.info(f"paired as {identity.worker_id}")
    console.info(f"server: {server or '(none)'}")
    console.info("allowed roots: " + ", ".join(str(r) for r in config.allowed_roots))
    if config.policy.worktrees_dir is not None:
        console.info(f"worktrees: {config.policy.worktrees_dir}")
    if config.policy.denied_commands:
        console.info("denied commands: " + ", ".join(config.policy.denied_commands))
    if config.policy.denied_mcp_tools:
        console.info("denied mcp tools: " + ", ".join(config.policy.denied_mcp_tools))
    if config.mcp_servers:
        for name, spec in config.mcp_servers.items():
            console.info(f"mcp server {name}: {' '.join([spec.command, *spec.args])}")
    else:
        console.info("mcp servers: (none)")
    from codey_worker.sandbox import detect

    console.info(f"sandbox: {detect().describe()}")
    return 0 if identity is not None else EXIT_NOT_PAIRED


def _unpair(home: Path, console: WorkerConsole) -> int:
    if delete_identity(home):
        console.info("unpaired: this machine will pair again on the next run")
    else:
        console.info("not paired; nothing to do")
    return 0


def _run(home: Path, server_flag: str | None, console: WorkerConsole) -> int:
    from codey_worker.connection import Worker
    from codey_worker.pairing import PairingError, PairingRefused, pair

    logging.basicConfig(level=os.environ.get("CODEY_WORKER_LOG", "WARNING").upper(),
                        format="%(levelname)s %(name)s: %(message)s")
    config = load_config(home)
    identity = load_identity(home)
    server = resolve_server(server_flag, identity)
    if not server:
        console.error("no server: pass --server URL (or set CODEY_SERVER)")
        return EXIT_USAGE
    if not server.startswith(("http://", "https://")):
        console.error(f"the server URL must start with http:// or https://, got {server}")
        return EXIT_USAGE
    if identity is None:
        try:
            identity = pair(server, [str(r) for r in config.allowed_roots], console)
        except PairingRefused as exc:
            console.pairing_refused(exc.status)
            return EXIT_NOT_PAIRED
        except PairingError as exc:
            console.error(str(exc))
            return EXIT_NOT_PAIRED
        except KeyboardInterrupt:
            return 130
        save_identity(home, identity)
        console.paired(identity.worker_id)
    worker = Worker(identity, server, config, home, console)
    return run_loop(worker.run())


if __name__ == "__main__":
    sys.exit(main())
