"""`OIDCProviderProcess`: the provider as a real child process, for tests and e2e stacks.

    with OIDCProviderProcess(log_dir=tmp_path, client_id="codey") as oidc:
        oidc.issuer                         # http://127.0.0.1:PORT
        oidc.add_client("codey", [redirect_uri])
        oidc.approve_device(user_code)      # the user's side of the device flow

Leaving the block stops the process (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import httpx

from codey_testkit.errors import TestkitError
from codey_testkit.procs import ManagedProcess, StopsOnExit

__all__ = ["OIDCProviderProcess"]

_LISTENING = r"^codey-oidc-provider listening on (http://\S+)$"


class OIDCProviderProcess(StopsOnExit):
    """Starts `python -m codey_testkit.oidc_provider` on port 0 and learns its issuer.

    Keyword options map to CLI flags (`access_token_ttl=60` → `--access-token-ttl 60`);
    `redirect_uris` become repeated `--redirect-uri`. `extra_args` are passed verbatim.
    """

    def __init__(
        self,
        *,
        log_dir: Path | str | None = None,
        client_id: str = "codey",
        redirect_uris: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        start_timeout: float = 15.0,
        **flags: Any,
    ) -> None:
        self.client_id = client_id
        argv = [sys.executable, "-m", "codey_testkit.oidc_provider", "--host", "127.0.0.1",
                "--port", "0", "--client-id", client_id]
        for uri in redirect_uris:
            argv += ["--redirect-uri", uri]
        for name, value in flags.items():
            argv += [f"--{name.replace('_', '-')}", str(value)]
        argv += list(extra_args)
        self.argv = argv
        self._proc = ManagedProcess("oidc-provider", log_dir=log_dir)
        self._start_timeout = start_timeout
        self.issuer = ""

    def start(self) -> Self:
        """Start the process and wait for its listening line. Raises ProcessError subclasses."""
        self._proc.start(self.argv)
        self.issuer = self._proc.wait_for_url(_LISTENING, timeout=self._start_timeout)
        return self

    def stop(self) -> int | None:
        return self._proc.stop()

    @property
    def process(self) -> ManagedProcess:
        return self._proc

    def url(self, path: str) -> str:
        return f"{self.issuer}{path}"

    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        response = httpx.post(self.url(path), json=payload, timeout=10)
        if response.status_code != 200:
            raise TestkitError(f"POST {path} -> {response.status_code}: {response.text}")
        data: dict[str, Any] = response.json()
        return data

    def add_client(
        self, client_id: str, redirect_uris: Sequence[str], client_secret: str | None = None
    ) -> dict[str, Any]:
        """Register a client or add redirect URIs to it (`POST /_clients`)."""
        payload: dict[str, Any] = {"client_id": client_id, "redirect_uris": list(redirect_uris)}
        if client_secret is not None:
            payload["client_secret"] = client_secret
        return self._post("/_clients", payload)

    def fail_next(self, path: str, status: int, body: str = "", times: int = 1) -> None:
        """Make the next ``times`` requests to ``path`` (e.g. ``/token``) answer ``status``
        with ``body`` as plain text (``POST /_fail``)."""
        self._post("/_fail", {"path": path, "status": status, "body": body, "times": times})

    def approve_device(self, user_code: str) -> None:
        """Approve a pending device authorization as the test user."""
        self._post("/_device/approve", {"user_code": user_code})

    def deny_device(self, user_code: str) -> None:
        """Deny a pending device authorization."""
        self._post("/_device/deny", {"user_code": user_code})

    def __enter__(self) -> Self:
        return self.start()

