"""The CLI's logging set-up survives building the app: secrets stay masked, the level holds."""

from __future__ import annotations

import io
import logging
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from codey_server.app import create_app
from codey_server.logsetup import configure_logging, install_redaction
from codey_server.secretfile import ensure_private_dir
from codey_server.settings import Settings

SECRET = "s3cr3t-access-token-value-0123456789abcdef"


@pytest.fixture
def clean_root() -> Iterator[None]:
    """Put the root logger (and uvicorn's loggers) back as they were after each test."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    uv_saved = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level,
                    logging.getLogger(n).propagate)
                for n in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")}
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for name, (handlers, level, propagate) in uv_saved.items():
        lg = logging.getLogger(name)
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate


def test_building_the_app_keeps_the_redaction_filter_and_the_level(
        tmp_path: Path, clean_root: None) -> None:
    out = io.StringIO()
    configure_logging("warning", out)
    create_app(Settings(data_dir=tmp_path / "data"))
    config = uvicorn.Config(lambda *a: None, log_config=None, log_level="debug")
    assert config.log_level == "debug"
    install_redaction()

    logging.getLogger("x").warning("GET /?token=%s", SECRET)
    logging.getLogger("uvicorn.access").warning("GET /nope?token=%s 404", SECRET)
    logging.getLogger("codey.auth").warning('got {"access_token": "%s"}', SECRET)
    logging.getLogger("codey.app").info("below the level: %s", "must not appear")

    text = out.getvalue()
    assert SECRET not in text
    assert text.count("[redacted]") == 3
    assert "must not appear" not in text
    assert logging.getLogger().level == logging.WARNING


def test_install_redaction_covers_a_handler_added_by_a_library(clean_root: None) -> None:
    out = io.StringIO()
    lib = logging.getLogger("some.library")
    handler = logging.StreamHandler(out)
    lib.addHandler(handler)
    try:
        install_redaction()
        install_redaction()  # idempotent: one filter, not two
        assert len(handler.filters) == 1
        lib.error("Authorization: Bearer %s", SECRET)
    finally:
        lib.removeHandler(handler)
    assert SECRET not in out.getvalue() and "[redacted]" in out.getvalue()


def test_ensure_private_dir_creates_0700_and_tightens_a_loose_dir(tmp_path: Path) -> None:
    fresh = tmp_path / "a" / "b"
    ensure_private_dir(fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    ensure_private_dir(loose)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
