"""The HTTP layer's bodies and answers stay in step with the messages they stand for, and the
OpenAPI document built from them says what the server does."""

from __future__ import annotations

import asyncio
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.app import create_app
from codey_server.board import routes as tasks
from codey_server.core.engine import Engine
from codey_server.eventlog import MemoryEventLog
from codey_server.features import RULES
from codey_server.http import sessions
from codey_server.http.fields import NOT_BLANK
from codey_server.providers.service import AuthService, ProviderStatus
from codey_server.schedules import routes as schedules
from codey_server.settings import ProviderConfig, Settings
from codey_server.workers.routes import _REQUESTS


def _fields(struct: type[msgspec.Struct], *, without: set[str]) -> dict[str, Any]:
    return {f.name: (f.type, f.default) for f in msgspec.structs.fields(struct)
            if f.name not in without}


def _plain(t: Any) -> Any:
    """A type without its constraints (``Annotated[str, Meta(...)]`` is ``str``), at any
    depth."""
    if typing.get_origin(t) is Annotated:
        return _plain(typing.get_args(t)[0])
    args = typing.get_args(t)
    if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
        return typing.Union[tuple(_plain(a) for a in args)]  # noqa: UP007
    if typing.get_origin(t) is list:
        return list[_plain(args[0])]  # type: ignore[misc]
    return t


def _narrowed(t: Any) -> Any:
    """A set of names (the body's time zones) is a ``str`` in the command."""
    is_names = typing.get_origin(t) is Literal and all(isinstance(a, str)
                                                       for a in typing.get_args(t))
    return str if is_names else t


def _without_text(t: Any) -> Any:
    """A union that also takes text the route turns into the command's type (a schedule's
    ``at`` as ISO 8601), without that text."""
    return typing.Union[tuple(a for a in typing.get_args(_plain(t)) if a is not str)]  # noqa: UP007


@pytest.mark.parametrize(("body", "command", "from_path", "narrowed", "widened"), [
    (sessions.NewSession, cl.CreateSession, set(), set(), set()),
    (sessions.Prompt, cl.SendPrompt, {"session_id"}, set(), set()),
    (sessions.ApprovalChoice, cl.DecideApproval, {"session_id", "approval_id"}, set(), set()),
    (sessions.PolicyChoice, cl.SetApprovalPolicy, {"session_id"}, set(), set()),
    (schedules.ScheduleBody, cl.SaveSchedule, {"schedule_id"}, {"timezone"}, {"at"}),
    (tasks.TaskBody, cl.CreateTask, set(), set(), set()),
    (tasks.TaskBody, cl.UpdateTask, {"task_id"}, set(), set()),
    (tasks.TaskRun, cl.RunTask, {"task_id"}, set(), set()),
])
def test_each_rest_body_carries_every_field_of_its_command(
        body: type[msgspec.Struct], command: type[msgspec.Struct], from_path: set[str],
        narrowed: set[str], widened: set[str]) -> None:
    """A field added to a command must be added to its REST body too (or to the path), with
    its type; the body may constrain it (a pattern, a length, a set of values), or take text
    besides (``widened``: the route converts it)."""
    fields = {name: (_narrowed(t) if name in narrowed else _without_text(t) if name in widened
                     else _plain(t), default)
              for name, (t, default) in _fields(body, without=set()).items()}
    assert fields == _fields(command, without={"request_id", *from_path})
    assert body.__struct_config__.forbid_unknown_fields  # as the socket's commands


def test_provider_status_is_the_auth_event_without_its_type() -> None:
    assert _fields(ProviderStatus, without=set()) == _fields(ev.AuthStatusUpdated,
                                                             without=set())


def test_an_action_body_is_any_action_frame_with_optional_ids() -> None:
    assert set(_REQUESTS.values()) == set(typing.get_args(wk.ActionMessage))
    union = typing.Union[tuple(_REQUESTS)]  # noqa: UP007
    body = msgspec.json.decode(b'{"type": "read_file", "workdir": "/w", "path": "a"}',
                               type=union)
    action = _REQUESTS[type(body)](**msgspec.structs.asdict(body))
    assert type(action) is wk.ReadFile and action.action_id == "" and action.path == "a"


def test_the_api_key_env_variable_is_the_bearer_until_a_key_is_stored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent asks the auth service only; it falls back to ``api_key_env`` itself."""
    monkeypatch.setenv("CODEY_TEST_KEY", "sk-from-env")

    async def main() -> None:
        engine = Engine(MemoryEventLog(), RULES)
        await engine.start()
        providers = [ProviderConfig(name="keyed", base_url="http://127.0.0.1:1",
                                    auth="api_key", api_key_env="CODEY_TEST_KEY"),
                     ProviderConfig(name="open", base_url="http://127.0.0.1:1")]
        service = AuthService(Settings(data_dir=tmp_path, providers=providers), engine)
        assert await service.token_for("keyed") == "sk-from-env"
        assert await service.token_for("open") is None  # auth "none": no bearer at all
        await service.set_api_key("keyed", "sk-pasted")
        assert await service.token_for("keyed") == "sk-pasted"
        await engine.stop()

    asyncio.run(main())


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    app = create_app(Settings(data_dir=tmp_path_factory.mktemp("data")))
    schema: dict[str, Any] = app.openapi_schema.to_schema()
    return schema


def test_the_log_is_documented_as_ndjson_of_envelopes(document: dict[str, Any]) -> None:
    answer = document["paths"]["/api/sessions/{session_id}/log"]["get"]["responses"]["200"]
    assert answer["content"] == {"application/x-ndjson": {
        "schema": {"$ref": "#/components/schemas/Envelope"}}}


def test_bodies_are_required_and_closed_where_the_server_refuses_unknown_fields(
        document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    create = document["paths"]["/api/sessions"]["post"]["requestBody"]
    assert create["required"] is True
    ref = create["content"]["application/json"]["schema"]["$ref"]
    assert schemas[ref.rsplit("/", 1)[1]]["additionalProperties"] is False
    assert schemas["PairRequestBody"]["additionalProperties"] is False
    assert "additionalProperties" not in schemas["ProviderChoice"]  # unknown fields ignored


def test_the_rules_the_server_checks_are_in_the_bodies_schemas(
        document: dict[str, Any]) -> None:
    """What schemathesis found refused though the document allowed it (issue 24): each rule
    is now in the document (test_schemathesis.py sends what the document allows)."""
    schemas = document["components"]["schemas"]
    task = schemas["TaskBody"]["properties"]
    assert task["title"]["pattern"] == NOT_BLANK  # not empty
    schedule = schemas["ScheduleBody"]
    assert [rule["required"] for rule in schedule["oneOf"]] == [["cron"], ["at"]]
    assert schedule["properties"]["cron"]["pattern"].startswith("^")
    assert "Europe/Paris" in schedule["properties"]["timezone"]["enum"]
    pair = schemas["PairRequestBody"]["properties"]
    assert pair["public_key"]["pattern"] == "^[A-Za-z0-9_-]{43}=?$"
    # a list's items keep their constraints (Litestar dropped them)
    assert pair["roots"]["items"] == {"type": "string", "minLength": 1, "maxLength": 4096}
    assert pair["roots"]["maxItems"] == 32
    # an optional list's too (schemathesis sent a commit of the path "", refused with a 400)
    commit = schemas["CommitBody"]["properties"]["paths"]
    assert commit["oneOf"][0]["items"] == {"type": "string", "minLength": 1, "maxLength": 4096}
    assert schemas["Prompt"]["anyOf"][1]["required"] == ["attachments"]
    assert schemas["TelegramToken"]["properties"]["token"]["pattern"].startswith("^")
    assert schemas["ApiKey"]["properties"]["api_key"]["pattern"] == "^[!-~]{1,4096}$"
    assert schemas["NewTerminal"]["properties"]["workdir"]["pattern"] == "^/"
    upload = document["paths"]["/api/blobs"]["post"]["requestBody"]
    assert upload["required"] is True
    assert upload["content"]["application/octet-stream"]["schema"]["minLength"] == 1


def test_every_answer_of_every_route_is_described(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, answer in operation["responses"].items():
                where = (method, path, status)
                if status in ("204", "303"):
                    continue  # no body
                (media, content), = answer["content"].items()
                schema = content["schema"]
                assert schema.get("type") != "string" or media != "application/json", where
                if status.startswith("4"):  # (run_action's 504 is an ActionNotDone)
                    if "$ref" in schema:
                        schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
                    assert {"status_code", "detail"} <= set(schema["properties"]), where
