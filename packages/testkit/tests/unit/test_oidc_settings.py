"""Command line and clients file of codey-oidc-provider; the small record types."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codey_testkit.oidc.models import Client
from codey_testkit.oidc.settings import (
    DEFAULT_SCOPES,
    ClientSettings,
    SettingsError,
    build_parser,
    load_clients_file,
    parse_args,
)
from codey_testkit.oidc.store import MemoryStore, normalize_user_code
from codey_testkit.oidc_provider import main


def test_defaults_match_the_documented_flags() -> None:
    settings = parse_args([])
    assert (settings.host, settings.port) == ("127.0.0.1", 0)
    assert settings.clients == (ClientSettings("codey"),)
    assert settings.audience == "codey-model"
    assert settings.access_token_ttl == 3600
    assert settings.device_interval == 1
    assert settings.device_slow_down_increment == 5
    assert (settings.user_email, settings.user_sub) == ("dev@example.test", "user-1")
    assert settings.scopes == DEFAULT_SCOPES


def test_flags_are_parsed() -> None:
    settings = parse_args([
        "--client-id", "cli", "--redirect-uri", "http://127.0.0.1:1/a",
        "--redirect-uri", "http://127.0.0.1:1/b", "--audience", "aud", "--access-token-ttl", "60",
        "--device-interval", "3", "--device-expires", "9", "--user-email", "x@y.test",
        "--scopes", "openid model",
    ])
    assert settings.clients == (
        ClientSettings("cli", ("http://127.0.0.1:1/a", "http://127.0.0.1:1/b")),
    )
    assert (settings.audience, settings.access_token_ttl) == ("aud", 60)
    assert (settings.device_interval, settings.device_expires) == (3, 9)
    assert settings.user_email == "x@y.test"
    assert settings.scopes == ("openid", "model")


@pytest.mark.parametrize("wrapped", [False, True])
def test_clients_file_in_both_shapes(tmp_path: Path, wrapped: bool) -> None:
    entries = [{"client_id": "web", "redirect_uris": ["http://127.0.0.1:2/cb"]},
               {"client_id": "svc", "client_secret": "s"}]
    path = tmp_path / "clients.json"
    path.write_text(json.dumps({"clients": entries} if wrapped else entries))
    settings = parse_args(["--clients-file", str(path)])
    assert settings.clients[1:] == (
        ClientSettings("web", ("http://127.0.0.1:2/cb",)),
        ClientSettings("svc", (), "s"),
    )


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        '{"clients": 3}',
        '[{"redirect_uris": []}]',
        '[{"client_id": "a", "redirect_uris": "http://x"}]',
        '[{"client_id": "a", "client_secret": 1}]',
    ],
)
def test_bad_clients_file_is_a_settings_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "clients.json"
    path.write_text(content)
    with pytest.raises(SettingsError):
        load_clients_file(path)


def test_duplicate_client_and_bad_lifetimes_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "clients.json"
    path.write_text('[{"client_id": "codey"}]')
    with pytest.raises(SettingsError, match="duplicate"):
        parse_args(["--clients-file", str(path)])
    with pytest.raises(SettingsError):
        parse_args(["--access-token-ttl", "0"])
    with pytest.raises(SettingsError):
        parse_args(["--device-expires", "0"])


def test_main_exits_2_on_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--code-ttl", "-1"])
    assert exited.value.code == 2
    assert "code-ttl" in capsys.readouterr().err


def test_help_has_an_example() -> None:
    assert "Example: codey-oidc-provider" in build_parser().format_help()


def test_user_codes_compare_loosely() -> None:
    assert normalize_user_code("bcdf-ghjk") == normalize_user_code(" BCDF GHJK ") == "BCDFGHJK"


def test_client_matches_redirect_uris_exactly_and_filters_scopes() -> None:
    client = Client("c", ["http://127.0.0.1:1/cb"], ("openid", "email"))
    assert client.check_redirect_uri("http://127.0.0.1:1/cb")
    assert not client.check_redirect_uri("http://127.0.0.1:1/cb/")
    assert not client.check_redirect_uri("http://127.0.0.1:1/CB")
    assert client.get_allowed_scope("openid admin email") == "openid email"
    assert client.get_allowed_scope(None) == ""
    assert client.check_endpoint_auth_method("none", "token")
    assert not client.check_endpoint_auth_method("client_secret_basic", "token")
    secret = Client("s", [], ("openid",), client_secret="pw")
    assert not secret.check_endpoint_auth_method("none", "token")
    assert secret.check_client_secret("pw") and not secret.check_client_secret("px")


def test_store_merges_redirect_uris_of_a_known_client() -> None:
    store = MemoryStore()
    store.add_client(Client("c", ["a"], ("openid",)))
    merged = store.add_client(Client("c", ["b", "a"], ("openid",)))
    assert merged.redirect_uris == ["a", "b"]
    assert store.clients["c"] is merged


def test_auth_methods_and_device_flow_flags() -> None:
    settings = parse_args(["--token-endpoint-auth-methods", "client_secret_post",
                           "--no-device-flow"])
    assert settings.token_endpoint_auth_methods == ("client_secret_post",)
    assert settings.device_flow is False
    default = parse_args([])
    assert default.device_flow is True and "none" in default.token_endpoint_auth_methods
    with pytest.raises(SettingsError, match="token-endpoint-auth-methods"):
        parse_args(["--token-endpoint-auth-methods", "private_key_jwt"])
