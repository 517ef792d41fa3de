"""Sealing secrets at rest with AES-256-GCM: what the replicas keep of provider logins and of
a pasted Telegram bot token.

    key = SecretKey.load(settings)           # None when no key is configured
    blob = key.seal(b"secret", aad=b"credential:openai")
    key.open(blob, aad=b"credential:openai")  # b"secret"; SecretKeyError with another key

The key is 32 random bytes, written as base64 (``openssl rand -base64 32``) or 64 hex digits,
from the environment variable :data:`KEY_ENV` or else the file named by ``secret_key_file`` in
``config.json`` (tightened to 0600 when others could read it). Every replica needs the same
one: a row sealed on one replica is opened on another.

A sealed value is ``version (1 byte) | key id (8) | nonce (12) | ciphertext and tag``. The key
id (an HMAC of a constant under the key, so it says nothing about the key) lets a replica with
another key say so instead of "decryption failed". The associated data binds a value to its
row (``credential:<provider>``): a row's ciphertext copied into another provider's row does not
open. The nonce is random (96 bits): far below the 2^32 seals per key where a collision would
become likely.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from codey_server.cluster.errors import SecretKeyError
from codey_server.secretfile import read_secret_file

__all__ = ["KEY_ENV", "SecretKey", "parse_key"]

#: the environment variable the key is read from first
KEY_ENV = "CODEY_SECRET_KEY"
_VERSION = 1
_KEY_ID_BYTES = 8
_NONCE_BYTES = 12
_HEADER = 1 + _KEY_ID_BYTES + _NONCE_BYTES


def parse_key(text: str, where: str) -> bytes:
    """The 32 key bytes written in ``text`` (base64, base64url or hex); SecretKeyError naming
    ``where`` when it is anything else."""
    value = text.strip()
    raw: bytes | None = None
    if len(value) == 64:
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raw = None
    if raw is None:
        try:
            padded = value + "=" * (-len(value) % 4)
            raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raw = None
    if raw is None or len(raw) != 32:
        raise SecretKeyError(
            f"{where}: the secret key must be 32 random bytes as base64 or hex (make one with "
            "`openssl rand -base64 32`)")
    return raw


class SecretKey:
    """One AES-256-GCM key and its id."""

    def __init__(self, raw: bytes) -> None:
        if len(raw) != 32:
            raise SecretKeyError("the secret key must be 32 bytes")
        self._raw = raw
        self.key_id = hmac.new(raw, b"codey secret key id", hashlib.sha256).digest()[
            :_KEY_ID_BYTES]

    def __repr__(self) -> str:  # never the key itself
        return f"SecretKey(id={self.key_id.hex()})"

    @classmethod
    def load(cls, key_file: Path | None, environ: Mapping[str, str] | None = None
             ) -> SecretKey | None:
        """The key from ``$CODEY_SECRET_KEY``, else from ``key_file``; None when neither is
        set. SecretKeyError for a malformed key or a key file that cannot be read."""
        env = os.environ if environ is None else environ
        text = env.get(KEY_ENV, "")
        if text.strip():
            return cls(parse_key(text, f"${KEY_ENV}"))
        if key_file is None:
            return None
        try:
            data = read_secret_file(key_file)
        except OSError as err:
            raise SecretKeyError(f"secret_key_file {key_file}: {err.strerror or err}") from None
        if data is None:
            raise SecretKeyError(f"secret_key_file {key_file} does not exist")
        return cls(parse_key(data.decode(errors="replace"), f"secret_key_file {key_file}"))

    def mac(self, data: bytes) -> bytes:
        """HMAC-SHA256 of ``data`` under a key derived from this one: what a replica keeps of
        a short secret it only has to recognise (a Telegram pairing code), which a plain hash
        would let anyone reading the row guess offline."""
        sub = hmac.new(self._raw, b"codey mac key", hashlib.sha256).digest()
        return hmac.new(sub, data, hashlib.sha256).digest()

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # with the first login

        nonce = secrets.token_bytes(_NONCE_BYTES)
        return bytes([_VERSION]) + self.key_id + nonce + AESGCM(self._raw).encrypt(
            nonce, plaintext, aad)

    def open(self, sealed: bytes, *, aad: bytes, what: str) -> bytes:
        """The plaintext of ``sealed``; SecretKeyError (saying ``what`` it was) when it was
        sealed with another key, for another row, or was changed."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if len(sealed) <= _HEADER or sealed[0] != _VERSION:
            raise SecretKeyError(f"{what} is not a sealed value this server can read")
        key_id = sealed[1:1 + _KEY_ID_BYTES]
        if key_id != self.key_id:
            raise SecretKeyError(
                f"{what} was sealed with another secret key (id {key_id.hex()}; this server's "
                f"is {self.key_id.hex()}): every replica needs the same ${KEY_ENV} or "
                "secret_key_file")
        try:
            return AESGCM(self._raw).decrypt(sealed[1 + _KEY_ID_BYTES:_HEADER],
                                             sealed[_HEADER:], aad)
        except InvalidTag:
            raise SecretKeyError(f"{what} does not open with this server's secret key: it was "
                                 "changed, or copied from another row") from None
