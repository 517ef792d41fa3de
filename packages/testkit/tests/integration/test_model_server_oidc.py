"""The model server accepting JWT access tokens from an OIDC issuer (discovery + JWKS).

The issuer here is a minimal stdlib HTTP server in this test process: it serves the discovery
document and the JWKS, and the test signs tokens with the matching private key.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from codey_testkit.model_server import start_model_server

pytestmark = pytest.mark.integration

AUDIENCE = "codey-model"


class Issuer:
    def __init__(self) -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": "k1"})
        self.jwks_hits = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body: Any = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/jwks.json"}
                elif self.path == "/jwks.json":
                    issuer.jwks_hits += 1
                    body = KeySet([issuer.key]).as_dict(private=False)
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def token(self, key: RSAKey | None = None, **overrides: Any) -> str:
        now = int(time.time())
        claims = {"iss": self.url, "sub": "user-1", "aud": AUDIENCE, "iat": now,
                  "exp": now + 300, **overrides}
        signer = key or self.key
        header = {"alg": "RS256", "typ": "at+jwt", "kid": signer.kid}
        return jwt.encode(header, claims, signer)


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    server = Issuer()
    yield server
    server.httpd.shutdown()


def test_oidc_access_tokens(issuer: Issuer, tmp_path: Path) -> None:
    script = {"steps": [{"match": {"any": True}, "reply": {"text": "authorised"}}]}
    with start_model_server(script, tmp_path, api_key="sk-static",
                            oidc_issuer=issuer.url) as model:

        def ask(token: str) -> str:
            client = openai.OpenAI(base_url=model.base_url, api_key=token, max_retries=0)
            return client.responses.create(model="m", input="hi").output_text

        assert ask(issuer.token()) == "authorised"
        assert ask("sk-static") == "authorised"  # the static key still works alongside
        stranger = RSAKey.generate_key(2048, parameters={"kid": "k1"})
        rejected = {
            "expired": issuer.token(exp=int(time.time()) - 600),
            "wrong audience": issuer.token(aud="someone-else"),
            "wrong issuer": issuer.token(iss="http://127.0.0.1:9/evil"),
            "foreign key": issuer.token(key=stranger),
            "garbage": "a.b.c",
        }
        for why, token in rejected.items():
            with pytest.raises(openai.AuthenticationError) as caught:
                ask(token)
            body = caught.value.body
            assert isinstance(body, dict) and body["code"] == "invalid_api_key", why
        statuses = [r["status"] for r in model.requests()]
        assert statuses == [200, 200, 401, 401, 401, 401, 401]
        assert issuer.token() not in json.dumps(model.requests())


def test_tokens_from_the_testkit_oidc_provider(tmp_path: Path) -> None:
    """Interop with codey_testkit's own provider (device flow), default audience included."""
    import httpx

    from codey_testkit.oidc import OIDCProviderProcess

    script = {"steps": [{"match": {"any": True}, "reply": {"text": "hello provider"}}]}
    with OIDCProviderProcess(log_dir=tmp_path) as oidc:
        device = httpx.post(oidc.url("/device_authorization"),
                            data={"client_id": "codey", "scope": "openid"}, timeout=10).json()
        oidc.approve_device(device["user_code"])
        token = httpx.post(oidc.url("/token"), timeout=10, data={
            "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": device["device_code"], "client_id": "codey"}).json()["access_token"]
        with start_model_server(script, tmp_path, oidc_issuer=oidc.issuer) as model:
            client = openai.OpenAI(base_url=model.base_url, api_key=token, max_retries=0)
            assert client.responses.create(model="m", input="hi").output_text == "hello provider"
            other = openai.OpenAI(base_url=model.base_url, api_key="sk-nope", max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                other.responses.create(model="m", input="hi")
