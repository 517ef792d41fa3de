"""Files sent with prompts: stored once, by content hash, in ``DATA_DIR/blobs/`` — and among
replicas also in ``codey_blobs`` rows, so a file uploaded through one replica is there for the
others (the browser's download, the prompt's check, the model's turn on a third).

Prompts carry an :class:`~codey_protocol.events.Attachment` (hash, name, mime, size), never
the bytes, so no event grows with a file. The routes are in :mod:`codey_server.blobs.routes`.

The interface is sync (``decide`` checks that a prompt's file exists, the agent loads one while
building a request, both without awaiting): :class:`BlobStore` keeps them in the data dir;
:class:`PgBlobStore` writes each to the row and the data dir, and reads the data dir first,
the row only when this replica never had the file. A file's bytes never change under its
hash and no file is deleted, so the data dir's copy is a cache that cannot go stale. The
routes run it in a thread; on the event loop only a miss waits for the database (once per
file and replica).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path

from codey_protocol.events import IMAGE_MIMES
from codey_server.cluster.db import SharedDb
from codey_server.core.decide import clean_file_name

__all__ = ["IMAGE_MIMES", "MAX_BLOB_BYTES", "MIME", "BlobStore", "PgBlobStore", "clean_name"]

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
        self._keep(digest, data)
        return digest

    def _keep(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_name(f".{digest}.{secrets.token_hex(4)}")
            tmp.write_bytes(data)
            os.replace(tmp, path)

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


class PgBlobStore(BlobStore):
    """The data dir's files, backed by ``codey_blobs`` shared by every replica."""

    def __init__(self, root: Path, db: SharedDb) -> None:
        super().__init__(root)
        self.db = db

    def put(self, data: bytes) -> str:
        """Store ``data`` in the row (committed before this returns: any replica finds it
        next) and in the data dir; its sha256."""
        digest = hashlib.sha256(data).hexdigest()
        self.db.sync_execute("INSERT INTO codey_blobs (sha256, data) VALUES (%s, %s) "
                             "ON CONFLICT (sha256) DO NOTHING", (digest, data))
        self._keep(digest, data)
        return digest

    def get(self, digest: str) -> bytes | None:
        data = super().get(digest)
        if data is not None or not _HASH.match(digest):
            return data
        rows = self.db.sync_execute("SELECT data FROM codey_blobs WHERE sha256 = %s",
                                    (digest,))
        if not rows:
            return None
        data = bytes(rows[0][0])
        self._keep(digest, data)  # read from the database once per replica
        return data

    def exists(self, digest: str) -> bool:
        if super().exists(digest):
            return True
        if not _HASH.match(digest):
            return False
        return bool(self.db.sync_execute("SELECT 1 FROM codey_blobs WHERE sha256 = %s",
                                         (digest,)))


clean_name = clean_file_name
