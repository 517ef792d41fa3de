"""The provider's RS256 signing key, generated fresh at every start.

Tokens signed by one provider process can only be verified with that process's JWKS.
"""

from __future__ import annotations

from typing import Any

from joserfc.jwk import KeySet, RSAKey

__all__ = ["SigningKeys"]


class SigningKeys:
    """One RSA key pair with a `kid`, exposed as a private `KeySet` and a public JWKS."""

    ALG = "RS256"

    def __init__(self, key: RSAKey | None = None) -> None:
        if key is None:
            key = RSAKey.generate_key(2048, parameters={"use": "sig", "alg": self.ALG})
        key.ensure_kid()
        self._key = key
        self.private = KeySet([key])

    @property
    def kid(self) -> str:
        return str(self._key.kid)

    def public_jwks(self) -> dict[str, Any]:
        """The JWKS document served at `/jwks.json` (public parts only)."""
        return {"keys": [self._key.as_dict(private=False)]}

    def public_keyset(self) -> KeySet:
        return KeySet.import_key_set(self.public_jwks())  # type: ignore[arg-type]
