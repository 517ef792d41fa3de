"""The end-to-end suite: Playwright (Debian's Chromium) over the real three-process stack.

Every test builds its own stack through the :func:`stack` fixture — the scripted model server,
``codey-server`` on port 0 with a temporary data dir, workers with temporary homes — and logs
its page in with the server's access token (:meth:`Stack.open`). Nothing is shared between
tests except the browser process itself (pytest-playwright's session-scoped ``browser``; every
test gets a fresh context, so cookies and storage are its own).

On failure pytest-playwright keeps a screenshot in ``e2e/test-results/`` and the processes'
logs are printed. For a trace as well, run with ``--tracing retain-on-failure`` (open it with
``uv run playwright show-trace <zip>``): it is off by default because recording one costs
Chromium a screencast of every test (the suite's browser CPU fell by a third without it), and
CI's traces are never read.

The servers and model servers are forked from a process that imported them once
(``codey_testkit.zygote``); they are still processes of their own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.scenarios import provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

ARTIFACTS = Path(__file__).resolve().parent / "test-results"

#: How long a UI expectation may take: the stack runs on 2 busy cores in CI.
EXPECT_TIMEOUT_MS = 20_000


def pytest_configure(config: pytest.Config) -> None:
    """Screenshots of failing tests, unless the command line chose otherwise."""
    opt = config.option
    if getattr(opt, "screenshot", "off") == "off":
        opt.screenshot = "only-on-failure"
    if getattr(opt, "output", "test-results") == "test-results":
        opt.output = str(ARTIFACTS)
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    # pytest-base-url (pulled in by pytest-playwright) defines one; not ours to fix
    config.addinivalue_line(
        "filterwarnings", "ignore:Session-scoped fixtures defined as instance methods")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_type_launch_args, "executable_path": "/usr/bin/chromium",
            "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": {"width": 1280, "height": 800},
            "accept_downloads": True}


class Stack:
    """One test's processes and the helpers to drive its page.

    Build it with :meth:`model`, :meth:`server`, :meth:`worker`; everything started is stopped
    when the test ends, in reverse order. (Helpers live here rather than in a module because
    the suite runs with ``--import-mode=importlib``: test modules cannot import siblings.)
    """

    def __init__(self, tmp_path: Path, exits: contextlib.ExitStack) -> None:
        self.tmp = tmp_path
        self._exits = exits
        self.model_server: ModelServerHandle | None = None
        self.srv: ServerProcess | None = None
        self.workers: list[WorkerProcess] = []

    # scripts for the model --------------------------------------------------------------

    @staticmethod
    def shell(*argv: str) -> dict[str, Any]:
        """A scripted model's ``shell`` tool call."""
        return {"name": "shell", "arguments": {"command": list(argv)}}

    @staticmethod
    def gated(name: str) -> dict[str, Any]:
        """A ``shell`` call that prints ``<name>-start``, waits for the file ``go`` in its
        workdir (see :meth:`release`; at most 60 s), then prints ``<name>-end``: a command that
        runs exactly as long as the test wants, with no sleeps to tune."""
        return Stack.shell("bash", "-c", f"echo {name}-start; for i in $(seq 600); do "
                           f"[ -f go ] && break; sleep 0.1; done; echo {name}-end")

    @staticmethod
    def release(workdir: str | Path) -> None:
        """Let the :meth:`gated` command running in ``workdir`` finish."""
        (Path(workdir) / "go").touch()

    # processes --------------------------------------------------------------------------

    def model(self, script: dict[str, Any]) -> ModelServerHandle:
        handle = start_model_server(script, self.tmp / "model")
        self._exits.callback(handle.stop)
        self.model_server = handle
        return handle

    def server(self, config: dict[str, Any] | None = None,
               extra_args: list[str] | None = None) -> ServerProcess:
        """Start codey-server (with ``extra_args`` after ``serve``, e.g. ``--clock-file``);
        with a model started, it is the default provider."""
        if config is None and self.model_server is not None:
            config = provider_config(self.model_server)
        proc = ServerProcess(self.tmp / "server", config=config, log_dir=self.tmp / "logs",
                             extra_args=extra_args)
        self._exits.callback(proc.stop)
        proc.start()
        self.srv = proc
        return proc

    def worker(self, name: str = "worker", *, pair: bool = True,
               config: dict[str, Any] | None = None) -> WorkerProcess:
        """Start a worker with its own home (and ``config`` in its worker-config.json);
        paired (through the API) unless ``pair=False``."""
        assert self.srv is not None, "start the server first"
        w = WorkerProcess(self.srv, self.tmp / name, name=name, config=config)
        self._exits.callback(w.stop)
        self.workers.append(w)
        w.start(pair=pair)
        return w

    @staticmethod
    def workdir(worker: WorkerProcess, name: str) -> str:
        path = Path(worker.workdir(name))
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    # the page ---------------------------------------------------------------------------

    def open(self, page: Page, hash_: str = "#/") -> Page:
        """Log ``page`` in with the access token, open ``hash_``, wait for a live socket."""
        assert self.srv is not None
        if self.srv.token is not None:
            page.goto(f"{self.srv.url}/?token={self.srv.token}")
        page.goto(f"{self.srv.url}/{hash_}")
        expect(page.get_by_test_id("conn-state")).to_have_text("live")
        return page

    @staticmethod
    def new_session(page: Page, worker: WorkerProcess, workdir: str, prompt: str,
                    policy: str = "full-auto", plan_mode: bool = False) -> str:
        """Create a session with the dashboard's dialog; returns its id (the page then shows
        the session view)."""
        if page.get_by_test_id("dashboard").count() == 0:
            page.evaluate("location.hash = '#/'")
        page.get_by_test_id("new-session").click()
        dialog = page.get_by_test_id("new-session-dialog")
        expect(dialog).to_be_visible()
        dialog.get_by_test_id("ns-worker").select_option(worker.worker_id)
        dialog.get_by_test_id("ns-workdir").fill(workdir)
        dialog.get_by_test_id("ns-policy").select_option(policy)
        if plan_mode:
            dialog.get_by_test_id("ns-plan-mode").check()
        dialog.get_by_test_id("ns-prompt").fill(prompt)
        dialog.get_by_test_id("ns-submit").click()
        view = page.get_by_test_id("session-view")
        expect(view).to_be_visible()
        sid = view.get_attribute("data-session-id")
        assert sid
        return sid

    @staticmethod
    def open_session(page: Page, sid: str) -> Locator:
        """Show session ``sid`` (no reload: the hash changes) and return its view."""
        page.evaluate("(sid) => { location.hash = '#/session/' + sid; }", sid)
        view = page.locator(f"[data-testid=session-view][data-session-id='{sid}']")
        expect(view).to_be_visible()
        return view

    @staticmethod
    def items(page: Page, kind: str | None = None) -> Locator:
        """The session view's item nodes (of one ``kind``)."""
        sel = "[data-testid=session-view] [data-testid=item]"
        return page.locator(sel + (f"[data-kind={kind}]" if kind else ""))

    @staticmethod
    def status(page: Page) -> Locator:
        """The session view's status chip."""
        return page.locator("[data-testid=session-view] .s-controls [data-testid=session-status]")

    @staticmethod
    def dom_item_ids(page: Page) -> list[str]:
        ids: list[str] = page.eval_on_selector_all(
            "[data-testid=session-view] [data-testid=item]",
            "els => els.map(e => e.dataset.itemId)")
        return ids

    @staticmethod
    def browser_state(page: Page) -> dict[str, Any]:
        """The browser's store, as JSON would carry it."""
        state: dict[str, Any] = json.loads(
            page.evaluate("JSON.stringify(window.__codey.state())"))
        return state

    @staticmethod
    def wait_until(predicate: Callable[[], Any], timeout: float = 20.0,
                   what: str = "a condition") -> Any:
        return wait_until(predicate, timeout=timeout, interval=0.05, what=what)

    def logs(self) -> str:
        parts = []
        for log in sorted(self.tmp.rglob("*.log")):
            text = log.read_text(errors="replace")
            parts.append(f"----- {log.relative_to(self.tmp)} (last 60 lines)\n"
                         + "\n".join(text.splitlines()[-60:]))
        return "\n".join(parts)


@pytest.fixture
def stack(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    with contextlib.ExitStack() as exits:
        built = Stack(tmp_path, exits)
        # Gated commands outlive a killed worker; let them end with the test.
        exits.callback(_release_all, tmp_path)
        yield built
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(built.logs())


def _release_all(tmp_path: Path) -> None:
    for root in tmp_path.glob("*/projects"):
        for wd in root.iterdir():
            if wd.is_dir():
                Stack.release(wd)
