"""The device authorization grant (RFC 8628), for servers a browser cannot call back to.

Order of calls: :func:`start_device` → show ``verification_uri`` and ``user_code`` to the user
→ :func:`poll_device` until it returns a token set or raises. Polling honours the provider's
``interval`` and adds 5 s on every ``slow_down`` (RFC 8628 §3.5).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import msgspec

from codey_server.providers.oauth import (
    OAuthFailed,
    OAuthProvider,
    TokenSet,
    provider_error,
    token_set,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["DEVICE_GRANT", "DeviceGrant", "poll_device", "start_device"]

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
SLOW_DOWN_S = 5.0


class DeviceGrant(msgspec.Struct, kw_only=True):
    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None = None
    expires_in: float = 600.0
    interval: float = 5.0

    def __repr__(self) -> str:  # the device code is a bearer secret until it is used
        return f"DeviceGrant(user_code={self.user_code!r}, expires_in={self.expires_in!r})"


async def start_device(provider: OAuthProvider, http: httpx.AsyncClient) -> DeviceGrant:
    """Ask for a device code. Raises OAuthFailed — ``unsupported`` when the provider's
    discovery document names no device authorization endpoint."""
    import httpx

    meta = await provider.discovery()
    if not meta.device_authorization_endpoint:
        raise OAuthFailed("unsupported",
                          f"provider {provider.config.name!r} does not offer the device flow "
                          "(its discovery document names no device_authorization_endpoint); "
                          "log in with the browser link instead")
    # a confidential client authenticates here as at the token endpoint (RFC 8628 §3.1)
    client = await provider.client_auth()
    data = {**client.data, "scope": " ".join(provider.config.scopes)}
    if provider.config.audience:
        data["audience"] = provider.config.audience
    try:
        r = await http.post(meta.device_authorization_endpoint, data=data, auth=client.auth)
    except httpx.HTTPError as err:
        raise OAuthFailed("unreachable", f"cannot reach the provider: {type(err).__name__}"
                          ) from None
    if r.status_code != 200:
        raise provider_error(r)
    try:
        return msgspec.json.decode(r.content, type=DeviceGrant)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise OAuthFailed("invalid_response", "malformed device authorization response"
                          ) from None


async def poll_device(provider: OAuthProvider, http: httpx.AsyncClient,
                      grant: DeviceGrant) -> TokenSet:
    """Poll the token endpoint until the user decides; raises OAuthFailed on denial/expiry."""
    import httpx

    meta = await provider.discovery()
    interval = max(float(grant.interval), 1.0)
    deadline = time.monotonic() + grant.expires_in
    client = await provider.client_auth()
    data = {"grant_type": DEVICE_GRANT, "device_code": grant.device_code, **client.data}
    while True:
        await asyncio.sleep(interval)
        if time.monotonic() > deadline:
            raise OAuthFailed("expired_token", "the code expired before it was approved")
        try:
            r = await http.post(meta.token_endpoint, data=data, auth=client.auth)
        except httpx.HTTPError:
            interval += SLOW_DOWN_S  # back off on a flaky network, as for slow_down
            continue
        if r.status_code == 200:
            try:
                return token_set(r.json())
            except ValueError:
                raise OAuthFailed("invalid_response", "malformed token response") from None
        err = provider_error(r)
        if err.code == "authorization_pending":
            continue
        if err.code == "slow_down":
            interval += SLOW_DOWN_S
            continue
        raise err

