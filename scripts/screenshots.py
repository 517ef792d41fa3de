"""Screenshots of the web client for people (the README), taken from a real stack.

    ./scripts/screenshots              # writes docs/screenshots/*.png
    ./scripts/screenshots --out DIR    # somewhere else

Starts the scripted model server, a local OIDC provider, codey-server (port 0, temporary data
dir) and two workers, drives a few sessions to interesting states through the HTTP API and
photographs them with Playwright and Debian's Chromium (/usr/bin/chromium) at 1280×800:

    dashboard.png   workers and several sessions (running, waiting for approval, done)
    session.png     a session with a plan, a diff and command output
    answer.png      the same session's answer: Markdown with highlighted code and a table
    approval.png    a pending approval
    write-approval.png  a write waiting for approval: the diff against the file as it is
    pairing.png     a machine asking to be linked (host details and the code to compare)
    link-machine.png    the dashboard's Link a machine panel: the request above the install lines
    login.png       the login banner of a provider that needs OAuth (the OIDC provider)
    dark.png        the session view in the dark theme
    dark-dashboard.png  the dashboard in the dark theme, a machine's recent log open
    changes.png     a worktree session's Changes view: a review comment, a cache and an image
                    left out of the next commit
    goal.png        a session's goal (/goal $ python3 -m unittest) met after a failing and a
                    passing check: its box with the attempts and the last check's output
    login-screen.png    what a browser without the login cookie sees
    mobile-dashboard.png, mobile-session.png   the same at 390 px wide (a phone)
    mobile-approval.png   a pending approval on a phone, above the prompt box
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect, sync_playwright

from codey_testkit.model_handle import start_model_server
from codey_testkit.oidc import OIDCProviderProcess
from codey_testkit.scenarios import provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 800}

APP_PY = '''def add(a, b):
    """Return the sum of a and b."""
    return a - b


def mul(a, b):
    return a * b
'''

TEST_APP_PY = '''import unittest

from app import add, mul


class AppTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)
'''

FIX_PATCH = """*** Begin Patch
*** Update File: app.py
@@ def add(a, b):
     \"\"\"Return the sum of a and b.\"\"\"
-    return a - b
+    return a + b
*** End Patch"""

CLI_PY = '''import argparse


def main():
    parser = argparse.ArgumentParser(prog="greet")
    parser.add_argument("name")
    args = parser.parse_args()
    print(f"Hello, {args.name}!")


if __name__ == "__main__":
    main()
'''

CLI_PATCH = """*** Begin Patch
*** Update File: cli.py
@@ def main():
     parser = argparse.ArgumentParser(prog="greet")
     parser.add_argument("name")
+    parser.add_argument("-v", "--verbose", action="store_true",
+                        help="explain what is being done")
     args = parser.parse_args()
+    if args.verbose:
+        print(f"greeting {args.name!r}")
     print(f"Hello, {args.name}!")
*** End Patch"""

README_MD = """# greet

A tiny command line tool that greets people.

Install it with `pip install -e .`, then run `greet Ada`.
"""

SUITE = ("echo 'collecting ... collected 48 items'; "
         "for f in api auth models views; do echo \"tests/test_$f.py ............ [ok]\"; "
         "sleep 0.1; done; for i in $(seq 1200); do [ -f go ] && break; sleep 0.1; done")


NOTES_README = """# calc

Small arithmetic helpers.

## Usage

    from app import add, mul
"""

NOTES_README_AFTER = NOTES_README + """
## Tests

    python3 -m unittest -v
"""


#: a small binary file (a picture's first bytes and some more)
LOGO = b"\x89PNG\r\n\x1a\n\x00" + bytes(range(256)) * 12


def _shell(*argv: str) -> dict[str, Any]:
    return {"name": "shell", "arguments": {"command": list(argv)}}


def _plan(*steps: tuple[str, str], explanation: str = "") -> dict[str, Any]:
    args: dict[str, Any] = {"plan": [{"step": s, "status": st} for s, st in steps]}
    if explanation:
        args["explanation"] = explanation
    return {"name": "update_plan", "arguments": args}


SCRIPT: dict[str, Any] = {"model": ["gpt-scripted", "gpt-scripted-mini"],
                          "options": {"chunk_size": 24}, "steps": [
    # 1. fix a failing test: plan, read, patch (a diff), run the tests (output), summary
    {"match": {"user": "Fix the failing test"},
     "reply": {"text": "I'll reproduce it first, then fix the code.",
               "calls": [_plan(("Read app.py", "in_progress"), ("Fix add()", "pending"),
                               ("Run the tests", "pending"),
                               explanation="A small bug, probably in add()."),
                         {"name": "read_file", "arguments": {"path": "app.py"}}]}},
    {"match": {"tool": "read_file", "tool_output": "return a - b"},
     "reply": {"text": "`add()` subtracts instead of adding. Patching it:",
               # the server replays each call as its own assistant turn, so the call a
               # step below matches comes last
               "calls": [_plan(("Read app.py", "done"), ("Fix add()", "done"),
                               ("Run the tests", "in_progress")),
                         {"name": "apply_patch", "arguments": {"input": FIX_PATCH}}]}},
    {"match": {"tool": "apply_patch", "tool_output": "update app.py"},
     "reply": {"calls": [_shell("python3", "-m", "unittest", "-v")]}},
    {"match": {"tool": "shell", "tool_output": "OK"},
     "reply": {"calls": [_plan(("Read app.py", "done"), ("Fix add()", "done"),
                               ("Run the tests", "done"))]}},
    {"match": {"tool": "update_plan"},
     "reply": {"text": "Fixed. `add()` in **app.py** returned `a - b`; it now returns:\n\n"
                       "```python\ndef add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n"
                       "    return a + b\n```\n\n"
                       "| test | before | after |\n|---|---|---|\n"
                       "| `test_add` | failed | **passes** |\n"
                       "| `test_mul` | passes | passes |\n\n"
                       "No other code calls `add()` with negative numbers, so nothing else "
                       "changes."}},
    # 2. a command waiting for approval (policy auto-edit: the patch goes through)
    {"match": {"user": "Add a --verbose flag"},
     "reply": {"text": "Adding the flag to the argument parser.",
               "calls": [{"name": "apply_patch", "arguments": {"input": CLI_PATCH}}]}},
    {"match": {"tool": "apply_patch", "tool_output": "cli.py"},
     "reply": {"text": "Let me try it.",
               "calls": [_shell("python3", "cli.py", "--verbose", "Ada")]}},
    # 3. a long test run, still going
    {"match": {"user": "Run the whole test suite"},
     "reply": {"calls": [_shell("bash", "-c", SUITE)]}},
    # 4. a write waiting for approval (policy suggest): its diff against the file
    {"match": {"user": "Document how to run the tests"},
     "reply": {"text": "Adding a Tests section to the README.",
               "calls": [{"name": "write_file", "arguments": {"path": "README.md",
                                                              "content": NOTES_README_AFTER}}]}},
    # 5. a finished question
    {"match": {"user": "Summarise the README"},
     "reply": {"calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]}},
    {"match": {"tool": "read_file", "tool_output": "greet"},
     "reply": {"text": "**greet** is a small CLI that prints a greeting. Install it with "
                       "`pip install -e .` and run `greet NAME`."}},
    # 6. a session in a worktree of its own: its change, in the Changes view
    {"match": {"user": "Greet in French"},
     "reply": {"calls": [{"name": "write_file", "arguments": {
         "path": "cli.py", "content": CLI_PY.replace("Hello", "Bonjour")}}]}},
    # 7. a goal (/goal $ python3 -m unittest): a turn that only looks, a failing check, the
    # fix (the steps of 1.), a passing check
    {"match": {"user": "Your goal for this session: $ python3 -m unittest"},
     "reply": {"text": "Running the tests to see what fails.",
               "calls": [_shell("python3", "-m", "unittest")]}},
    {"match": {"tool": "shell", "tool_output": "FAILED (failures=1)"},
     "reply": {"text": "`test_add` fails: `add()` subtracts."}},
    {"match": {"user": "`python3 -m unittest` exited 1"},
     "reply": {"calls": [{"name": "apply_patch", "arguments": {"input": FIX_PATCH}}]}},
    {"match": {"any": True}, "reply": {"text": "Done."}},
]}


def _wait(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"timed out waiting for {what}")


class Shots:
    def __init__(self, out: Path, tmp: Path, exits: contextlib.ExitStack) -> None:
        self.out = out
        self.tmp = tmp
        self.exits = exits

    def start(self) -> None:
        self.model = start_model_server(SCRIPT, self.tmp / "model")
        self.exits.callback(self.model.stop)
        self.oidc = OIDCProviderProcess(log_dir=self.tmp / "oidc", client_id="codey").start()
        self.exits.callback(self.oidc.stop)
        config = provider_config(self.model)
        config["providers"][0]["models"] = ["gpt-scripted", "gpt-scripted-mini"]
        self.config = config
        self.server = ServerProcess(self.tmp / "server", config=config,
                                    log_dir=self.tmp / "logs")
        self.exits.callback(self.server.stop)
        self.server.start()
        self.a = self._worker("laptop")
        self.b = self._worker("build-box")

    def _worker(self, name: str, *, pair: bool = True) -> WorkerProcess:
        w = WorkerProcess(self.server, self.tmp / name, name=name)
        self.exits.callback(w.stop)
        w.start(pair=pair)
        return w

    def _workdir(self, w: WorkerProcess, name: str, files: dict[str, str]) -> str:
        path = Path(w.workdir(name))
        path.mkdir(parents=True, exist_ok=True)
        for rel, text in files.items():
            (path / rel).write_text(text)
        return str(path)

    def _session(self, w: WorkerProcess, workdir: str, prompt: str, policy: str,
                 model: str = "gpt-scripted") -> str:
        r = self.server.http.post("/api/sessions", json={
            "worker_id": w.worker_id, "workdir": workdir, "prompt": prompt, "policy": policy,
            "provider": "scripted", "model": model})
        if r.status_code != 201:
            raise RuntimeError(f"creating a session failed: {r.status_code} {r.text}")
        return str(r.json()["session_id"])

    def _status(self, sid: str) -> str:
        return str(self.server.http.get(f"/api/sessions/{sid}").json()["status"])

    def sessions(self) -> None:
        wd1 = self._workdir(self.a, "calc", {"app.py": APP_PY, "test_app.py": TEST_APP_PY})
        self.fix = self._session(self.a, wd1, "Fix the failing test in test_app.py",
                                 "full-auto")
        _wait(lambda: self._status(self.fix) == "idle", "the fix session")
        wd2 = self._workdir(self.b, "greet", {"cli.py": CLI_PY, "README.md": README_MD})
        self.readme = self._session(self.b, wd2, "Summarise the README for a newcomer",
                                    "suggest", model="gpt-scripted-mini")
        _wait(lambda: self._status(self.readme) == "idle", "the README session")
        self.suite_dir = self._workdir(self.b, "shop", {})
        self.suite = self._session(self.b, self.suite_dir,
                                   "Run the whole test suite and report flaky tests",
                                   "full-auto")
        self.verbose = self._session(self.a, self._workdir(self.a, "greet", {"cli.py": CLI_PY}),
                                     "Add a --verbose flag to the greet CLI", "auto-edit")
        _wait(lambda: self._status(self.verbose) == "waiting_approval", "the approval")
        self.write = self._session(self.a, self._workdir(self.a, "calc-docs",
                                                         {"README.md": NOTES_README}),
                                   "Document how to run the tests", "suggest")
        _wait(lambda: self._status(self.write) == "waiting_approval", "the write's approval")
        _wait(lambda: "[ok]" in str(self.server.http.get(f"/api/sessions/{self.suite}").json()),
              "the test suite output")

    def open(self, page: Page, hash_: str, *, reload: bool = False) -> None:
        page.goto(f"{self.server.url}/{hash_}")
        if reload:  # a goto that changes only the hash does not load the page again
            page.reload()
        expect(page.get_by_test_id("conn-state")).to_have_text("live", timeout=20_000)

    def shoot(self, page: Page, name: str) -> None:
        # Toasts from the stack's start are news for a live user, noise in a picture.
        page.evaluate("document.querySelectorAll('[data-testid=toast]')"
                      ".forEach(t => t.remove())")
        page.wait_for_timeout(300)  # let the last frame batch land
        path = self.out / name
        page.screenshot(path=str(path))
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")

    def run(self, page: Page) -> None:
        if self.server.token:
            page.goto(f"{self.server.url}/?token={self.server.token}")
        self.open(page, "#/")
        expect(page.locator("[data-testid=session-card]")).to_have_count(5)
        self.shoot(page, "dashboard.png")

        self.open(page, f"#/session/{self.fix}")
        expect(page.get_by_test_id("diff")).to_be_visible()
        expect(page.locator("[data-testid=item][data-kind=tool_call] [data-testid=tool-output]")
               .last).to_contain_text("OK")
        # Keep the diff and the test run in view: scroll to the patch.
        page.get_by_test_id("diff").first.scroll_into_view_if_needed()
        page.locator("[data-testid=session-items]").evaluate(
            "(el) => { const d = el.querySelector('[data-testid=diff]');"
            " el.scrollTop = d.closest('[data-testid=item]').offsetTop - el.offsetTop - 12; }")
        self.shoot(page, "session.png")
        answer = page.locator("[data-testid=item][data-kind=assistant_message]").last
        expect(answer.locator("table")).to_be_visible()
        page.locator("[data-testid=session-items]").evaluate(
            "(el) => { el.scrollTop = el.scrollHeight; }")
        self.shoot(page, "answer.png")
        page.get_by_test_id("theme-toggle").click()
        expect(page.locator("html")).to_have_attribute("data-theme", "dark")
        self.shoot(page, "dark.png")
        self.open(page, "#/")
        laptop = page.locator(f"[data-testid=worker-card][data-worker-id='{self.a.worker_id}']")
        laptop.locator("[data-testid=worker-log] summary").click()
        expect(laptop.get_by_test_id("worker-log-lines")).to_contain_text("running")
        self.shoot(page, "dark-dashboard.png")
        page.get_by_test_id("theme-toggle").click()

        self.open(page, f"#/session/{self.verbose}")
        expect(page.get_by_test_id("approval")).to_be_visible()
        self.shoot(page, "approval.png")
        self.open(page, f"#/session/{self.write}")
        expect(page.get_by_test_id("approval")).to_be_visible()
        expect(page.get_by_test_id("diff")).to_be_visible()
        self.shoot(page, "write-approval.png")

        # a goal: checked after each turn until its command exits 0
        wd = self._workdir(self.a, "calc-goal", {"app.py": APP_PY, "test_app.py": TEST_APP_PY})
        r = self.server.http.post("/api/sessions", json={
            "worker_id": self.a.worker_id, "workdir": wd, "policy": "full-auto",
            "goal": "$ python3 -m unittest", "title": "Make the tests pass"})
        r.raise_for_status()
        sid = r.json()["session_id"]
        _wait(lambda: (self.server.http.get(f"/api/sessions/{sid}").json()["goal"] or {}).get(
            "status") == "met", "the goal")
        self.open(page, f"#/session/{sid}")
        expect(page.get_by_test_id("goal-box")).to_have_attribute("data-goal-status", "met")
        # the second turn's prompt at the top: what the failing check told the model
        page.locator("[data-testid=session-items]").evaluate(
            "(el) => { const g = el.querySelectorAll('[data-testid=goal-prompt]')[1];"
            " el.scrollTop = g.closest('[data-testid=item]').offsetTop - el.offsetTop - 12; }")
        self.shoot(page, "goal.png")

        newcomer = self._worker("new-laptop", pair=False)
        assert newcomer.pair_url is not None
        page.goto(newcomer.pair_url)
        expect(page.get_by_test_id("pair-request")).to_be_visible()
        self.shoot(page, "pairing.png")
        # the dashboard's Link a machine: the request first, the install lines under it
        self.open(page, "#/link")
        panel = page.get_by_test_id("pair-panel")
        expect(panel.get_by_test_id("pair-request")).to_be_visible()
        expect(panel.get_by_test_id("install-line")).to_be_visible(timeout=180_000)  # (built)
        self.shoot(page, "link-machine.png")

        # The login banner: the same server restarted with a provider that needs OAuth.
        self.server.config = {**self.config, "providers": [*self.config["providers"], {
            "name": "acme-ai", "kind": "responses", "base_url": self.model.base_url,
            "models": ["acme-large"], "auth": "oauth", "issuer": self.oidc.issuer,
            "client_id": "codey"}]}
        Path(self.suite_dir, "go").touch()
        self.server.restart()
        self.a.wait_connected()
        self.b.wait_connected()
        _wait(lambda: self._status(self.suite) == "idle", "the suite session")
        self.open(page, "#/", reload=True)  # the app reads /api/config once, on load
        expect(page.get_by_test_id("login-banner")).to_be_visible()
        self.shoot(page, "login.png")

        # Settings → Models: config.json's two, and one added here, tested
        self.server.http.post("/api/providers", json={
            "name": "local", "kind": "chat", "base_url": self.model.base_url, "auth": "none",
            "models": ["gpt-scripted", "gpt-scripted-mini"]}).raise_for_status()
        self.open(page, "#/settings")
        local = page.locator("[data-testid=provider-card][data-provider=local]")
        local.get_by_test_id("provider-test").click()
        expect(local.get_by_test_id("provider-test-result")).to_contain_text("answered")
        self.shoot(page, "models.png")

        # a session in a worktree: the Changes view with a review comment, and what a commit
        # leaves out unless ticked (a bytecode cache, a changed image)
        repo = self._workdir(self.a, "greet-fr", {"cli.py": CLI_PY})
        Path(repo, "logo.png").write_bytes(LOGO)
        for argv in (["init", "-q", "-b", "main"], ["add", "-A"],
                     ["-c", "user.name=Ada", "-c", "user.email=ada@example.com", "commit", "-qm",
                      "A greeting CLI"]):
            subprocess.run(["git", "-C", repo, *argv], check=True, capture_output=True)
        r = self.server.http.post("/api/sessions", json={
            "worker_id": self.a.worker_id, "workdir": repo, "prompt": "Greet in French",
            "policy": "full-auto", "worktree": {"base": "main"}})
        r.raise_for_status()
        sid = r.json()["session_id"]
        _wait(lambda: self._status(sid) == "idle" and self.server.http.get(
            f"/api/sessions/{sid}").json()["worktree"]["files"], "the worktree session")
        worktree = Path(self.server.http.get(f"/api/sessions/{sid}").json()["workdir"])
        (worktree / "__pycache__").mkdir()
        (worktree / "__pycache__" / "cli.cpython-311.pyc").write_bytes(bytes(1500))
        (worktree / "logo.png").write_bytes(LOGO + bytes(2048))
        self.open(page, f"#/session/{sid}")
        page.get_by_test_id("open-changes").click()
        changes = page.get_by_test_id("changes-dialog")
        changes.locator(".d-line.d-add").first.click()
        changes.get_by_test_id("comment-input").fill("Keep the English one as --lang en")
        changes.get_by_test_id("comment-add").click()
        self.shoot(page, "changes.png")


    def login_screen(self, page: Page) -> None:
        page.goto(f"{self.server.url}/")
        expect(page.get_by_test_id("login-screen")).to_be_visible()
        self.shoot(page, "login-screen.png")

    def phone(self, page: Page) -> None:
        if self.server.token:
            page.goto(f"{self.server.url}/?token={self.server.token}")
        self.open(page, "#/")
        expect(page.locator("[data-testid=session-card]")).to_have_count(5)
        self.shoot(page, "mobile-dashboard.png")
        self.open(page, f"#/session/{self.fix}")
        expect(page.get_by_test_id("diff")).to_be_visible()
        self.shoot(page, "mobile-session.png")
        self.open(page, f"#/session/{self.verbose}")
        expect(page.get_by_test_id("approve")).to_be_in_viewport()
        self.shoot(page, "mobile-approval.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    # The paths show in the pictures: keep them short. The processes stop (ExitStack) before
    # their directory goes.
    base = Path(tempfile.gettempdir()) / "codey-demo"
    if base.exists():
        shutil.rmtree(base)  # a previous run's leftovers (this script's own directory)
    base.mkdir()
    with contextlib.ExitStack() as exits:
        exits.callback(shutil.rmtree, base, True)
        tmp = str(base)
        shots = Shots(args.out, base, exits)
        try:
            shots.start()
            shots.sessions()
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path="/usr/bin/chromium",
                                             args=CHROMIUM_ARGS)
                context = browser.new_context(viewport=VIEWPORT, color_scheme="light",
                                              locale="en-GB", timezone_id="UTC")
                # a phone first: run() ends with a restart that adds a provider to log in to
                phone = browser.new_context(viewport={"width": 390, "height": 844},
                                            color_scheme="light", locale="en-GB",
                                            timezone_id="UTC", device_scale_factor=2)
                shots.phone(phone.new_page())
                shots.run(context.new_page())
                # a browser that is not logged in
                stranger = browser.new_context(viewport=VIEWPORT, color_scheme="light",
                                               locale="en-GB", timezone_id="UTC")
                shots.login_screen(stranger.new_page())
                browser.close()
        except BaseException:
            for log in sorted(Path(tmp).rglob("*.log")):
                print(f"----- {log.name}\n" + "\n".join(
                    log.read_text(errors="replace").splitlines()[-30:]), file=sys.stderr)
            raise
        finally:
            suite_dir = getattr(shots, "suite_dir", None)
            if suite_dir and Path(suite_dir).is_dir():
                Path(suite_dir, "go").touch()  # end the long command before its worker
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
