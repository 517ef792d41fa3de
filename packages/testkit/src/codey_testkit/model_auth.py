"""Bearer-token checks for the scripted model server.

A request passes if its ``Authorization: Bearer T`` header carries the static API key, or a
JWT access token signed by the configured OIDC issuer (keys from the JWKS named in the issuer's
discovery document), with that ``iss``, an unexpired ``exp`` and — when an audience is
configured — that ``aud``. With neither a key nor an issuer configured every request passes.
"""

from __future__ import annotations

import hmac
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from joserfc.jwk import KeySet

# joserfc and httpx are imported where used: they cost most of a second at start-up, and
# most servers run with a static key or no auth at all.

__all__ = ["BearerAuth"]

_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]
_REFETCH_AFTER_S = 1.0  # an unknown kid triggers a JWKS refetch, at most this often


class BearerAuth:
    """Checks bearer tokens. Create once per server; :meth:`check` is called per request."""

    def __init__(
        self,
        api_key: str | None = None,
        oidc_issuer: str | None = None,
        oidc_audience: str | None = None,
    ) -> None:
        self.api_key = api_key
        self.oidc_issuer = oidc_issuer.rstrip("/") if oidc_issuer else None
        self.oidc_audience = oidc_audience
        self._keys: KeySet | None = None
        self._issuer_claim: str | None = None
        self._fetched_at = 0.0

    @property
    def enabled(self) -> bool:
        return self.api_key is not None or self.oidc_issuer is not None

    async def check(self, authorization: str | None) -> str | None:
        """Return None if the request may pass, else a short reason for the 401."""
        if not self.enabled:
            return None
        if not authorization:
            return "Missing bearer token in the Authorization header."
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return "Authorization header must be 'Bearer <token>'."
        if self.api_key is not None and hmac.compare_digest(token.encode(), self.api_key.encode()):
            return None
        if self.oidc_issuer is not None and token.count(".") == 2:
            return await self._check_jwt(token)
        return "Incorrect API key provided."

    async def _check_jwt(self, token: str) -> str | None:
        import httpx
        from joserfc import jwt
        from joserfc.errors import JoseError

        try:
            keys = await self._key_set(refresh=False)
            try:
                decoded = jwt.decode(token, keys, algorithms=_ALGORITHMS)
            except (JoseError, ValueError):
                # Maybe the issuer rotated keys since we fetched them: try once more.
                if time.monotonic() - self._fetched_at < _REFETCH_AFTER_S:
                    raise
                keys = await self._key_set(refresh=True)
                decoded = jwt.decode(token, keys, algorithms=_ALGORITHMS)
            issuer = self._issuer_claim or self.oidc_issuer or ""
            registry = jwt.JWTClaimsRegistry(
                leeway=5,
                iss={"essential": True, "value": issuer},
                exp={"essential": True},
            )
            if self.oidc_audience is not None:
                registry.options["aud"] = {"essential": True, "value": self.oidc_audience}
            registry.validate(decoded.claims)
        except (JoseError, ValueError) as exc:
            return f"Invalid access token: {exc}"
        except (httpx.HTTPError, KeyError, TypeError) as exc:
            return f"Cannot fetch the issuer's keys: {exc!r}"
        return None

    async def _key_set(self, refresh: bool) -> KeySet:
        if self._keys is not None and not refresh:
            return self._keys
        import httpx
        from joserfc.jwk import KeySet

        assert self.oidc_issuer is not None
        async with httpx.AsyncClient(timeout=5.0) as client:
            discovery = await client.get(f"{self.oidc_issuer}/.well-known/openid-configuration")
            discovery.raise_for_status()
            meta = discovery.json()
            jwks = await client.get(meta["jwks_uri"])
            jwks.raise_for_status()
        self._issuer_claim = str(meta.get("issuer") or self.oidc_issuer)
        self._keys = KeySet.import_key_set(jwks.json())
        self._fetched_at = time.monotonic()
        return self._keys
