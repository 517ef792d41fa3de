"""Shared fixtures of the worker's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codey_worker import confine


@pytest.fixture(autouse=True)
def _restore_protected_paths() -> Iterator[None]:
    """Protected paths are process-wide (set once at worker start): each test gets them back
    as they were, whatever it (or a Worker it built) protected."""
    saved, readable = confine.protected_paths(), confine._readable
    yield
    confine.set_protected_paths(saved)
    confine._readable = readable
