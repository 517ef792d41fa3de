"""Files that hold secrets: written atomically with mode 0600 from the first byte.

A reader never sees a half-written file (write to a temporary sibling, fsync, ``os.replace``),
and the secret is never readable by other users, not even for an instant (the temporary file
is created 0600, not chmod-ed afterwards).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

__all__ = ["ensure_private_dir", "read_secret_file", "write_secret_file"]


def write_secret_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically; the file is 0600 and its dir is created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def read_secret_file(path: Path) -> bytes | None:
    """The file's bytes, or None when it does not exist.

    A file that other users can read (copied in by hand, restored from a backup) is tightened
    to 0600 before it is used.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        os.chmod(path, 0o600)
    return path.read_bytes()


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and its parents) 0700; an existing ``path`` open to group or others is
    tightened to 0700. Parents that already exist are left as they are."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        os.chmod(path, 0o700)
