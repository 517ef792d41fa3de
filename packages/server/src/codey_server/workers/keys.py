"""Worker keys: each paired worker's Ed25519 public key and the SHA-256 of its credential —
in the data dir's ``workers.json`` (one server) or in ``codey_worker_keys`` rows every replica
reads (``--database-url``). Never in the event log.

A key is added when the user approves the pairing, without a credential; the credential is
made when the waiting worker collects the approval (:meth:`WorkerKeys.set_credential`, once),
so no replica ever stores it in the clear. A handshake checks the row each time: a worker
paired through one replica connects to any other, and once a revocation has answered no
replica accepts its credential.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
from pathlib import Path
from typing import Protocol, runtime_checkable

from codey_server.cluster.db import SharedDb
from codey_server.secretfile import write_secret_file

__all__ = ["FileWorkerKeys", "KeyStore", "PgWorkerKeys", "WorkerKeys", "credential_hash"]


def credential_hash(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()


def _matches(stored: str, credential: str) -> bool:
    # an entry whose credential was never collected ("") matches nothing
    return bool(stored) and hmac.compare_digest(stored.encode(),
                                                credential_hash(credential).encode())


# runtime_checkable: Litestar checks the type of what it injects (``keys`` of the revoke route)
@runtime_checkable
class WorkerKeys(Protocol):
    """Worker id → public key and credential hash."""

    async def add(self, worker_id: str, public_key: str, credential: str | None = None) -> None:
        """Store the key (and the credential's hash, when given)."""
        ...

    async def set_credential(self, worker_id: str, credential: str) -> bool:
        """Give a key added without a credential its credential; False when the key is gone
        or already has one."""
        ...

    async def remove(self, worker_id: str) -> None: ...

    async def check(self, worker_id: str, credential: str) -> str | None:
        """The worker's public key when the credential matches, else None."""
        ...


class FileWorkerKeys:
    """``workers.json`` (0600, atomic writes), held in memory: nothing else writes it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._data: dict[str, dict[str, str]] = {}
        with contextlib.suppress(FileNotFoundError):
            self._data = json.loads(path.read_text())

    async def add(self, worker_id: str, public_key: str, credential: str | None = None) -> None:
        self._data[worker_id] = {"public_key": public_key,
                                 "credential": credential_hash(credential) if credential else ""}
        self._save()

    async def set_credential(self, worker_id: str, credential: str) -> bool:
        entry = self._data.get(worker_id)
        if entry is None or entry.get("credential"):
            return False
        entry["credential"] = credential_hash(credential)
        self._save()
        return True

    async def remove(self, worker_id: str) -> None:
        if self._data.pop(worker_id, None) is not None:
            self._save()

    async def check(self, worker_id: str, credential: str) -> str | None:
        entry = self._data.get(worker_id)
        if entry is None or not _matches(entry.get("credential", ""), credential):
            return None
        return entry["public_key"]

    def _save(self) -> None:
        write_secret_file(self.path, json.dumps(self._data).encode())


#: the name the single server's store had before the port
KeyStore = FileWorkerKeys


class PgWorkerKeys:
    """``codey_worker_keys``: a row per worker, read at every handshake."""

    def __init__(self, db: SharedDb) -> None:
        self.db = db

    async def add(self, worker_id: str, public_key: str, credential: str | None = None) -> None:
        await self.db.execute(
            "INSERT INTO codey_worker_keys (worker_id, public_key, credential) "
            "VALUES (%s, %s, %s) ON CONFLICT (worker_id) DO UPDATE "
            "SET public_key = excluded.public_key, credential = excluded.credential",
            (worker_id, public_key, credential_hash(credential) if credential else ""))

    async def set_credential(self, worker_id: str, credential: str) -> bool:
        rows = await self.db.execute(
            "UPDATE codey_worker_keys SET credential = %s WHERE worker_id = %s "
            "AND credential = '' RETURNING 1", (credential_hash(credential), worker_id))
        return bool(rows)

    async def remove(self, worker_id: str) -> None:
        await self.db.execute("DELETE FROM codey_worker_keys WHERE worker_id = %s",
                              (worker_id,))

    async def check(self, worker_id: str, credential: str) -> str | None:
        rows = await self.db.execute(
            "SELECT public_key, credential FROM codey_worker_keys WHERE worker_id = %s",
            (worker_id,))
        if not rows or not _matches(str(rows[0][1]), credential):
            return None
        return str(rows[0][0])

    async def import_file(self, raw: bytes) -> int:
        """Bring in a ``workers.json`` (a data dir's, or ``codey_files``'s); the number of
        keys brought in."""
        try:
            data = json.loads(raw)
        except ValueError:
            return 0
        added = 0
        for worker_id, entry in (data.items() if isinstance(data, dict) else ()):
            if isinstance(entry, dict) and isinstance(entry.get("public_key"), str):
                rows = await self.db.execute(
                    "INSERT INTO codey_worker_keys (worker_id, public_key, credential) "
                    "VALUES (%s, %s, %s) ON CONFLICT (worker_id) DO NOTHING RETURNING 1",
                    (worker_id, entry["public_key"], str(entry.get("credential") or "")))
                added += len(rows)
        return added
