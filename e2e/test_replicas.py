"""Three replicas on one PostgreSQL, through the UI: a page on the first replica starts a
session on a worker connected to the second; a page on the third watches it. The first is
killed with -9 mid-command: the watching page sees the session finish on its own, every item
once, and the command ran once. Behind nginx and behind Caddy (three upstreams each), fresh
browsers log in on the first try, a machine is linked through the proxy's page and a session
runs to its end; then the replica running a second session is killed with -9 mid-command, and
the page, through the proxy, sees it finish on another, the command run once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Browser, Page, expect

from codey_testkit.caddy import CaddyProcess, require_caddy
from codey_testkit.nginx import NginxProcess, require_nginx
from codey_testkit.postgres import PostgresCluster, pg_bin
from codey_testkit.scenarios import provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

pytestmark = pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL is not installed")


@pytest.fixture
def pg() -> Iterator[PostgresCluster]:
    with PostgresCluster() as cluster:
        yield cluster


def _lease_owner(dsn: str, session_id: str) -> str | None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT owner FROM codey_leases WHERE name = %s AND expires > now()",
                           (f"session:{session_id}",)).fetchone()
    return str(row[0]) if row else None


def _count_once(stack: Stack) -> list[dict[str, object]]:
    """The model's steps for "count once": a command that counts its runs in counter.txt and
    waits for the test's ``go`` file, so a replica can be killed while it runs."""
    return [
        {"match": {"user": "count once"},
         "reply": {"text": "Counting.", "calls": [stack.shell(
             "bash", "-c", "echo ran >> counter.txt; echo count-start; for i in $(seq 600); "
             "do [ -f go ] && break; sleep 0.1; done; echo count-end")]}},
        {"match": {"tool": "shell", "tool_output": "count-end"},
         "reply": {"text": "Counted once."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]


def _login(page: Page, server: ServerProcess, hash_: str = "#/") -> Page:
    if server.token is not None:
        page.goto(f"{server.url}/?token={server.token}")
    page.goto(f"{server.url}/{hash_}")
    expect(page.get_by_test_id("conn-state")).to_have_text("live")
    return page


def test_a_replica_killed_mid_command_the_session_finishes_on_another(
        stack: Stack, page: Page, browser: Browser, pg: PostgresCluster,
        tmp_path: Path) -> None:
    model = stack.model({"model": "scripted-1", "steps": _count_once(stack)})
    dsn = pg.create_database("e2e")
    replicas = [ServerProcess(tmp_path / f"r{n}", config=provider_config(model),
                              log_dir=tmp_path / "logs",
                              extra_args=["--database-url", dsn, "--replica-id", f"r{n}"])
                for n in range(3)]
    first, worker_side, watching = replicas
    try:
        for replica in replicas:
            replica.start()
        worker = WorkerProcess(worker_side, tmp_path / "worker").start()
        wd = Path(worker.workdir("proj"))
        wd.mkdir(parents=True)

        starter = _login(page, first)
        watcher = _login(browser.new_context(viewport={"width": 1280, "height": 800})
                         .new_page(), watching)
        sid = stack.new_session(starter, worker, str(wd), "count once")
        stack.open_session(watcher, sid)
        out = stack.items(watcher, "tool_call").get_by_test_id("tool-output")
        expect(out).to_have_text("count-start")

        first.kill9()
        expect(starter.get_by_test_id("conn-state")).to_have_text("reconnecting")
        stack.release(wd)  # the command ends while the session has no replica

        expect(stack.items(watcher, "assistant_message").last).to_have_text("Counted once.",
                                                                            timeout=40_000)
        expect(stack.status(watcher)).to_have_attribute("data-status", "idle")
        expect(watcher.get_by_test_id("conn-state")).to_have_text("live")
        ids = stack.dom_item_ids(watcher)
        twice = [i for i, n in Counter(ids).items() if n > 1]
        assert not twice, f"items shown twice: {twice}"
        served = watching.http.get(f"/api/sessions/{sid}").json()
        assert ids == [i["id"] for i in served["items"]]
        assert (wd / "counter.txt").read_text() == "ran\n"
        # the page's own fold is the replica's state
        state = stack.browser_state(watcher)
        assert state["sessions"][sid]["status"] == "idle"
        assert state["seq"] == watching.http.get("/api/state/bootstrap").json()["seq"]
        watcher.screenshot(path=str(tmp_path / "replicas.png"))
        worker.stop()
    finally:
        for replica in replicas:
            replica.stop()


@pytest.mark.parametrize("kind", ["nginx", "caddy"])
def test_behind_a_proxy_fresh_browsers_log_in_at_once_a_machine_links_and_a_session_runs(
        kind: str, stack: Stack, browser: Browser, pg: PostgresCluster, tmp_path: Path) -> None:
    # docs/deploy.md's two proxies, each as the test kit runs it (a unit test holds their
    # configurations equal to the document's); nginx connects from 127.0.0.2, Caddy (which
    # cannot choose its source address) from 127.0.0.1
    proxy: NginxProcess | CaddyProcess
    if kind == "nginx":
        require_nginx()
        proxy, trusted = NginxProcess(bind="127.0.0.2", root=tmp_path / "proxy"), "127.0.0.2/32"
    else:
        require_caddy()
        proxy, trusted = CaddyProcess(root=tmp_path / "proxy"), "127.0.0.1/32"
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "through the proxy"},
         "reply": {"calls": [stack.shell("bash", "-c", "echo ran-behind-the-proxy")]}},
        {"match": {"tool": "shell", "tool_output": "ran-behind-the-proxy"},
         "reply": {"text": "Ran behind the proxy."}},
        *_count_once(stack),
    ]})
    dsn = pg.create_database("e2e_proxy")
    with proxy:
        replicas = [ServerProcess(tmp_path / f"r{n}", log_dir=tmp_path / "logs",
                                  config={**provider_config(model),
                                          "trusted_proxies": [trusted]},
                                  extra_args=["--database-url", dsn, "--replica-id", f"r{n}",
                                              "--public-url", proxy.url])
                    for n in range(3)]
        try:
            for replica in replicas:
                replica.start()
            proxy.start([r.url for r in replicas])
            assert len({r.token for r in replicas}) == 1  # one link for the cluster
            # the audit's Chromium showed the login page on five fresh logins of six: the
            # page's next requests reached replicas that had not heard of the login yet
            for _ in range(6):
                context = browser.new_context(viewport={"width": 1280, "height": 800})
                fresh = context.new_page()
                fresh.goto(f"{proxy.url}/?token={replicas[0].token}")
                expect(fresh.get_by_test_id("conn-state")).to_have_text("live")
                fresh.reload()
                expect(fresh.get_by_test_id("conn-state")).to_have_text("live")
                context.close()

            # a machine given the proxy's URL; its link opened in a page through the proxy
            page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
            page.goto(f"{proxy.url}/?token={replicas[0].token}")
            expect(page.get_by_test_id("conn-state")).to_have_text("live")
            through_proxy = SimpleNamespace(url=proxy.url, http=replicas[1].http)
            worker = WorkerProcess(through_proxy, tmp_path / "worker")  # type: ignore[arg-type]
            worker.start(pair=False, wait_connected=False)
            assert worker.pair_url and worker.pair_url.startswith(proxy.url)
            page.goto(worker.pair_url)
            card = page.get_by_test_id("pair-request")
            card.get_by_test_id("pair-approve").click()
            expect(card.get_by_test_id("pair-result")).to_contain_text("Linked")
            worker.wait_connected()

            # a session through the proxy, on whichever replica takes it, to its end
            wd = Path(worker.workdir("proj"))
            wd.mkdir(parents=True)
            page.goto(f"{proxy.url}/#/")
            expect(page.get_by_test_id("conn-state")).to_have_text("live")
            stack.new_session(page, worker, str(wd), "through the proxy")
            expect(stack.items(page, "assistant_message").last).to_have_text(
                "Ran behind the proxy.", timeout=40_000)
            expect(stack.items(page, "tool_call").get_by_test_id("tool-output")).to_contain_text(
                "ran-behind-the-proxy")

            # kill -9 of the replica running a session mid-command, wherever the proxy put it:
            # the page (its socket through the proxy) sees the session finish on another, and
            # the command ran once
            sid = stack.new_session(page, worker, str(wd), "count once")
            expect(stack.items(page, "tool_call").last.get_by_test_id("tool-output")
                   ).to_have_text("count-start")
            owner = _lease_owner(dsn, sid)
            assert owner is not None, "nobody runs the session"
            replicas[int(owner.removeprefix("r"))].kill9()
            stack.release(wd)  # the command ends while the session has no replica
            expect(stack.items(page, "assistant_message").last).to_have_text(
                "Counted once.", timeout=40_000)
            expect(page.get_by_test_id("conn-state")).to_have_text("live")
            ids = stack.dom_item_ids(page)
            assert not [i for i, n in Counter(ids).items() if n > 1], "an item shown twice"
            assert (wd / "counter.txt").read_text() == "ran\n"
            worker.stop()
        finally:
            for replica in replicas:
                replica.stop()
