"""Fixtures of every worker test, unit and integration."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _codey_home(tmp_path_factory: pytest.TempPathFactory,
                monkeypatch: pytest.MonkeyPatch) -> Path:
    """A $CODEY_HOME of the test's own: what defaults to it (the sandbox's private temp
    dirs, say) never lands in the real one."""
    home = tmp_path_factory.mktemp("codey-home")
    monkeypatch.setenv("CODEY_HOME", str(home))
    return home


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A temp dir outside /tmp: a sandboxed command gets a /tmp of its own, so what lies in
    the host's /tmp is out of its sight anyway, and would prove nothing about the rest."""
    base = Path(tempfile.mkdtemp(prefix="codey-test-", dir="/var/tmp")).resolve()
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
