"""Web Push end to end: the server pushes an approval (encrypted, to the test kit's push
service, which decrypts it as the browser would), the payload is delivered to the app's
service worker in Chromium through DevTools (``ServiceWorker.deliverPushMessage``: Chromium
here reaches no real push service), the service worker shows the notification, and its Approve
action approves the command, which runs. The same notification delivered again is stale: it
answers "already decided". A plain click opens the session in the app.

The subscription is made by the test kit's push service (it holds the browser-side keys) and
registered with the browser's cookie, as the page's "Notify this device" does with its own.
No DevTools command clicks a notification: the click goes through the service worker's own
handler (``handleNotificationClick``, the body of its ``notificationclick`` listener) on the
notification the service worker showed.

Screenshots (the devices list, the in-page preview of a notification) are written to the
test's folder, and to ``$CODEY_SCREENSHOTS_DIR`` when set (``docs/screenshots``).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import BrowserContext, Page, Worker, expect

from codey_testkit.push_service import PushServiceHandle
from codey_testkit.scenarios import provider_config

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack


def _service_worker(context: BrowserContext, page: Page) -> Worker:
    page.evaluate("navigator.serviceWorker.ready.then(() => true)")
    if not context.service_workers:
        context.wait_for_event("serviceworker", timeout=20_000)
    (sw,) = context.service_workers
    return sw


class _DevTools:
    """DevTools on the page: the service worker's registration id, and push delivery."""

    def __init__(self, context: BrowserContext, page: Page, origin: str) -> None:
        self.origin = origin
        self.cdp = context.new_cdp_session(page)
        self._registrations: dict[str, str] = {}
        self._seen = threading.Event()

        def updated(params: dict[str, Any]) -> None:
            for r in params.get("registrations", []):
                if not r.get("isDeleted"):
                    self._registrations[r["scopeURL"]] = r["registrationId"]
                    self._seen.set()

        self.cdp.on("ServiceWorker.workerRegistrationUpdated", updated)
        self.cdp.send("ServiceWorker.enable")

    def registration_id(self, page: Page) -> str:
        scope = f"{self.origin}/"
        for _ in range(200):  # events arrive while the page's loop turns
            if scope in self._registrations:
                return self._registrations[scope]
            page.wait_for_timeout(100)
        raise AssertionError(f"no service worker registration for {scope}: "
                             f"{self._registrations}")

    def deliver(self, page: Page, data: dict[str, Any]) -> None:
        self.cdp.send("ServiceWorker.deliverPushMessage", {
            "origin": self.origin, "registrationId": self.registration_id(page),
            "data": json.dumps(data)})


def _notifications(sw: Worker, tag: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = sw.evaluate(
        """async (tag) => (await self.registration.getNotifications({ tag })).map((n) => ({
             title: n.title, body: n.body, tag: n.tag, data: n.data,
             actions: n.actions.map((a) => a.action) }))""", tag)
    return found


def _click(sw: Worker, tag: str, action: str) -> dict[str, Any]:
    answer: dict[str, Any] = sw.evaluate(
        """async ([tag, action]) => {
             const [n] = await self.registration.getNotifications({ tag });
             return await handleNotificationClick(n, action);
           }""", [tag, action])
    return answer


def _shoot(page: Page, locator: Any, tmp: Path, name: str) -> None:
    out = [tmp / name]
    if os.environ.get("CODEY_SCREENSHOTS_DIR"):
        out.append(Path(os.environ["CODEY_SCREENSHOTS_DIR"]) / name)
    for path in out:
        locator.screenshot(path=str(path))


def test_a_command_is_approved_from_its_notification(stack: Stack, page: Page,
                                                     tmp_path: Path) -> None:
    push = PushServiceHandle(tmp_path / "push")
    try:
        model = stack.model({"model": "scripted-1", "steps": [
            {"match": {"user": "make the file"},
             "reply": {"calls": [stack.shell("bash", "-c",
                                             "echo pushed > from-phone.txt; echo ran-it")]}},
            {"match": {"tool": "shell", "tool_output": "ran-it"},
             "reply": {"text": "Made from-phone.txt."}},
            {"match": {"any": True}, "reply": {"text": "unexpected"}},
        ]})
        server = stack.server({**provider_config(model),
                               "push": {"allow_http_endpoints": True}})
        worker = stack.worker()
        page.context.grant_permissions(["notifications"], origin=server.url)
        stack.open(page, "#/settings")
        sw = _service_worker(page.context, page)
        devtools = _DevTools(page.context, page, server.url)

        # this browser's device, registered with its cookie (see the module)
        public_key = page.evaluate("fetch('/api/push').then((r) => r.json())")["public_key"]
        sub = push.subscription(application_server_key=public_key)
        added = page.evaluate("""async (sub) => {
            const r = await fetch('/api/push/devices', { method: 'POST',
              headers: { 'Content-Type': 'application/json' },
              body: JSON.stringify({ ...sub, name: 'Pixel 9' }) });
            return [r.status, await r.json()];
        }""", sub)
        assert added[0] == 201, added
        device = page.locator(f"[data-testid=push-device][data-device-id="
                              f"'{added[1]['device_id']}']")
        expect(device.get_by_test_id("push-device-name")).to_have_text("Pixel 9")
        expect(device.get_by_test_id("push-kind-approval")).to_be_checked()
        device.get_by_test_id("push-test").click()
        expect(device.get_by_test_id("push-test-result")).to_contain_text("Sent")
        push.wait_for(lambda m: (m["payload"] or {}).get("kind") == "test", sub)

        wd = Path(stack.workdir(worker, "proj"))
        sid = stack.new_session(page, worker, str(wd), "make the file", policy="suggest")
        message = push.wait_for(lambda m: (m["payload"] or {}).get("kind") == "approval", sub,
                                what="the approval's push")
        assert message["vapid"]["ok"] and message["error"] == "", message
        payload = message["payload"]
        tag = f"codey-session:{sid}"
        assert payload["tag"] == tag and payload["url"] == f"/#/session/{sid}"

        # the in-page preview shows the very notification pushed
        page.evaluate("location.hash = '#/settings'")
        preview = page.get_by_test_id("push-preview")
        expect(preview).to_contain_text("'echo pushed > from-phone.txt; echo ran-it'")
        expect(preview).to_contain_text("Approve")
        _shoot(page, page.get_by_test_id("devices"), tmp_path, "push-devices.png")
        _shoot(page, preview.locator(".notice-preview"), tmp_path, "push-notification.png")

        # delivered to the service worker: it shows the notification with its actions
        devtools.deliver(page, payload)
        stack.wait_until(lambda: _notifications(sw, tag), timeout=20)
        (shown,) = _notifications(sw, tag)
        assert shown["title"] == payload["title"] and "from-phone.txt" in shown["body"]
        assert shown["actions"] == ["approve", "reject"]
        assert shown["data"]["approval_id"] == payload["approval_id"]
        assert not (wd / "from-phone.txt").exists()

        answer = _click(sw, tag, "approve")
        assert answer == {"decided": True, "message": "Approved", "session_id": sid}
        stack.wait_until(lambda: (wd / "from-phone.txt").exists(), timeout=30)
        assert (wd / "from-phone.txt").read_text() == "pushed\n"
        (outcome,) = _notifications(sw, tag)  # the notification says what was done
        assert outcome["title"].startswith("Approved: ")
        stack.open_session(page, sid)
        first = stack.items(page, "tool_call").first
        expect(first.get_by_test_id("tool-output")).to_have_text("ran-it")

        # the same notification again is stale: refused, and it says what happened
        devtools.deliver(page, payload)
        stack.wait_until(lambda: [n for n in _notifications(sw, tag)
                                  if n["actions"] == ["approve", "reject"]], timeout=20)
        stale = _click(sw, tag, "reject")
        assert stale["decided"] is False
        assert stale["message"] == "Already decided: ✅ approved"
        (refused,) = _notifications(sw, tag)
        assert refused["title"] == "Not decided"
        assert refused["body"] == "Already decided: ✅ approved"
        expect(first.get_by_test_id("tool-status")).to_have_attribute("data-status", "done")

        # a plain click opens the session in the open tab
        page.evaluate("location.hash = '#/'")
        expect(page.get_by_test_id("dashboard")).to_be_visible()
        devtools.deliver(page, {**payload, "actions": []})
        stack.wait_until(lambda: [n for n in _notifications(sw, tag) if n["title"]
                                  == payload["title"]], timeout=20)
        assert _click(sw, tag, "") == {"opened": f"/#/session/{sid}"}
        expect(page.locator(f"[data-testid=session-view][data-session-id='{sid}']")) \
            .to_be_visible()
    finally:
        push.stop()


def test_the_app_is_installable_and_offline_says_the_server_is_unreachable(
        stack: Stack, page: Page) -> None:
    server = stack.server()
    stack.open(page)
    manifest = page.evaluate(
        "fetch(document.querySelector('link[rel=manifest]').href).then((r) => r.json())")
    assert manifest["display"] == "standalone" and manifest["start_url"] == "/"
    sizes = {i["sizes"] for i in manifest["icons"]}
    assert {"192x192", "512x512"} <= sizes
    for icon in manifest["icons"]:
        assert page.request.get(f"{server.url}{icon['src']}").ok, icon
    _service_worker(page.context, page)
    # the worker controls the page after a reload; then the server goes away
    page.reload()
    expect(page.get_by_test_id("conn-state")).to_have_text("live")
    page.wait_for_function("navigator.serviceWorker.controller !== null")
    server.stop()
    page.reload()
    expect(page.get_by_test_id("offline-page")).to_contain_text("server is unreachable")
