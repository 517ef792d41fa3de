"""`codey-oidc-provider`: run the local OAuth 2.0 / OIDC provider as its own process.

Example::

    codey-oidc-provider --port 0 --client-id codey \\
        --redirect-uri http://127.0.0.1:8765/auth/callback

After binding it prints exactly one line, ``codey-oidc-provider listening on
http://127.0.0.1:PORT``; that URL is the issuer (discovery at
``/.well-known/openid-configuration``). It stops cleanly on SIGTERM or SIGINT.
Redirect URIs can be added later with ``POST /_clients {"client_id", "redirect_uris"}``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from codey_testkit.oidc import (
    ClientSettings,
    OIDCProvider,
    ProviderHTTPServer,
    ProviderSettings,
    SettingsError,
    create_server,
    parse_args,
)

__all__ = [
    "LISTENING_PREFIX",
    "ClientSettings",
    "OIDCProvider",
    "ProviderHTTPServer",
    "ProviderSettings",
    "create_server",
    "main",
]

#: The start-up line is this prefix followed by the issuer URL.
LISTENING_PREFIX = "codey-oidc-provider listening on "


def main(argv: Sequence[str] | None = None) -> None:
    """Parse flags, bind, print the listening line, serve until SIGTERM/SIGINT."""
    try:
        settings = parse_args(argv)
    except SettingsError as exc:
        print(f"codey-oidc-provider: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    # authlib refuses plain-HTTP URLs except on loopback; this server is plain HTTP by design
    # and may be bound to another interface inside a test container.
    os.environ.setdefault("AUTHLIB_INSECURE_TRANSPORT", "1")
    server = create_server(settings)

    def _stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() blocks until serve_forever returns, so it must not run on this thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    sys.stdout.write(f"{LISTENING_PREFIX}{server.issuer}\n")  # one write: one whole line
    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
