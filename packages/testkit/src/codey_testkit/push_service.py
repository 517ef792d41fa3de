"""``codey-push-service``: a Web Push service (RFC 8030) that plays the browser's part too: it
makes subscriptions with key pairs of its own, decrypts what is pushed to them (RFC 8291,
aes128gcm, with ``http_ece``), checks the VAPID header (RFC 8292), and records everything.

    codey-push-service --port 0
    # prints: codey-push-service listening on http://127.0.0.1:PORT

What a test uses, over HTTP:

* ``POST /_subscriptions`` ``{"application_server_key"?: base64url}``: a new subscription,
  answered as a browser's ``PushSubscription.toJSON()`` (``{"endpoint", "keys": {"p256dh",
  "auth"}}``); its private key stays here. With ``application_server_key``, pushes whose VAPID
  key is another are refused (403), as real push services do.
* ``POST /push/<id>``: the endpoint the application server posts to. 201 with a ``Location``;
  401 without a valid VAPID header; 410 for a subscription marked gone.
* ``POST /_subscriptions/<id>/gone``: from now on that endpoint answers 410.
* ``GET /_messages``: every push received, oldest first: ``subscription``, ``received_at``,
  ``headers`` (ttl, urgency, topic, content_encoding), ``vapid`` (``ok``, ``key``, ``claims``,
  ``error``), ``payload`` (the decrypted body decoded as JSON, or ``text``), ``error``.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from codey_testkit.procs import serve_http
from codey_testkit.waiting import wait_until

__all__ = ["PushService", "PushServiceHandle", "main"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class _Subscription:
    def __init__(self, sub_id: str, application_server_key: str | None) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        self.sub_id = sub_id
        self.private_key = ec.generate_private_key(ec.SECP256R1())
        self.p256dh = _b64(self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint))
        self.auth = _b64(os.urandom(16))
        self.application_server_key = application_server_key
        self.gone = False


class PushService:
    """All state behind one lock, shared by the server's threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.subscriptions: dict[str, _Subscription] = {}
        self.messages: list[dict[str, Any]] = []

    def subscribe(self, base_url: str, application_server_key: str | None) -> dict[str, Any]:
        with self.lock:
            sub = _Subscription(f"sub{next(self.ids)}", application_server_key)
            self.subscriptions[sub.sub_id] = sub
        return {"endpoint": f"{base_url}/push/{sub.sub_id}",
                "keys": {"p256dh": sub.p256dh, "auth": sub.auth}}

    def receive(self, sub_id: str, endpoint: str, headers: dict[str, str],
                body: bytes) -> tuple[int, dict[str, Any]]:
        """Check, decrypt and record one push; the status to answer and the record."""
        import http_ece

        sub = self.subscriptions.get(sub_id)
        record: dict[str, Any] = {
            "subscription": sub_id, "received_at": time.time(),
            "headers": {"ttl": headers.get("ttl"), "urgency": headers.get("urgency"),
                        "topic": headers.get("topic"),
                        "content_encoding": headers.get("content-encoding")},
            "vapid": _check_vapid(headers.get("authorization", ""), endpoint),
            "payload": None, "error": ""}
        status = 201
        if sub is None:
            status, record["error"] = 404, "no such subscription"
        elif sub.gone:
            status, record["error"] = 410, "gone"
        elif not record["vapid"]["ok"]:
            status, record["error"] = 401, f"VAPID: {record['vapid']['error']}"
        elif sub.application_server_key and record["vapid"]["key"] != \
                sub.application_server_key.rstrip("="):
            status, record["error"] = 403, "VAPID key is not the subscription's"
        else:
            try:
                plain = http_ece.decrypt(body, private_key=sub.private_key,
                                         auth_secret=_unb64(sub.auth), version="aes128gcm")
                try:
                    record["payload"] = json.loads(plain)
                except ValueError:
                    record["payload"] = {"text": plain.decode(errors="replace")}
            except Exception as err:
                status, record["error"] = 400, f"cannot decrypt: {type(err).__name__}: {err}"
        with self.lock:
            self.messages.append(record)
        return status, record


def _check_vapid(header: str, endpoint: str) -> dict[str, Any]:
    """RFC 8292: ``vapid t=<JWT>, k=<public key>``; the JWT signed (ES256) by that key, its
    ``aud`` the endpoint's origin, its ``exp`` in the next 24 hours, a ``sub``."""
    from py_vapid import Vapid02

    out: dict[str, Any] = {"ok": False, "key": "", "claims": {}, "error": ""}
    try:
        scheme, _, params = header.partition(" ")
        if scheme.lower() != "vapid":
            raise ValueError(f"scheme {scheme!r}")
        parts = dict(p.strip().split("=", 1) for p in params.split(","))
        out["key"] = parts["k"].rstrip("=")
        claims = json.loads(_unb64(parts["t"].split(".")[1]))
        out["claims"] = claims
        if not Vapid02.verify(header):
            raise ValueError("bad signature")
        url = urlsplit(endpoint)
        if claims.get("aud") != f"{url.scheme}://{url.netloc}":
            raise ValueError(f"aud {claims.get('aud')!r}")
        if not time.time() < int(claims.get("exp", 0)) <= time.time() + 86400:
            raise ValueError(f"exp {claims.get('exp')!r}")
        if not str(claims.get("sub", "")).startswith(("mailto:", "https://")):
            raise ValueError(f"sub {claims.get('sub')!r}")
        out["ok"] = True
    except Exception as err:
        out["error"] = f"{type(err).__name__}: {err}"
    return out


def _handler(service: PushService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _answer(self, status: int, data: Any = None,
                    headers: dict[str, str] | None = None) -> None:
            body = json.dumps(data).encode() if data is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _base(self) -> str:
            address: Any = self.server.server_address
            return f"http://{address[0]}:{address[1]}"

        def do_GET(self) -> None:
            if self.path == "/_messages":
                with service.lock:
                    self._answer(200, {"messages": list(service.messages)})
            else:
                self._answer(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = self._body()
            path = self.path
            if path == "/_subscriptions":
                asked = json.loads(body or b"{}")
                self._answer(201, service.subscribe(self._base(),
                                                    asked.get("application_server_key")))
            elif path.startswith("/_subscriptions/") and path.endswith("/gone"):
                sub = service.subscriptions.get(path.split("/")[2])
                if sub is None:
                    self._answer(404, {"error": "no such subscription"})
                else:
                    sub.gone = True
                    self._answer(200, {"ok": True})
            elif path.startswith("/push/"):
                sub_id = path.removeprefix("/push/")
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, record = service.receive(sub_id, self._base() + path, headers, body)
                self._answer(status, {"error": record["error"]} if record["error"] else None,
                             {"Location": f"{self._base()}/m/{len(service.messages)}"})
            else:
                self._answer(404, {"error": "not found"})

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Run the push service until killed. Example: ``codey-push-service --port 0``."""
    parser = argparse.ArgumentParser(prog="codey-push-service", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    args = parser.parse_args(argv)
    serve_http("codey-push-service", args.host, args.port, _handler(PushService()))


if __name__ == "__main__":
    main()


class PushServiceHandle:
    """A running ``codey-push-service`` for tests; leaving the ``with`` block stops it."""

    def __init__(self, log_dir: Any) -> None:
        from codey_testkit.procs import ManagedProcess

        self.process = ManagedProcess("push-service", log_dir=log_dir)
        self.process.start([sys.executable, "-m", "codey_testkit.push_service", "--port", "0"])
        self.url = self.process.wait_for_line(
            r"codey-push-service listening on (http://\S+)", timeout=30).group(1)

    def _post(self, path: str, data: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.url}{path}", data=json.dumps(data).encode(),
                                         method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            answer: dict[str, Any] = json.loads(reply.read())
            return answer

    def subscription(self, application_server_key: str | None = None) -> dict[str, Any]:
        """A new subscription, as a browser's ``PushSubscription.toJSON()``."""
        return self._post("/_subscriptions",
                          {"application_server_key": application_server_key})

    def gone(self, subscription: dict[str, Any]) -> None:
        """Its endpoint answers 410 from now on (the browser unsubscribed)."""
        self._post(f"/_subscriptions/{subscription['endpoint'].rsplit('/', 1)[1]}/gone", {})

    def messages(self, subscription: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/_messages", timeout=10) as reply:
            got: list[dict[str, Any]] = json.loads(reply.read())["messages"]
        if subscription is None:
            return got
        sub_id = subscription["endpoint"].rsplit("/", 1)[1]
        return [m for m in got if m["subscription"] == sub_id]

    def wait_for(self, predicate: Any, subscription: dict[str, Any] | None = None,
                 timeout: float = 30.0, what: str = "a push") -> dict[str, Any]:
        """The first message (of ``subscription``) that ``predicate(message)`` accepts."""
        found = wait_until(
            lambda: [m for m in self.messages(subscription) if predicate(m)],
            timeout=timeout, interval=0.05, what=what,
            show=lambda _: json.dumps(self.messages(subscription))[-3000:])
        return found[0]

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> PushServiceHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
