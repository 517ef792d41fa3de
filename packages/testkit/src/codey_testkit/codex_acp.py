"""Zed's ``codex-acp`` (the ACP adapter for Codex), fetched from the npm registry for the test
against a real ACP agent. No npm needed: the platform package's tarball is downloaded, checked
against the registry's sha512 and unpacked under ``~/.cache/codey-tests``.

    python -m codey_testkit.codex_acp        # fetch it (scripts/test does), print its path
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import platform
import sys
import tarfile
from pathlib import Path

__all__ = ["VERSION", "binary", "fetch"]

VERSION = "0.16.0"
_REGISTRY = "https://registry.npmjs.org"
_PLATFORMS = {("Linux", "x86_64"): "linux-x64", ("Linux", "aarch64"): "linux-arm64"}


def _cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "codey-tests" / f"codex-acp-{VERSION}"


def _package() -> str | None:
    name = _PLATFORMS.get((platform.system(), platform.machine()))
    return f"@zed-industries/codex-acp-{name}" if name else None


def binary() -> Path | None:
    """The fetched binary, or None (not fetched, or no build for this platform)."""
    path = _cache() / "package" / "bin" / "codex-acp"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def fetch(timeout: float = 120.0) -> Path:
    """Download and unpack the binary (once); returns its path. Raises RuntimeError when this
    platform has no build or the download does not match the registry's digest."""
    found = binary()
    if found is not None:
        return found
    package = _package()
    if package is None:
        raise RuntimeError(f"codex-acp has no build for {platform.system()} "
                           f"{platform.machine()}")
    import httpx

    meta = httpx.get(f"{_REGISTRY}/{package}/{VERSION}", timeout=timeout,
                     follow_redirects=True).raise_for_status().json()
    dist = meta["dist"]
    data = httpx.get(dist["tarball"], timeout=timeout,
                     follow_redirects=True).raise_for_status().content
    algorithm, _, digest = dist["integrity"].partition("-")
    if algorithm != "sha512" or hashlib.sha512(data).digest() != base64.b64decode(digest):
        raise RuntimeError(f"{dist['tarball']} does not match its integrity {dist['integrity']}")
    target = _cache()
    partial = target.with_name(target.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(partial, filter="data")
    # npm makes a package's bin executable when it installs it; the tarball's mode is 0644
    program = partial / "package" / "bin" / "codex-acp"
    if program.is_file():
        program.chmod(0o755)
    os.replace(partial, target)
    path = binary()
    if path is None:
        raise RuntimeError(f"{package}@{VERSION} has no bin/codex-acp")
    return path


if __name__ == "__main__":
    try:
        print(fetch())
    except Exception as err:  # scripts/test goes on: the test says it was skipped, and why
        print(f"codex-acp not fetched: {err}", file=sys.stderr)
