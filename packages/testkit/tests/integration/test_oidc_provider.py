"""The OIDC provider as a real process: every flow Codey relies on, over real HTTP."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from authlib.integrations.httpx_client import OAuth2Client
from joserfc import jwt
from joserfc.jwk import KeySet

from codey_testkit.errors import TestkitError
from codey_testkit.oidc import OIDCProviderProcess

pytestmark = pytest.mark.integration

REDIRECT = "http://127.0.0.1:9/auth/callback"  # never contacted: redirects are read, not followed
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def query_of(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def authorize(oidc: OIDCProviderProcess, challenge: str | None, **overrides: str) -> httpx.Response:
    params = {
        "response_type": "code",
        "client_id": "codey",
        "redirect_uri": REDIRECT,
        "scope": "openid email offline_access",
        "state": "state-123",
        "nonce": secrets.token_urlsafe(8),
        "code_challenge_method": "S256",
    }
    if challenge is not None:
        params["code_challenge"] = challenge
    params.update(overrides)
    return httpx.get(oidc.url("/authorize"), params={k: v for k, v in params.items() if v})


def get_code(oidc: OIDCProviderProcess, challenge: str, **overrides: str) -> str:
    response = authorize(oidc, challenge, **overrides)
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith(overrides.get("redirect_uri", REDIRECT) + "?")
    return query_of(location)["code"]


def exchange(
    oidc: OIDCProviderProcess, code: str, verifier: str | None, **extra: str
) -> httpx.Response:
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
            "client_id": "codey"}
    if verifier is not None:
        data["code_verifier"] = verifier
    data.update(extra)
    return httpx.post(oidc.url("/token"), data=data)


def login(oidc: OIDCProviderProcess, scope: str = "openid email offline_access") -> dict[str, Any]:
    verifier, challenge = pkce_pair()
    response = exchange(oidc, get_code(oidc, challenge, scope=scope), verifier)
    assert response.status_code == 200, response.text
    token: dict[str, Any] = response.json()
    return token


def jwks_of(oidc: OIDCProviderProcess) -> KeySet:
    return KeySet.import_key_set(httpx.get(oidc.url("/jwks.json")).json())


def verify(
    oidc: OIDCProviderProcess, token: str, *, leeway: int = 0, **claims: Any
) -> dict[str, Any]:
    decoded = jwt.decode(token, jwks_of(oidc), algorithms=["RS256"])
    options = {name: {"essential": True, "value": value} for name, value in claims.items()}
    registry = jwt.JWTClaimsRegistry(leeway=leeway, exp={"essential": True}, **options)
    registry.validate(decoded.claims)
    return {"header": decoded.header, **decoded.claims}


def userinfo(oidc: OIDCProviderProcess, access_token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {access_token}"} if access_token else {}
    return httpx.get(oidc.url("/userinfo"), headers=headers)


def poll(oidc: OIDCProviderProcess, device_code: str) -> httpx.Response:
    return httpx.post(oidc.url("/token"), data={"grant_type": DEVICE_GRANT,
                                                "device_code": device_code, "client_id": "codey"})


def start_device(oidc: OIDCProviderProcess, scope: str = "openid email") -> dict[str, Any]:
    response = httpx.post(oidc.url("/device_authorization"),
                          data={"client_id": "codey", "scope": scope})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


@pytest.fixture(scope="module")
def oidc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OIDCProviderProcess]:
    with OIDCProviderProcess(
        log_dir=tmp_path_factory.mktemp("oidc"),
        redirect_uris=[REDIRECT],
    ) as provider:
        yield provider


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OIDCProviderProcess]:
    with OIDCProviderProcess(
        log_dir=tmp_path_factory.mktemp("oidc-short"),
        redirect_uris=[REDIRECT],
        device_expires=1,
        access_token_ttl=3,
        audience="other-api",
        user_email="someone@example.test",
    ) as provider:
        yield provider


def test_listening_line_is_the_issuer_and_discovery_describes_it(oidc: OIDCProviderProcess) -> None:
    lines = oidc.process.read_log().splitlines()
    assert lines[0] == f"codey-oidc-provider listening on {oidc.issuer}"
    meta = httpx.get(oidc.url("/.well-known/openid-configuration")).json()
    assert meta["issuer"] == oidc.issuer
    for name, path in [("authorization_endpoint", "/authorize"), ("token_endpoint", "/token"),
                       ("device_authorization_endpoint", "/device_authorization"),
                       ("userinfo_endpoint", "/userinfo"), ("jwks_uri", "/jwks.json")]:
        assert meta[name] == oidc.url(path)
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert set(meta["grant_types_supported"]) == {"authorization_code", "refresh_token",
                                                  DEVICE_GRANT}
    assert meta["response_types_supported"] == ["code"]
    assert meta["id_token_signing_alg_values_supported"] == ["RS256"]
    keys = httpx.get(meta["jwks_uri"]).json()["keys"]
    assert len(keys) == 1 and keys[0]["kty"] == "RSA" and "d" not in keys[0]
    assert httpx.get(oidc.url("/_health")).json()["status"] == "ok"


def test_code_flow_with_httpx_issues_verifiable_tokens(oidc: OIDCProviderProcess) -> None:
    verifier, challenge = pkce_pair()
    response = authorize(oidc, challenge, nonce="nonce-abc", state="s-1")
    assert response.status_code == 302
    params = query_of(response.headers["location"])
    assert params["state"] == "s-1"

    token_response = exchange(oidc, params["code"], verifier)
    assert token_response.status_code == 200, token_response.text
    assert token_response.headers["cache-control"] == "no-store"
    token = token_response.json()
    assert token["token_type"] == "Bearer"
    assert token["expires_in"] == 3600
    assert token["scope"] == "openid email offline_access"
    assert token["refresh_token"]

    access = verify(oidc, token["access_token"], iss=oidc.issuer, sub="user-1",
                    aud="codey-model", client_id="codey")
    assert access["header"]["typ"] == "at+jwt"
    assert access["scope"] == "openid email offline_access"
    assert access["exp"] - access["iat"] == 3600

    id_token = verify(oidc, token["id_token"], iss=oidc.issuer, sub="user-1", nonce="nonce-abc")
    assert id_token["aud"] == ["codey"]
    assert id_token["email"] == "dev@example.test"
    assert id_token["email_verified"] is True
    assert id_token["header"]["kid"] == jwks_of(oidc).keys[0].kid
    expected_at_hash = base64.urlsafe_b64encode(
        hashlib.sha256(token["access_token"].encode()).digest()[:16]).rstrip(b"=").decode()
    assert id_token["at_hash"] == expected_at_hash

    info = userinfo(oidc, token["access_token"])
    assert info.status_code == 200
    assert info.json() == {"sub": "user-1", "email": "dev@example.test", "email_verified": True}


def test_code_flow_with_authlib_client(oidc: OIDCProviderProcess) -> None:
    meta = httpx.get(oidc.url("/.well-known/openid-configuration")).json()
    verifier = secrets.token_urlsafe(48)
    with OAuth2Client(client_id="codey", redirect_uri=REDIRECT, scope="openid email",
                      code_challenge_method="S256", token_endpoint_auth_method="none") as client:
        url, state = client.create_authorization_url(
            meta["authorization_endpoint"], code_verifier=verifier, nonce="n-authlib")
        redirect = httpx.get(url)
        assert redirect.status_code == 302
        token = client.fetch_token(meta["token_endpoint"],
                                   authorization_response=redirect.headers["location"],
                                   state=state, code_verifier=verifier)
        claims = verify(oidc, token["id_token"], iss=oidc.issuer, nonce="n-authlib")
        assert claims["aud"] == ["codey"]
        me = client.get(meta["userinfo_endpoint"])
        assert me.status_code == 200 and me.json()["sub"] == "user-1"
        refreshed = client.refresh_token(meta["token_endpoint"])
        assert refreshed["access_token"] != token["access_token"]
        assert refreshed["refresh_token"] != token["refresh_token"]


def test_refresh_rotates_and_reuse_revokes_the_family(oidc: OIDCProviderProcess) -> None:
    first = login(oidc)

    def refresh(refresh_token: str) -> httpx.Response:
        return httpx.post(oidc.url("/token"), data={
            "grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": "codey"})

    second = refresh(first["refresh_token"])
    assert second.status_code == 200, second.text
    rotated = second.json()
    assert rotated["refresh_token"] != first["refresh_token"]
    assert rotated["scope"] == first["scope"]
    verify(oidc, rotated["access_token"], iss=oidc.issuer, sub="user-1", aud="codey-model")
    verify(oidc, rotated["id_token"], iss=oidc.issuer, sub="user-1")
    assert userinfo(oidc, rotated["access_token"]).status_code == 200

    reused = refresh(first["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    # Reuse of a rotated-away token means it leaked: the whole chain is now dead.
    assert refresh(rotated["refresh_token"]).json()["error"] == "invalid_grant"
    assert userinfo(oidc, rotated["access_token"]).status_code == 401


@pytest.mark.parametrize(
    ("challenge_method", "with_challenge"),
    [("S256", False), ("plain", True), ("", True)],
    ids=["no-challenge", "plain", "no-method-means-plain"],
)
def test_authorize_requires_pkce_s256(
    oidc: OIDCProviderProcess, challenge_method: str, with_challenge: bool
) -> None:
    _, challenge = pkce_pair()
    response = authorize(oidc, challenge if with_challenge else None,
                         code_challenge_method=challenge_method)
    # The redirect URI is valid, so the error goes back to the client (RFC 6749 §4.1.2.1).
    assert response.status_code == 302
    params = query_of(response.headers["location"])
    assert params["error"] == "invalid_request"
    assert params["state"] == "state-123"
    assert "code" not in params


def test_token_refuses_wrong_or_missing_verifier(oidc: OIDCProviderProcess) -> None:
    verifier, challenge = pkce_pair()
    code = get_code(oidc, challenge)
    wrong = exchange(oidc, code, pkce_pair()[0])
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    missing = exchange(oidc, code, None)
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
    # Failed attempts do not burn the code for its rightful owner.
    assert exchange(oidc, code, verifier).status_code == 200


def test_replayed_code_is_refused_and_revokes_its_tokens(oidc: OIDCProviderProcess) -> None:
    verifier, challenge = pkce_pair()
    code = get_code(oidc, challenge)
    first = exchange(oidc, code, verifier)
    assert first.status_code == 200
    access = first.json()["access_token"]
    assert userinfo(oidc, access).status_code == 200

    replay = exchange(oidc, code, verifier)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    assert userinfo(oidc, access).status_code == 401


def test_unregistered_redirect_uri_or_client_is_refused_without_redirect(
    oidc: OIDCProviderProcess,
) -> None:
    _, challenge = pkce_pair()
    for overrides in ({"redirect_uri": "http://127.0.0.1:9/evil"},
                      {"redirect_uri": REDIRECT + "/"},  # exact match: no prefix tricks
                      {"redirect_uri": ""},
                      {"client_id": "nobody"}):
        response = authorize(oidc, challenge, **overrides)
        assert response.status_code == 400, overrides
        assert "location" not in response.headers
        assert response.json()["error"] in ("invalid_request", "invalid_client")


def test_redirect_uris_added_at_run_time_and_checked_at_token(oidc: OIDCProviderProcess) -> None:
    late = "http://127.0.0.1:9/late/callback"
    _, challenge = pkce_pair()
    assert authorize(oidc, challenge, redirect_uri=late).status_code == 400
    registered = oidc.add_client("codey", [late])
    assert registered["redirect_uris"] == [REDIRECT, late]

    verifier, challenge = pkce_pair()
    code = get_code(oidc, challenge, redirect_uri=late)
    other = exchange(oidc, code, verifier)  # exchange() sends REDIRECT, not `late`
    assert other.status_code == 400 and other.json()["error"] == "invalid_grant"
    assert exchange(oidc, code, verifier, redirect_uri=late).status_code == 200


def test_confidential_client_added_at_run_time_must_authenticate(
    oidc: OIDCProviderProcess,
) -> None:
    oidc.add_client("backend", [REDIRECT], client_secret="s3cret")
    verifier, challenge = pkce_pair()
    code = get_code(oidc, challenge, client_id="backend")
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
            "code_verifier": verifier}
    no_auth = httpx.post(oidc.url("/token"), data={**data, "client_id": "backend"})
    assert no_auth.json()["error"] == "invalid_client"
    bad = httpx.post(oidc.url("/token"), data=data, auth=("backend", "wrong"))
    assert bad.status_code == 401 and bad.json()["error"] == "invalid_client"
    good = httpx.post(oidc.url("/token"), data=data, auth=("backend", "s3cret"))
    assert good.status_code == 200, good.text
    assert verify(oidc, good.json()["access_token"], client_id="backend")["sub"] == "user-1"


def test_device_flow_pending_slow_down_approve(oidc: OIDCProviderProcess) -> None:
    device = start_device(oidc)
    assert device["interval"] == 1
    assert device["verification_uri"] == oidc.url("/device")
    assert device["verification_uri_complete"] == (
        f"{oidc.url('/device')}?user_code={device['user_code']}")

    assert poll(oidc, device["device_code"]).json()["error"] == "authorization_pending"
    assert poll(oidc, device["device_code"]).json()["error"] == "slow_down"
    time.sleep(1.2)  # longer than the announced 1 s, shorter than the raised 1 + 5 s
    assert poll(oidc, device["device_code"]).json()["error"] == "slow_down"

    page = httpx.get(device["verification_uri_complete"] + "&approve=1")
    assert page.status_code == 200 and "approved" in page.text

    token_response = poll(oidc, device["device_code"])
    assert token_response.status_code == 200, token_response.text
    token = token_response.json()
    verify(oidc, token["access_token"], iss=oidc.issuer, sub="user-1", aud="codey-model")
    assert verify(oidc, token["id_token"], iss=oidc.issuer)["email"] == "dev@example.test"
    assert token["refresh_token"]
    assert userinfo(oidc, token["access_token"]).status_code == 200
    # A device code is good for one token response.
    assert poll(oidc, device["device_code"]).status_code == 400


def test_device_flow_denied(oidc: OIDCProviderProcess) -> None:
    device = start_device(oidc)
    oidc.deny_device(device["user_code"])
    denied = poll(oidc, device["device_code"])
    assert denied.status_code == 400 and denied.json()["error"] == "access_denied"
    with pytest.raises(TestkitError, match="404"):
        oidc.approve_device(device["user_code"])  # the first decision stands


def test_device_page_form_and_test_hook(oidc: OIDCProviderProcess) -> None:
    device = start_device(oidc)
    form = httpx.get(oidc.url("/device"), params={"user_code": device["user_code"]})
    assert form.status_code == 200
    assert f"value='{device['user_code']}'" in form.text and "method='post'" in form.text
    # The user types the code loosely; the form posts it back with the chosen action.
    typed = device["user_code"].lower().replace("-", " ")
    done = httpx.post(oidc.url("/device"), data={"user_code": typed, "action": "approve"})
    assert done.status_code == 200 and "approved" in done.text
    assert poll(oidc, device["device_code"]).status_code == 200

    other = start_device(oidc, scope="email")
    oidc.approve_device(other["user_code"])
    token = poll(oidc, other["device_code"]).json()
    assert "id_token" not in token  # no "openid" scope, no ID token
    assert userinfo(oidc, token["access_token"]).status_code == 403  # insufficient_scope


def test_device_code_expires(short_lived: OIDCProviderProcess) -> None:
    device = start_device(short_lived)
    assert device["expires_in"] == 1
    time.sleep(1.1)  # deliberate: its lapse on the provider's clock (real time) is the point
    expired = poll(short_lived, device["device_code"])
    assert expired.status_code == 400 and expired.json()["error"] == "expired_token"
    assert httpx.post(short_lived.url("/_device/approve"),
                      json={"user_code": device["user_code"]}).status_code == 404


def test_userinfo_needs_a_valid_unexpired_token(
    short_lived: OIDCProviderProcess, oidc: OIDCProviderProcess
) -> None:
    missing = userinfo(short_lived, None)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    garbage = userinfo(short_lived, "not-a-jwt")
    assert garbage.status_code == 401
    assert 'error="invalid_token"' in garbage.headers["www-authenticate"]

    token = login(short_lived)
    # leeway: on a loaded machine the 3 s token may already be stale by now
    claims = verify(short_lived, token["access_token"], leeway=60, aud="other-api")
    assert claims["exp"] - claims["iat"] == 3 and token["expires_in"] == 3
    info = userinfo(short_lived, token["access_token"])
    if time.time() < claims["exp"]:
        assert info.json()["email"] == "someone@example.test"
    # A token from another provider (another key, issuer and audience) is refused.
    assert userinfo(short_lived, login(oidc)["access_token"]).status_code == 401
    time.sleep(max(0.0, claims["exp"] + 1.1 - time.time()))  # exp is whole seconds
    expired = userinfo(short_lived, token["access_token"])
    assert expired.status_code == 401 and "invalid_token" in expired.headers["www-authenticate"]


def test_sigterm_stops_the_process_cleanly(tmp_path: Path) -> None:
    provider = OIDCProviderProcess(log_dir=tmp_path).start()
    assert httpx.get(provider.url("/_health")).status_code == 200
    assert provider.stop() == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(provider.url("/_health"))
