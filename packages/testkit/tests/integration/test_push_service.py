"""``codey-push-service``, the test Web Push service, as a real process spoken to over HTTP:
it decrypts what is encrypted to its subscriptions and refuses what a push service refuses."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import http_ece
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid

from codey_testkit.push_service import PushServiceHandle


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _push(sub: dict[str, Any], data: dict[str, Any], vapid: Any, aud: str) -> int:
    keys = sub["keys"]
    body = http_ece.encrypt(
        json.dumps(data).encode(), private_key=ec.generate_private_key(ec.SECP256R1()),
        dh=base64.urlsafe_b64decode(keys["p256dh"] + "=="),
        auth_secret=base64.urlsafe_b64decode(keys["auth"] + "=="), version="aes128gcm")
    headers = {"Content-Encoding": "aes128gcm", "TTL": "60"}
    headers.update(vapid.sign({"aud": aud, "sub": "mailto:t@example.org",
                               "exp": int(time.time()) + 600}))
    return _post(sub["endpoint"], body, headers)


def _public(vapid: Any) -> str:
    return _b64(vapid.public_key.public_bytes(serialization.Encoding.X962,
                                              serialization.PublicFormat.UncompressedPoint))


@pytest.fixture
def service(tmp_path: Path) -> Any:
    with PushServiceHandle(tmp_path) as handle:
        yield handle


def test_a_push_is_decrypted_and_recorded_and_wrong_ones_refused(service: Any) -> None:
    vapid, other = Vapid(), Vapid()
    vapid.generate_keys()
    other.generate_keys()
    sub = service.subscription(application_server_key=_public(vapid))
    assert _push(sub, {"title": "hi"}, vapid, service.url) == 201
    (got,) = service.messages(sub)
    assert got["payload"] == {"title": "hi"} and got["vapid"]["ok"], got
    assert got["headers"]["ttl"] == "60"
    # another key than the subscription's, a wrong audience, no header at all
    assert _push(sub, {"title": "x"}, other, service.url) == 403
    assert _push(sub, {"title": "x"}, vapid, "https://elsewhere.example") == 401
    assert _post(sub["endpoint"], b"x", {}) == 401
    service.gone(sub)
    assert _push(sub, {"title": "late"}, vapid, service.url) == 410
    assert [m["payload"] for m in service.messages(sub)].count({"title": "hi"}) == 1


def test_it_has_help() -> None:
    out = subprocess.run([sys.executable, "-m", "codey_testkit.push_service", "--help"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "codey-push-service" in out and "/_subscriptions" in out
