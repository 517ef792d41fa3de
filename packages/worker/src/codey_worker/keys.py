"""The machine's Ed25519 key: made at pairing, used to sign the server's nonce at every
connection.

The work is done by ``cryptography`` in a short-lived child process (this Python, isolated
mode), not in the worker: the library weighs about 11 MiB of resident memory once loaded,
more than anything else an idle worker holds, and it is needed for a fraction of a second
per connection. The private key goes to the child on its stdin (never on a command line),
the answer comes back on its stdout; a child that fails raises :class:`KeyHelperError`.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys

from codey_worker.errors import WorkerError

__all__ = ["KeyHelperError", "b64url", "b64url_decode", "generate_key", "public_key_b64", "sign"]

CHILD_TIMEOUT_S = 60.0

_CHILD = """\
import base64, json, sys
from cryptography.hazmat.primitives import serialization as s
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

def enc(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

def dec(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

ask = json.load(sys.stdin)
if ask["op"] == "generate":
    key = Ed25519PrivateKey.generate()
    answer = enc(key.private_bytes(s.Encoding.Raw, s.PrivateFormat.Raw, s.NoEncryption()))
else:
    key = Ed25519PrivateKey.from_private_bytes(dec(ask["key"]))
    if ask["op"] == "public":
        answer = enc(key.public_key().public_bytes(s.Encoding.Raw, s.PublicFormat.Raw))
    else:
        answer = enc(key.sign(dec(ask["message"])))
json.dump(answer, sys.stdout)
"""


class KeyHelperError(WorkerError):
    """The key could not be made, read or used (the message says why)."""


def b64url(data: bytes) -> str:
    """base64url without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _child(ask: dict[str, str]) -> str:
    try:
        done = subprocess.run([sys.executable, "-I", "-c", _CHILD],
                              input=json.dumps(ask).encode(), capture_output=True,
                              timeout=CHILD_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KeyHelperError(f"the key helper could not run: {exc}") from None
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        raise KeyHelperError(f"the key helper failed: {why[-1] if why else done.returncode}")
    answer = json.loads(done.stdout)
    assert isinstance(answer, str)
    return answer


def generate_key() -> str:
    """A new Ed25519 private key as base64url of its raw 32 bytes."""
    return _child({"op": "generate"})


def public_key_b64(private_key: str) -> str:
    """The raw public key (base64url, no padding) of a stored private key."""
    return _child({"op": "public", "key": private_key})


def sign(private_key: str, message: bytes) -> str:
    """The Ed25519 signature of ``message``, base64url without padding."""
    return _child({"op": "sign", "key": private_key, "message": b64url(message)})
