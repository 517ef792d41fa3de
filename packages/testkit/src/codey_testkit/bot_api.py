"""``codey-bot-api``: a real HTTP process speaking the part of the Telegram Bot API a bot uses,
scripted with users' messages and button presses, recording what the bot sent.

    codey-bot-api --token 123456:TEST-token --port 0
    # prints: codey-bot-api listening on http://127.0.0.1:PORT

The bot's library points its base URL at it (``{url}/bot``). Bot API methods, under
``/bot<token>/<method>`` (form-encoded like python-telegram-bot sends them, or JSON):
``getMe``, ``getUpdates`` (long poll; ``offset`` confirms earlier updates), ``sendMessage``,
``editMessageText``, ``answerCallbackQuery``, ``setWebhook`` (updates are then POSTed to the
URL with ``X-Telegram-Bot-Api-Secret-Token``, and ``getUpdates`` answers 409 like Telegram's),
``deleteWebhook``. A wrong token gets 401.

The test drives it over HTTP:

* ``POST /_script`` ``{"steps": [...]}`` appends steps, run in order by a background thread.
  A step is ``{"message": {"chat_id", "text", "user"?: name}}`` (the user types) or
  ``{"press": {"chat_id", "button": label, "text"?: regex}}`` (the user presses the button
  with that label on the newest message of the bot in that chat whose text matches), each
  optionally with ``"wait_for": {"text": regex, "chat_id"?, "count"?: n}``: first wait until
  the bot said (sent or edited to) something matching, ``count`` times.
* ``GET /_state``: ``sent`` (every sendMessage / editMessageText: method, chat_id, message_id,
  text, buttons), ``calls`` (per method), ``steps_done``, ``steps_total``, ``step_error``,
  ``pending_updates``, ``webhook``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl

from codey_testkit.procs import serve_http
from codey_testkit.waiting import wait_until

__all__ = ["BotApi", "BotApiHandle", "main"]

_STEP_WAIT_S = 120.0
_STRING_PARAMS = {"text", "callback_query_id", "url", "secret_token", "data"}


class BotApi:
    """The fake Telegram: all state behind one condition variable, shared by the threads."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.cond = threading.Condition()
        self.updates: list[dict[str, Any]] = []  # not yet confirmed
        self.next_update = itertools.count(1)
        self.next_message = itertools.count(1)
        self.sent: list[dict[str, Any]] = []
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}
        self.calls: dict[str, int] = {}
        self.steps: list[dict[str, Any]] = []
        self.steps_done = 0
        self.step_error: str | None = None
        self.webhook: dict[str, str] | None = None
        #: getUpdates calls so far; a newer one ends a waiting one with 409, as Telegram does
        #: when two processes poll one bot
        self.polls = 0
        self.conflicts = 0
        threading.Thread(target=self._run_steps, daemon=True).start()
        threading.Thread(target=self._deliver, daemon=True).start()

    # the Bot API ---------------------------------------------------------------------------

    def me(self) -> dict[str, Any]:
        return {"id": self.bot_id, "is_bot": True, "first_name": "Codey test",
                "username": "codey_test_bot", "can_join_groups": True,
                "can_read_all_group_messages": False, "supports_inline_queries": False}

    def call(self, method: str, p: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.cond:
            self.calls[method] = self.calls.get(method, 0) + 1
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return 404, {"ok": False, "error_code": 404, "description": "Not Found"}
        return handler(p)  # type: ignore[no-any-return]

    def _m_getMe(self, p: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {"ok": True, "result": self.me()}

    def _m_getUpdates(self, p: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        offset = int(p.get("offset") or 0)
        timeout = min(float(p.get("timeout") or 0), 50.0)
        deadline = time.monotonic() + timeout
        with self.cond:
            if self.webhook is not None:
                return 409, {"ok": False, "error_code": 409, "description":
                             "Conflict: can't use getUpdates method while webhook is active"}
            if offset:
                self.updates = [u for u in self.updates if u["update_id"] >= offset]
            self.polls += 1
            mine = self.polls
            self.cond.notify_all()
            while not self.updates and time.monotonic() < deadline:
                self.cond.wait(deadline - time.monotonic())
                if self.polls != mine:
                    self.conflicts += 1
                    return 409, {"ok": False, "error_code": 409, "description":
                                 "Conflict: terminated by other getUpdates request; make sure "
                                 "that only one bot instance is running"}
            return 200, {"ok": True, "result": list(self.updates[:int(p.get("limit") or 100)])}

    def _m_sendMessage(self, p: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        chat_id = int(p["chat_id"])
        message = {"message_id": next(self.next_message), "date": int(time.time()),
                   "chat": {"id": chat_id, "type": "private"}, "from": self.me(),
                   "text": str(p.get("text", ""))}
        if p.get("reply_markup"):
            message["reply_markup"] = p["reply_markup"]
        self._record("sendMessage", message)
        return 200, {"ok": True, "result": message}

    def _m_editMessageText(self, p: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = (int(p["chat_id"]), int(p["message_id"]))
        with self.cond:
            old = self.messages.get(key)
        if old is None:
            return 400, {"ok": False, "error_code": 400,
                         "description": "Bad Request: message to edit not found"}
        message = {**old, "text": str(p.get("text", "")), "edit_date": int(time.time())}
        message.pop("reply_markup", None)
        if p.get("reply_markup"):
            message["reply_markup"] = p["reply_markup"]
        self._record("editMessageText", message)
        return 200, {"ok": True, "result": message}

    def _m_answerCallbackQuery(self, p: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.cond:
            self.sent.append({"method": "answerCallbackQuery",
                              "callback_query_id": p.get("callback_query_id"),
                              "text": p.get("text", ""), "chat_id": None, "message_id": None,
                              "buttons": []})
            self.cond.notify_all()
        return 200, {"ok": True, "result": True}

    def _m_setWebhook(self, p: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.cond:
            self.webhook = {"url": str(p["url"]), "secret_token": str(p.get("secret_token", ""))}
            self.cond.notify_all()
        return 200, {"ok": True, "result": True}

    def _m_deleteWebhook(self, p: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.cond:
            self.webhook = None
        return 200, {"ok": True, "result": True}

    def _record(self, method: str, message: dict[str, Any]) -> None:
        buttons = [b["text"] for row in message.get("reply_markup", {})
                   .get("inline_keyboard", []) for b in row]
        with self.cond:
            self.messages[(message["chat"]["id"], message["message_id"])] = message
            self.sent.append({"method": method, "chat_id": message["chat"]["id"],
                              "message_id": message["message_id"], "text": message["text"],
                              "buttons": buttons})
            self.cond.notify_all()

    # users ---------------------------------------------------------------------------------

    def add_update(self, body: dict[str, Any]) -> None:
        with self.cond:
            self.updates.append({"update_id": next(self.next_update), **body})
            self.cond.notify_all()

    def _user(self, chat_id: int, name: str) -> dict[str, Any]:
        return {"id": chat_id, "is_bot": False, "first_name": name}

    def _run_steps(self) -> None:
        while True:
            with self.cond:
                while self.steps_done >= len(self.steps) or self.step_error:
                    self.cond.wait()
                step = self.steps[self.steps_done]
            try:
                self._step(step)
            except Exception as err:
                with self.cond:
                    self.step_error = f"step {self.steps_done}: {err}"
                    self.cond.notify_all()
                continue
            with self.cond:
                self.steps_done += 1
                self.cond.notify_all()

    def _step(self, step: dict[str, Any]) -> None:
        wait = step.get("wait_for")
        if wait:
            pattern = re.compile(wait["text"], re.S)
            deadline = time.monotonic() + _STEP_WAIT_S
            with self.cond:
                while sum(1 for s in self.sent if s["chat_id"] is not None
                          and wait.get("chat_id") in (None, s["chat_id"])
                          and pattern.search(s["text"])) < int(wait.get("count", 1)):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the bot never said {wait['text']!r}")
                    self.cond.wait(0.5)
        if "message" in step:
            m = step["message"]
            chat_id = int(m["chat_id"])
            user = self._user(chat_id, m.get("user", "Tester"))
            self.add_update({"message": {
                "message_id": next(self.next_message), "date": int(time.time()),
                "chat": {"id": chat_id, "type": "private", "first_name": user["first_name"]},
                "from": user, "text": m["text"]}})
        elif "press" in step:
            p = step["press"]
            chat_id = int(p["chat_id"])
            pattern = re.compile(p.get("text", ""), re.S)
            with self.cond:
                found = [(msg, b) for (c, _), msg in sorted(self.messages.items())
                         if c == chat_id and pattern.search(msg["text"])
                         for row in msg.get("reply_markup", {}).get("inline_keyboard", [])
                         for b in row if b["text"] == p["button"]]
            if not found:
                raise LookupError(f"no button {p['button']!r} in chat {chat_id}")
            message, button = found[-1]
            self.add_update({"callback_query": {
                "id": f"cq{next(self.next_update)}", "from": self._user(chat_id, "Tester"),
                "chat_instance": str(chat_id), "data": button["callback_data"],
                "message": message}})
        else:
            raise ValueError(f"a step needs 'message' or 'press': {step}")

    def _deliver(self) -> None:
        """Webhook mode: POST each update to the bot until it answers 2xx."""
        while True:
            with self.cond:
                while self.webhook is None or not self.updates:
                    self.cond.wait()
                hook, update = dict(self.webhook), self.updates[0]
            request = urllib.request.Request(
                hook["url"], data=json.dumps(update).encode(), method="POST",
                headers={"Content-Type": "application/json",
                         "X-Telegram-Bot-Api-Secret-Token": hook["secret_token"]})
            try:
                with urllib.request.urlopen(request, timeout=30) as reply:
                    ok = 200 <= reply.status < 300
            except (urllib.error.URLError, OSError):
                ok = False
            with self.cond:
                if ok and self.updates and self.updates[0] is update:
                    self.updates.pop(0)
            if not ok:
                time.sleep(0.5)

    def snapshot(self) -> dict[str, Any]:
        with self.cond:
            return {"sent": list(self.sent), "calls": dict(self.calls),
                    "steps_done": self.steps_done, "steps_total": len(self.steps),
                    "step_error": self.step_error, "pending_updates": len(self.updates),
                    "webhook": self.webhook, "conflicts": self.conflicts}


def _params(raw: bytes, content_type: str) -> dict[str, Any]:
    if not raw:
        return {}
    if content_type.startswith("application/json"):
        data: dict[str, Any] = json.loads(raw)
        return data
    out: dict[str, Any] = {}
    for key, value in parse_qsl(raw.decode(), keep_blank_values=True):
        if key in _STRING_PARAMS:
            out[key] = value
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _handler(api: BotApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            # the path carries the token: the fake keeps it out of its log like a real bot must
            pass

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _dispatch(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            path, _, query = self.path.partition("?")
            if path == "/_state":
                self._answer(200, api.snapshot())
                return
            if path == "/_script" and self.command == "POST":
                steps = json.loads(raw).get("steps", [])
                with api.cond:
                    api.steps.extend(steps)
                    api.cond.notify_all()
                self._answer(200, {"steps_total": len(api.steps)})
                return
            match = re.fullmatch(r"/bot([^/]+)/(\w+)", path)
            if match is None:
                self._answer(404, {"ok": False, "error_code": 404, "description": "Not Found"})
                return
            if match.group(1) != api.token:
                self._answer(401, {"ok": False, "error_code": 401,
                                   "description": "Unauthorized"})
                return
            params = _params(query.encode(), "") if query else {}
            params.update(_params(raw, self.headers.get("Content-Type", "")))
            status, body = api.call(match.group(2), params)
            self._answer(status, body)

        do_GET = _dispatch
        do_POST = _dispatch

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Run the fake Bot API until killed. Example: ``codey-bot-api --token 1:abc --port 0``."""
    parser = argparse.ArgumentParser(prog="codey-bot-api", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--token", required=True, help="the bot token it accepts")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    args = parser.parse_args(argv)
    api = BotApi(args.token)
    serve_http("codey-bot-api", args.host, args.port, _handler(api))


if __name__ == "__main__":
    main()


class BotApiHandle:
    """A running ``codey-bot-api`` for tests: ``start_bot_api(token, log_dir)``; leaving the
    ``with`` block stops it."""

    def __init__(self, token: str, log_dir: Any) -> None:
        from codey_testkit.procs import ManagedProcess

        self.token = token
        self.process = ManagedProcess("bot-api", log_dir=log_dir)
        self.process.start([sys.executable, "-m", "codey_testkit.bot_api", "--token", token,
                            "--port", "0"])
        self.url = self.process.wait_for_line(
            r"codey-bot-api listening on (http://\S+)", timeout=30).group(1)

    def script(self, *steps: dict[str, Any]) -> None:
        """Append steps (see the module docstring)."""
        body = json.dumps({"steps": list(steps)}).encode()
        request = urllib.request.Request(f"{self.url}/_script", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/_state", timeout=10) as reply:
            data: dict[str, Any] = json.loads(reply.read())
            return data

    def sent(self, chat_id: int | None = None) -> list[dict[str, Any]]:
        """What the bot sent or edited (answerCallbackQuery too when ``chat_id`` is None)."""
        return [s for s in self.state()["sent"] if chat_id is None or s["chat_id"] == chat_id]

    def wait(self, predicate: Any, timeout: float = 90.0, what: str = "the bot") -> \
            dict[str, Any]:
        """Poll :meth:`state` until ``predicate(state)``; a timeout shows the state."""

        def state() -> dict[str, Any]:
            state = self.state()
            if state["step_error"]:
                raise AssertionError(f"script failed: {state['step_error']}\n{state['sent']}")
            return state

        return wait_until(state, ok=predicate, timeout=timeout, interval=0.1, what=what,
                          show=lambda state: json.dumps(state)[-3000:])

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> BotApiHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
