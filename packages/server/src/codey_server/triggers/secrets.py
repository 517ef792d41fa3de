"""Where the triggers' webhook secrets are kept: ``DATA_DIR/trigger_secrets.json`` (0600),
never in an event (the state, which every browser reads, says only ``has_secret``).

One server: the file. Among replicas a delivery reaching a replica that does not hold the
secret is refused (it fails closed: "no secret here"), so a signed trigger there wants a
shared store (left for later: see the README).
"""

from __future__ import annotations

import logging
import secrets as random
import threading
from pathlib import Path

import msgspec

from codey_server.secretfile import read_secret_file, write_secret_file

__all__ = ["SECRETS_FILE", "TriggerSecrets", "new_secret"]

log = logging.getLogger("codey.triggers")

SECRETS_FILE = "trigger_secrets.json"


def new_secret() -> str:
    """A webhook secret to paste into GitHub: 32 random bytes, URL-safe."""
    return random.token_urlsafe(32)


class TriggerSecrets:
    """Each trigger's secret by trigger id (sync: a small file, read per delivery)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def _all(self) -> dict[str, str]:
        raw = read_secret_file(self.path)
        if not raw:
            return {}
        try:
            return msgspec.json.decode(raw, type=dict[str, str])
        except msgspec.MsgspecError:
            log.warning("%s is not a secrets file; ignored", self.path)
            return {}

    def get(self, trigger_id: str) -> str | None:
        return self._all().get(trigger_id)

    def put(self, trigger_id: str, secret: str) -> None:
        with self._lock:
            kept = self._all()
            kept[trigger_id] = secret
            write_secret_file(self.path, msgspec.json.encode(kept))

    def remove(self, trigger_id: str) -> None:
        with self._lock:
            kept = self._all()
            if kept.pop(trigger_id, None) is not None:
                write_secret_file(self.path, msgspec.json.encode(kept))
