"""The provider core (`OIDCProvider.handle`) driven in-process with plain request values."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from authlib.oidc.discovery import OpenIDProviderMetadata

from codey_testkit.oidc import HttpRequest, HttpResponse, OIDCProvider, ProviderSettings
from codey_testkit.oidc.keys import SigningKeys
from codey_testkit.oidc.settings import ClientSettings

ISSUER = "http://127.0.0.1:5556"
REDIRECT = "http://127.0.0.1:9/cb"
FORM = "application/x-www-form-urlencoded"
KEYS = SigningKeys()  # RSA generation is the slow part; one key serves every test here


def make(**overrides: Any) -> OIDCProvider:
    settings = ProviderSettings(clients=(ClientSettings("codey", (REDIRECT,)),), **overrides)
    return OIDCProvider(settings, ISSUER, KEYS)


def get(provider: OIDCProvider, path: str, **params: str) -> HttpResponse:
    query = urlencode(params)
    return provider.handle(HttpRequest("GET", path, f"{ISSUER}{path}?{query}",
                                       query=parse_qs(query)))


def post(provider: OIDCProvider, path: str, *, form: dict[str, str] | None = None,
         body: Any = None) -> HttpResponse:
    if form is not None:
        data, ctype = urlencode(form).encode(), FORM
    else:
        data, ctype = json.dumps(body).encode(), "application/json"
    return provider.handle(HttpRequest("POST", path, f"{ISSUER}{path}",
                                       headers=httpx.Headers({"Content-Type": ctype}), body=data))


def as_json(response: HttpResponse) -> Any:
    return json.loads(response.body)


def code_for(provider: OIDCProvider) -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(
        hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    response = get(provider, "/authorize", response_type="code", client_id="codey",
                   redirect_uri=REDIRECT, scope="openid", state="s", code_challenge=challenge,
                   code_challenge_method="S256")
    assert response.status == 302, response.body
    location = response.header("Location") or ""
    return parse_qs(urlsplit(location).query)["code"][0], verifier


def test_metadata_is_valid_openid_provider_metadata() -> None:
    metadata = as_json(get(make(), "/.well-known/openid-configuration"))
    OpenIDProviderMetadata(metadata).validate()
    assert metadata["issuer"] == ISSUER


def test_unknown_path_is_404_and_wrong_method_405() -> None:
    provider = make()
    assert get(provider, "/nope").status == 404
    assert get(provider, "/token").status == 405


def test_code_exchange_in_process_and_expired_code() -> None:
    provider = make()
    code, verifier = code_for(provider)
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
            "client_id": "codey", "code_verifier": verifier}
    provider.store.codes[code].expires_at = time.time() - 1
    expired = post(provider, "/token", form=form)
    assert expired.status == 400 and as_json(expired)["error"] == "invalid_grant"
    provider.store.codes[code].expires_at = time.time() + 60
    assert post(provider, "/token", form=form).status == 200


def test_token_parameters_in_the_query_string_are_ignored() -> None:
    provider = make()
    code, verifier = code_for(provider)
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
            "client_id": "codey", "code_verifier": verifier}
    query = urlencode(form)
    response = provider.handle(HttpRequest("POST", "/token", f"{ISSUER}/token?{query}",
                                           query=parse_qs(query)))
    assert response.status == 400
    assert as_json(response)["error"] == "unsupported_grant_type"


def test_slow_down_raises_the_interval_each_time() -> None:
    provider = make(device_interval=5, device_slow_down_increment=5)
    device = as_json(post(provider, "/device_authorization", form={"client_id": "codey"}))
    form = {"grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": device["device_code"], "client_id": "codey"}
    errors = [as_json(post(provider, "/token", form=form))["error"] for _ in range(3)]
    assert errors == ["authorization_pending", "slow_down", "slow_down"]
    assert provider.store.devices_by_code[device["device_code"]].interval == 15


def test_device_code_of_another_client_is_refused() -> None:
    provider = make()
    provider.add_client("other", [])
    device = as_json(post(provider, "/device_authorization", form={"client_id": "codey"}))
    response = post(provider, "/token", form={
        "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
        "device_code": device["device_code"], "client_id": "other"})
    assert as_json(response)["error"] == "unauthorized_client"


def test_device_hooks_validate_input() -> None:
    provider = make()
    assert post(provider, "/_device/approve", body={}).status == 400
    assert post(provider, "/_device/approve", body={"user_code": "BCDF-GHJK"}).status == 404
    device = as_json(post(provider, "/device_authorization", form={"client_id": "codey"}))
    approved = post(provider, "/_device/approve", form={"user_code": device["user_code"]})
    assert as_json(approved) == {"status": "approved"}


def test_device_page_escapes_the_code() -> None:
    page = get(make(), "/device", user_code="<script>x</script>")
    assert page.status == 200
    assert b"<script>" not in page.body and b"&lt;script&gt;" in page.body
    refused = get(make(), "/device", user_code="ZZZZ-ZZZZ", approve="1")
    assert refused.status == 400


@pytest.mark.parametrize(
    "body",
    [None, [], {"redirect_uris": []}, {"client_id": "x", "redirect_uris": "http://a"},
     {"client_id": "x", "client_secret": 5}],
)
def test_register_client_validates_input(body: Any) -> None:
    assert post(make(), "/_clients", body=body).status == 400


def test_register_client_adds_and_merges() -> None:
    provider = make()
    added = as_json(post(provider, "/_clients", body={"client_id": "codey",
                                                      "redirect_uris": ["http://127.0.0.1:9/x"]}))
    assert added["redirect_uris"] == [REDIRECT, "http://127.0.0.1:9/x"]
    assert added["token_endpoint_auth_method"] == "none"
    secret = as_json(post(provider, "/_clients", body={"client_id": "s", "client_secret": "p"}))
    assert secret["token_endpoint_auth_method"] == "client_secret_basic"


# --- client authentication, no device flow, failures ------------------------------------------


def _basic(client_id: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


def _token(provider: OIDCProvider, form: dict[str, str],
           authorization: str | None = None) -> HttpResponse:
    headers = {"Content-Type": FORM}
    if authorization:
        headers["Authorization"] = authorization
    return provider.handle(HttpRequest("POST", "/token", f"{ISSUER}/token",
                                       headers=httpx.Headers(headers),
                                       body=urlencode(form).encode()))


def _confidential(methods: tuple[str, ...]) -> OIDCProvider:
    settings = ProviderSettings(
        clients=(ClientSettings("codey", (REDIRECT,), client_secret="s3cret"),),
        token_endpoint_auth_methods=methods)
    return OIDCProvider(settings, ISSUER, KEYS)


def test_a_confidential_client_must_authenticate_with_an_advertised_method() -> None:
    provider = _confidential(("client_secret_post",))
    meta = as_json(get(provider, "/.well-known/openid-configuration"))
    assert meta["token_endpoint_auth_methods_supported"] == ["client_secret_post"]
    code, verifier = code_for(provider)
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
            "code_verifier": verifier}
    no_secret = _token(provider, {**form, "client_id": "codey"})
    assert no_secret.status == 401 and as_json(no_secret)["error"] == "invalid_client"
    basic = _token(provider, form, _basic("codey", "s3cret"))  # right secret, wrong method
    assert as_json(basic)["error"] == "invalid_client"
    wrong = _token(provider, {**form, "client_id": "codey", "client_secret": "nope"})
    assert as_json(wrong)["error"] == "invalid_client"
    ok = _token(provider, {**form, "client_id": "codey", "client_secret": "s3cret"})
    assert ok.status == 200, ok.body

    provider = _confidential(("client_secret_basic",))
    code, verifier = code_for(provider)
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
            "code_verifier": verifier}
    post_only = _token(provider, {**form, "client_id": "codey", "client_secret": "s3cret"})
    assert as_json(post_only)["error"] == "invalid_client"
    assert _token(provider, form, _basic("codey", "s3cret")).status == 200


def test_without_the_device_flow_there_is_no_device_endpoint() -> None:
    provider = make(device_flow=False)
    meta = as_json(get(provider, "/.well-known/openid-configuration"))
    assert "device_authorization_endpoint" not in meta
    assert not any("device_code" in g for g in meta["grant_types_supported"])
    assert post(provider, "/device_authorization", form={"client_id": "codey"}).status == 404


def test_fail_hook_answers_the_next_requests_with_the_given_status() -> None:
    provider = make()
    assert post(provider, "/_fail", body={"path": "/token", "status": 503,
                                          "body": "maintenance", "times": 2}).status == 200
    for _ in range(2):
        failed = _token(provider, {"grant_type": "refresh_token", "refresh_token": "x"})
        assert (failed.status, failed.body) == (503, b"maintenance")
    after = _token(provider, {"grant_type": "refresh_token", "refresh_token": "x",
                              "client_id": "codey"})
    assert after.status == 400  # back to the real endpoint
    assert post(provider, "/_fail", body={"status": 503}).status == 400
