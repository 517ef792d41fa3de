"""The machine key, made and used in a child process: real Ed25519, the same bytes the
library gives in-process, and a clear error when the helper fails."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from codey_worker.keys import (
    KeyHelperError,
    b64url_decode,
    generate_key,
    public_key_b64,
    sign,
)


def test_a_signature_verifies_and_is_the_librarys_own() -> None:
    key = generate_key()
    raw = b64url_decode(key)
    assert len(raw) == 32
    public = Ed25519PublicKey.from_public_bytes(b64url_decode(public_key_b64(key)))
    message = b"nonce-1:wrk_1:1700000000.25"
    signature = b64url_decode(sign(key, message))
    public.verify(signature, message)  # raises if it does not verify
    # Ed25519 is deterministic: the child gives what the library gives here
    assert signature == Ed25519PrivateKey.from_private_bytes(raw).sign(message)
    assert generate_key() != key


def test_a_broken_key_is_a_clear_error() -> None:
    with pytest.raises(KeyHelperError) as info:
        sign("not-a-key", b"x")
    assert "key helper failed" in str(info.value)
