"""Files sent with prompts: stored once, by content hash, in ``DATA_DIR/blobs/``.

Prompts carry an :class:`~codey_protocol.events.Attachment` (hash, name, mime, size), never
the bytes, so no event grows with a file. The routes are in :mod:`codey_server.blobs.routes`.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path

from codey_protocol.events import IMAGE_MIMES
from codey_server.core.decide import clean_file_name

__all__ = ["IMAGE_MIMES", "MAX_BLOB_BYTES", "MIME", "BlobStore", "clean_name"]

MAX_BLOB_BYTES = 10 * 1024 * 1024
_HASH = re.compile(r"^[0-9a-f]{64}$")
MIME = re.compile(r"^[a-z0-9.+-]+/[a-z0-9.+-]+$")


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, digest: str) -> Path:
        if not _HASH.match(digest):
            raise ValueError("not a sha256 hex digest")
        return self.root / digest[:2] / digest

    def put(self, data: bytes) -> str:
        """Store ``data`` (once) and return its sha256."""
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_name(f".{digest}.{secrets.token_hex(4)}")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return digest

    def get(self, digest: str) -> bytes | None:
        try:
            return self._path(digest).read_bytes()
        except (OSError, ValueError):
            return None

    def exists(self, digest: str) -> bool:
        try:
            return self._path(digest).is_file()
        except ValueError:
            return False


clean_name = clean_file_name
