"""The one map from the error hierarchy to HTTP answers (codey_server.http.errors)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from litestar import Litestar, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import JSONBody
from litestar.testing import TestClient

from codey_server.core.rules import CommandRejected
from codey_server.errors import ConfigError, LogClosed, ServerError, SubscriberOverflow
from codey_server.http.errors import (
    STATUS_OF_CODE,
    JSONRequest,
    errors,
    exception_handlers,
    status_of,
)
from codey_server.http.fields import NonBlank
from codey_server.providers.oauth import OAuthFailed
from codey_server.providers.service import AuthError
from codey_server.workers.pairing import PairingError


@pytest.mark.parametrize(("err", "status"), [
    (CommandRejected("not_found", "no session"), 404),
    (CommandRejected("conflict", "approval already approved"), 409),
    (CommandRejected("forbidden", "revoked"), 403),
    (CommandRejected("bad_request", "the prompt is empty"), 400),
    (PairingError("wrong_code", "wrong code"), 403),  # the proof failed
    (PairingError("expired", "this code expired"), 410),
    (PairingError("locked", "too many wrong codes"), 423),
    (PairingError("too_many", "too many pending"), 429),
    (AuthError("bad_state", "unknown state"), 400),
    (AuthError("not_found", "no provider"), 404),
    # a code the provider chose: the provider said no
    (AuthError("invalid_grant", "expired refresh token"), 502),
    (OAuthFailed("access_denied", "the user said no"), 502),
    # an unknown code of ours is still the caller's fault
    (CommandRejected("odd", "?"), 400),
    (LogClosed(), 503),
    (SubscriberOverflow(), 500),
    (ConfigError("bad"), 500),
])
def test_each_error_gets_the_status_of_its_code_or_class(err: ServerError, status: int) -> None:
    assert status_of(err) == status


def test_every_listed_code_is_a_client_error() -> None:
    assert all(400 <= status < 500 for status in STATUS_OF_CODE.values())


class Body(msgspec.Struct, forbid_unknown_fields=True):
    text: str


class Titled(msgspec.Struct, forbid_unknown_fields=True):
    title: NonBlank


class Named(msgspec.Struct, forbid_unknown_fields=True):
    #: named like a dependency of the app, as ``NewSession.agent`` is like the agent service
    agent: str | None = None


class Toggles(msgspec.Struct, forbid_unknown_fields=True):
    network: bool = False
    limit: int = 10
    ratio: float = 1.0


def _app() -> Litestar:
    @get("/rejected", sync_to_thread=False)
    def rejected() -> None:
        raise CommandRejected("conflict", "approval already approved")

    @get("/pairing", sync_to_thread=False)
    def pairing() -> None:
        raise PairingError("locked", "this request is locked")

    @get("/provider", sync_to_thread=False)
    def provider() -> None:
        raise AuthError("invalid_grant", "the refresh token expired")

    @get("/bug", sync_to_thread=False)
    def bug() -> None:
        raise ServerError("an invariant broke")

    @get("/crash", sync_to_thread=False)
    def crash() -> None:
        raise KeyError("a handler's bug")

    @post("/body", sync_to_thread=False)
    def body(data: JSONBody[Body]) -> dict[str, str]:
        return {"text": data.text}

    @post("/titled", sync_to_thread=False)
    def titled(data: JSONBody[Titled]) -> dict[str, str]:
        return {"title": data.title}

    @post("/named", sync_to_thread=False)
    def named(data: JSONBody[Named], agent: NamedDependency[str]) -> dict[str, str | None]:
        return {"agent": data.agent}

    @post("/toggles", sync_to_thread=False)
    def toggles(data: JSONBody[Toggles]) -> Toggles:
        return data

    return Litestar([rejected, pairing, provider, bug, crash, body, titled, named, toggles],
                    debug=False,
                    exception_handlers=exception_handlers, request_class=JSONRequest,
                    dependencies={"agent": Provide(lambda: "the service", sync_to_thread=False)},
                    logging_config=None)


def _get(path: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with TestClient(_app()) as client:
        r = client.get(path, **kwargs)
        return r.status_code, r.json()


def test_a_coded_error_answers_with_its_status_message_and_code() -> None:
    assert _get("/rejected") == (409, {"status_code": 409, "detail": "approval already approved",
                                       "extra": {"code": "conflict"}})
    assert _get("/pairing") == (423, {"status_code": 423, "detail": "this request is locked",
                                      "extra": {"code": "locked"}})
    # the message alone: AuthError's str() repeats the code
    assert _get("/provider") == (502, {"status_code": 502,
                                       "detail": "the refresh token expired",
                                       "extra": {"code": "invalid_grant"}})


def test_an_uncoded_server_error_is_a_500() -> None:
    status, body = _get("/bug")
    assert status == 500 and body["status_code"] == 500 and "extra" not in body


def test_any_other_exception_is_a_500_logged_with_its_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    status, body = _get("/crash")
    assert (status, body) == (500, {"status_code": 500, "detail": "Internal Server Error"})
    failed = [r for r in caplog.records if r.name == "codey.http"]
    assert [r.getMessage() for r in failed] == ["GET /crash failed"]
    assert failed[0].exc_info and failed[0].exc_info[0] is KeyError


def test_a_pattern_that_fails_is_answered_with_its_words() -> None:
    with TestClient(_app()) as client:
        assert client.post("/titled", json={"title": " x "}).status_code == 201
        r = client.post("/titled", json={"title": " \n"})
    assert r.status_code == 400
    assert r.json()["detail"] == "must not be empty - at `title`"  # not the regex


def test_a_body_field_named_like_a_dependency_is_still_the_clients_fault() -> None:
    # Litestar answers this with a 500, taking the field for the ``agent`` dependency
    with TestClient(_app()) as client:
        assert client.post("/named", json={"agent": "codex"}).json() == {"agent": "codex"}
        r = client.post("/named", json={"agent": {}})
    assert r.status_code == 400, r.text
    assert r.json()["detail"] == "Expected `str | null`, got `object` - at `agent`"
    assert r.json()["extra"] == [{"message": "Expected `str | null`, got `object`",
                                  "key": "agent", "source": "body"}]


@pytest.mark.parametrize(("raw", "detail"), [
    (b"", "expected a JSON object in the request body"),
    (b"[1]", "Expected `object`, got `array`"),
    (b"{}", "Object missing required field `text`"),
    (b'{"text": 1}', "Expected `str`, got `int` - at `text`"),
    (b'{"text": "a", "more": 1}', "Object contains unknown field `more`"),
    (b"[" * 5000 + b"]" * 5000, "JSON is nested too deeply"),
    (b"{nope", "JSON is malformed"),
])
def test_a_malformed_body_is_a_400_that_says_what_is_wrong(raw: bytes, detail: str) -> None:
    with TestClient(_app()) as client:
        r = client.post("/body", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["status_code"] == 400 and r.json()["detail"].startswith(detail), r.text


@pytest.mark.parametrize(("body", "detail"), [
    # what Litestar's lenient conversion took and the document does not allow
    ({"network": 0}, "Expected `bool`, got `int` - at `network`"),
    ({"network": "false"}, "Expected `bool`, got `str` - at `network`"),
    ({"limit": "5"}, "Expected `int`, got `str` - at `limit`"),
    ({"limit": 5.0}, "Expected `int`, got `float` - at `limit`"),
])
def test_a_body_is_taken_as_strictly_as_its_type_says(body: dict[str, Any], detail: str) -> None:
    with TestClient(_app()) as client:
        assert client.post("/toggles", json={"network": True, "limit": 5, "ratio": 2}).json() \
            == {"network": True, "limit": 5, "ratio": 2.0}  # an int is a number
        r = client.post("/toggles", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["detail"] == detail
    assert r.json()["extra"] == [{"message": detail.split(" - at ")[0], "source": "body",
                                  "key": detail.rpartition("`")[0].rpartition("`")[2]}]


def test_errors_documents_login_refusals_unless_the_route_is_public() -> None:
    assert set(errors(404)) == {401, 403, 404}
    assert set(errors(400, 429, login=False)) == {400, 429}
    assert all(spec.data_container is not None for spec in errors(404).values())
