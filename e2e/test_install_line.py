"""The "Link a machine" dialog's install line, run exactly as shown, in a fresh environment.

The line fetches the worker's and the protocol's wheels from this server's ``/dl/`` and their
dependencies (websockets, rich, mcp, …) from PyPI, with ``uvx``: no workspace, no checkout
on the path. The worker it starts is then paired through the dialog.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

from codey_testkit.procs import ManagedProcess

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

REPO = Path(__file__).resolve().parents[1]
_NETWORK_ENV = frozenset({"SSL_CERT_FILE", "SSL_CERT_DIR", "UV_NATIVE_TLS", "UV_SYSTEM_CERTS",
                          "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL"})


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        kids = []
        # any thread may have spawned a child: uv is multithreaded
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                kids += [int(k) for k in children.read_text().split()]
            except OSError:
                continue
        found += kids
        todo += kids
    return found


def test_install_line_installs_and_pairs_a_worker(stack: Stack, page: Page) -> None:
    server = stack.server()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    stack.open(page, "#/")
    page.get_by_test_id("link-machine").click()
    line_el = page.get_by_test_id("install-line")
    expect(line_el).to_contain_text("codey-worker --server", timeout=120_000)  # builds once
    line = line_el.inner_text().strip()
    assert re.fullmatch(
        rf"uvx --from {re.escape(server.url)}/dl/\w+/codey_worker-[\w.]+-py3-none-any\.whl "
        rf"--with {re.escape(server.url)}/dl/\w+/codey_protocol-[\w.]+-py3-none-any\.whl "
        rf"codey-worker --server {re.escape(server.url)}", line), line
    page.get_by_test_id("install-line-copy").click()
    assert page.evaluate("navigator.clipboard.readText()") == line
    pip_line = page.get_by_test_id("install-line-pip").inner_text()
    assert "/bin/pip install " in pip_line and pip_line.endswith(f"--server {server.url}")

    # a machine that has never seen this repository: its own home, a cwd outside the
    # checkout, no virtualenv or Python path from the test run; only uv and bash from PATH
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv is needed for the install line"
    home = stack.tmp / "machine"
    (home / "work").mkdir(parents=True)
    env = {
        "HOME": str(home), "PATH": f"{Path(uv).parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        # the uv cache only saves downloading the PyPI dependencies again
        "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR",
                                       str(Path.home() / ".cache" / "uv")),
        # how this network reaches PyPI (proxies, a local CA) is the machine's, not ours
        **{k: v for k, v in os.environ.items()
           if k.lower().endswith("_proxy") or k in _NETWORK_ENV},
    }
    machine = ManagedProcess("installed-worker", log_dir=stack.tmp / "logs")
    stack._exits.callback(machine.stop)
    machine.start(["bash", "-c", line], env=env, cwd=home / "work", inherit_env=False)
    printed = machine.wait_for_line(r"Open (\S+)/#/pair/(\S+) to link this machine",
                                    timeout=240)
    assert printed.group(1) == server.url

    # it runs from the wheels uv fetched (an environment in uv's cache), not from this
    # checkout: the program the worker process runs is the uvx environment's codey-worker
    cmdlines = [Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace").split("\0")
                for p in [machine.pid, *_descendants(machine.pid)]]
    scripts = [arg for argv in cmdlines for arg in argv if arg.endswith("/bin/codey-worker")]
    assert scripts, cmdlines
    for script in scripts:
        assert Path(script).is_relative_to(env["UV_CACHE_DIR"]), script
        assert not Path(script).resolve().is_relative_to(REPO), script

    # paired through the dialog: the request shows up in the open panel
    card = page.get_by_test_id("pair-request")
    expect(card.get_by_test_id("pair-code")).to_have_text(printed.group(2))
    card.get_by_test_id("pair-approve").click()
    expect(page.get_by_test_id("pair-empty")).to_be_visible()  # the code was used
    worker_card = page.get_by_test_id("worker-card")
    expect(worker_card.get_by_test_id("worker-status")).to_have_text("connected",
                                                                     timeout=60_000)
    assert (home / ".codey" / "worker.json").is_file()
