"""The secret key that seals provider logins among replicas: formats, where it comes from, a
round trip, and the clear errors of a wrong key, a moved row, a changed byte, no key."""

from __future__ import annotations

import asyncio
import base64
import secrets
import stat
from pathlib import Path

import pytest

from codey_server.cluster.crypto import KEY_ENV, SecretKey, parse_key
from codey_server.cluster.errors import SecretKeyError, SharedStateError
from codey_server.providers.store import Credential, PgCredentialStore

RAW = bytes(range(32))


def test_a_key_is_32_bytes_as_base64_base64url_or_hex() -> None:
    assert parse_key(base64.b64encode(RAW).decode(), "x") == RAW
    assert parse_key(base64.urlsafe_b64encode(RAW).decode().rstrip("="), "x") == RAW
    assert parse_key(RAW.hex() + "\n", "x") == RAW
    for bad in ("", "short", base64.b64encode(RAW[:16]).decode(), "zz" * 32, "not base64!"):
        with pytest.raises(SecretKeyError, match="openssl rand -base64 32"):
            parse_key(bad, "$CODEY_SECRET_KEY")


def test_seal_and_open_round_trip_and_never_show_the_key() -> None:
    key = SecretKey(RAW)
    sealed = key.seal(b"at-secret-token", aad=b"credential:p")
    assert b"at-secret-token" not in sealed
    assert key.open(sealed, aad=b"credential:p", what="p's login") == b"at-secret-token"
    assert sealed != key.seal(b"at-secret-token", aad=b"credential:p")  # a fresh nonce
    assert RAW.hex() not in repr(key) and key.key_id.hex() in repr(key)


def test_another_key_says_so_with_both_key_ids() -> None:
    sealed = SecretKey(RAW).seal(b"x", aad=b"credential:p")
    other = SecretKey(secrets.token_bytes(32))
    with pytest.raises(SecretKeyError) as err:
        other.open(sealed, aad=b"credential:p", what="the stored login of provider 'p'")
    message = str(err.value)
    assert "another secret key" in message and KEY_ENV in message
    assert SecretKey(RAW).key_id.hex() in message and other.key_id.hex() in message
    assert err.value.code == "not_configured" and isinstance(err.value, SharedStateError)


def test_a_row_moved_to_another_provider_or_changed_does_not_open() -> None:
    key = SecretKey(RAW)
    sealed = key.seal(b"x", aad=b"credential:p")
    with pytest.raises(SecretKeyError, match="copied from another row"):
        key.open(sealed, aad=b"credential:q", what="q's login")
    flipped = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(SecretKeyError, match="changed"):
        key.open(flipped, aad=b"credential:p", what="p's login")
    with pytest.raises(SecretKeyError, match="not a sealed value"):
        key.open(b"\x02" + sealed[1:], aad=b"credential:p", what="p's login")


def test_the_environment_wins_over_the_key_file_which_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    path.write_text(base64.b64encode(RAW).decode() + "\n")
    path.chmod(0o644)
    from_file = SecretKey.load(path, environ={})
    assert from_file is not None and from_file.key_id == SecretKey(RAW).key_id
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    other = secrets.token_bytes(32)
    from_env = SecretKey.load(path, environ={KEY_ENV: other.hex()})
    assert from_env is not None and from_env.key_id == SecretKey(other).key_id
    assert SecretKey.load(None, environ={}) is None
    with pytest.raises(SecretKeyError, match="does not exist"):
        SecretKey.load(tmp_path / "missing.key", environ={})
    with pytest.raises(SecretKeyError, match=KEY_ENV):
        SecretKey.load(None, environ={KEY_ENV: "too-short"})


def test_without_a_key_a_login_cannot_be_stored_and_the_error_says_how_to_fix_it() -> None:
    store = PgCredentialStore(db=None, key=None)  # type: ignore[arg-type]
    with pytest.raises(SecretKeyError, match=f"set \\${KEY_ENV}"):
        asyncio.run(store.put("p", Credential(method="api_key", api_key="sk-1")))
