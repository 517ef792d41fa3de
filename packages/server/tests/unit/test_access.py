"""BrowserAccess without a server: token file, sessions, Host and Origin rules, redaction."""

from __future__ import annotations

import asyncio
import logging
import stat
from pathlib import Path

from codey_server.http.access import BrowserAccess, load_or_create_token
from codey_server.logsetup import RedactSecrets
from codey_server.settings import Settings


def _access(tmp_path: Path, **kw: object) -> BrowserAccess:
    return BrowserAccess(Settings(data_dir=tmp_path, port=8765, **kw))  # type: ignore[arg-type]


def test_token_has_at_least_192_bits_is_0600_and_is_reused(tmp_path: Path) -> None:
    token = load_or_create_token(tmp_path)
    assert len(token) >= 32  # 32 urlsafe chars = 192 bits; token_urlsafe(32) gives 43
    path = tmp_path / "access_token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_token(tmp_path) == token
    assert load_or_create_token(tmp_path / "other") != token


def test_a_short_or_world_readable_token_file_is_fixed(tmp_path: Path) -> None:
    path = tmp_path / "access_token"
    path.write_text("guessable\n")
    path.chmod(0o644)
    token = load_or_create_token(tmp_path)
    assert token != "guessable" and len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_login_needs_the_exact_token_and_sessions_survive_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        access = _access(tmp_path)
        assert await access.login("nope") is None
        assert await access.login(access.token[:-1]) is None
        session = await access.login(access.token)
        assert session is not None and await access.check_session(session)
        assert not await access.check_session(session + "x")
        stored = (tmp_path / "browser_sessions.json").read_text()
        assert session not in stored  # only a hash is kept
        again = _access(tmp_path)  # a restarted server
        assert await again.check_session(session)
        await again.end_session(session)
        assert not await again.check_session(session)
        assert not await _access(tmp_path).check_session(session)

    asyncio.run(main())


def test_cookie_name_is_stable_per_data_dir_and_differs_between_servers(tmp_path: Path) -> None:
    a = _access(tmp_path / "a")
    assert a.cookie_name == _access(tmp_path / "a").cookie_name
    assert a.cookie_name != _access(tmp_path / "b").cookie_name


def test_cookie_is_httponly_samesite_strict_and_secure_only_behind_tls(tmp_path: Path) -> None:
    plain = _access(tmp_path).session_cookie("sid")
    assert plain.httponly and plain.samesite == "strict" and not plain.secure
    assert _access(tmp_path, tls=True).session_cookie("sid").secure


def test_host_check_allows_loopback_and_configured_names_only(tmp_path: Path) -> None:
    access = _access(tmp_path, allowed_hosts=["codey.lan"],
                     public_url="https://codey.example.org/")
    for ok in ("127.0.0.1:8765", "localhost", "LOCALHOST:1", "[::1]:8765", "codey.lan:80",
               "codey.example.org"):
        assert access.host_allowed(ok), ok
    for bad in (None, "", "evil.example", "evil.example:8765", "127.0.0.1.evil.example",
                "localhost.evil.example", "[::1]x", "127.0.0.1:abc", "10.0.0.5:8765"):
        assert not access.host_allowed(bad), bad


def test_bound_address_counts_as_a_host_name(tmp_path: Path) -> None:
    assert _access(tmp_path, host="10.0.0.5").host_allowed("10.0.0.5:8765")
    assert not _access(tmp_path, host="0.0.0.0").host_allowed("0.0.0.0:8765")


def test_origins_are_own_host_public_url_and_allowed_origins(tmp_path: Path) -> None:
    access = _access(tmp_path, allowed_origins=["https://ide.example.org"],
                     public_url="https://codey.example.org/base")
    origins = access.origins("127.0.0.1:8765", "http")
    assert origins == {"http://127.0.0.1:8765", "https://ide.example.org",
                       "https://codey.example.org"}
    assert "https://localhost:9" in _access(tmp_path, tls=True).origins("localhost:9", "http")


def test_redaction_masks_tokens_in_log_records() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "GET /?token=%s and %s", (
        "s3cr3tvalue", '{"access_token": "AAA.BBB.CCC", "refresh_token":"rrr"}'), None)
    assert RedactSecrets().filter(record)
    message = record.getMessage()
    for secret in ("s3cr3tvalue", "AAA.BBB.CCC", "rrr"):
        assert secret not in message
    bot = logging.LogRecord("httpx", logging.INFO, __file__, 1, "HTTP Request: POST %s", (
        "https://api.telegram.org/bot123456:AAH-x_yz0123/getUpdates",), None)
    RedactSecrets().filter(bot)
    assert bot.getMessage() == ("HTTP Request: POST https://api.telegram.org/bot[redacted]"
                                "/getUpdates")
    db = logging.LogRecord("x", logging.INFO, __file__, 1, "connecting to %s", (
        "postgresql://codey:hunter2@db.internal:5432/codey",), None)
    RedactSecrets().filter(db)
    assert db.getMessage() == "connecting to postgresql://codey:[redacted]@db.internal:5432/codey"
    plain = logging.LogRecord("x", logging.INFO, __file__, 1, "nothing here %d", (1,), None)
    RedactSecrets().filter(plain)
    assert plain.getMessage() == "nothing here 1"


def test_beyond_loopback_without_auth_refuses_and_without_tls_warns(tmp_path: Path) -> None:
    import subprocess
    import sys

    import pytest

    from codey_server.errors import ConfigError

    with pytest.raises(ConfigError, match="without auth"):
        Settings(host="0.0.0.0", auth_required=False).check()
    warnings = Settings(host="0.0.0.0").check()
    assert any("docs/security.md" in w and "TLS" in w for w in warnings)
    assert Settings(host="0.0.0.0", tls=True).check() == []
    assert Settings(host="127.0.0.1", auth_required=False).check() == []
    run = subprocess.run([sys.executable, "-m", "codey_server.cli", "serve", "--host", "0.0.0.0",
                          "--port", "0", "--no-auth", "--data-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "without auth" in run.stderr


def test_redaction_masks_client_secrets_and_basic_credentials() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%s / %s", (
        "client_secret=corp-s3cret&grant_type=refresh_token",
        "Authorization: Basic Y29kZXk6Y29ycC1zM2NyZXQ="), None)
    assert RedactSecrets().filter(record)
    message = record.getMessage()
    assert "corp-s3cret" not in message and "Y29kZXk6Y29ycC1zM2NyZXQ=" not in message
    assert "grant_type=refresh_token" in message
