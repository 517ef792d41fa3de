"""An idle worker stays small: what it does not need while idle is imported when first used
(issue 12: the MCP SDK alone was ~30 MB and 1.5 s; issue 27: an idle worker ≤ 30 MB).

- the MCP SDK, watchfiles, PyYAML, pydantic: with an MCP server, a watched session, a skill;
- cryptography (~11 MiB resident): never in the worker; the key is made and used in a child
  process (``codey_worker.keys``);
- rich: only to print to a terminal (a log file gets plain lines);
- the executors' own modules (patch, edit, images, search, processes, context): with their
  first action;
- sqlite3 (its library and the records' connection, ~1.7 MiB): with the first action's
  record (``codey_worker.records``);
- uvloop (2.1 MiB of an idle worker): never, unless ``CODEY_EVENT_LOOP=uvloop`` asks for it
  (``codey_worker.cli.run_loop``);
- ctypes (0.3 MiB): only to trim the C heap of a worker that compiled its modules from
  source, once connected (``codey_worker.connection.release_free_memory``).
"""

from __future__ import annotations

import subprocess
import sys

LAZY = ("mcp", "watchfiles", "yaml", "pydantic", "cryptography", "rich", "difflib",
        "codey_worker.patch", "codey_worker.edit", "codey_worker.images",
        "codey_worker.search", "codey_worker.processes", "codey_worker.context",
        "codey_worker.workspaces", "sqlite3", "ctypes",
        "uvloop")


def loaded_after(code: str) -> list[str]:
    """Which of LAZY a fresh interpreter has imported after running ``code`` (its stdout is
    a pipe, not a terminal, as for a worker run as a service)."""
    script = f"import sys\n{code}\nprint(sorted(m for m in {LAZY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120)
    return out.stdout.strip().splitlines()[-1:]


def test_starting_the_worker_imports_none_of_the_heavy_optional_libraries() -> None:
    assert loaded_after("import codey_worker.cli, codey_worker.connection") == ["[]"]


def test_the_worker_runs_on_asyncio_s_loop_without_importing_uvloop() -> None:
    code = ("from codey_worker.cli import run_loop\n"
            "async def main():\n    pass\n"
            "run_loop(main())")
    assert loaded_after(code) == ["[]"]


def test_what_an_idle_connected_worker_does_loads_none_of_them(tmp_path: object) -> None:
    """Print its lines, sign the server's nonce, build its dispatcher: still none."""
    code = f"""
import asyncio, tempfile
from pathlib import Path
from codey_worker.actions import ActionDispatcher
from codey_worker.console import WorkerConsole
from codey_worker.keys import b64url_decode
from codey_worker.pairing import generate_key, public_key_b64, sign
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords

console = WorkerConsole()
console.sandbox("bubblewrap 0.8.0", True)
console.connected("http://127.0.0.1:1")
key = generate_key()
signature, public = sign(key, b"nonce:wrk:1.0"), public_key_b64(key)
assert len(b64url_decode(signature)) == 64 and len(b64url_decode(public)) == 32
home = Path({str(tmp_path)!r})

async def main():
    async def send(frame):
        pass
    d = ActionDispatcher(send, ActionRecords(home / "r.sqlite3"),
                         LocalPolicy(allowed_roots=[home]), home=home)
    await d.shutdown()
asyncio.run(main())
"""
    assert loaded_after(code) == ["[]"]


def test_each_executor_loads_its_module_with_its_first_action(tmp_path: object) -> None:
    code = f"""
import asyncio
from pathlib import Path
from codey_protocol.worker import Grep
from codey_worker.actions import ActionDispatcher
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords

home = Path({str(tmp_path)!r})

async def main():
    async def send(frame):
        pass
    d = ActionDispatcher(send, ActionRecords(home / "r.sqlite3"),
                         LocalPolicy(allowed_roots=[home]), home=home)
    await d.handle(Grep(action_id="g", session_id="s", workdir=str(home), pattern="x"))
    await d.wait_idle()
asyncio.run(main())
"""
    # (ctypes comes with the first file action: the file API's openat2)
    assert loaded_after(code) == ["['codey_worker.search', 'ctypes']"]
