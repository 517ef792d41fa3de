"""Events stored by older releases read as they were meant (``codey_protocol.upcasting``).

The rows under ``data/`` are what two older releases' own code stored — ``ca77beb``, the first
that stored events, and ``745192a`` — one event of every type of its union, one item of every
kind and one action of every type (``scripts/old_event_rows.py``, run with each release's
code). Read now, every field the release's struct lacked is set by an upcaster, none is left
to msgspec's default.
"""

from __future__ import annotations

import hashlib
import json
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from codey_protocol import events as ev
from codey_protocol import upcasting
from codey_protocol.codec import encode
from codey_protocol.errors import ProtocolError
from codey_protocol.upcasting import (
    UPCASTERS,
    VERSIONS,
    current_json_many,
    decode_stored,
    decode_stored_many,
    version_of,
)

DATA = Path(__file__).parent / "data"
RELEASES = ("ca77beb", "745192a")
SHAPES = Path(__file__).parent / "event_shapes.json"


def rows(release: str) -> list[bytes]:
    return (DATA / f"rows_{release}.ndjson").read_bytes().splitlines()


def by_type(release: str) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for raw in rows(release):
        out.setdefault(json.loads(raw)["event"]["type"], []).append(raw)
    return out


def _missing(obj: Any, full: Any, path: str = "") -> list[str]:
    """The paths of ``full`` (a decoded event, as JSON) that ``obj`` lacks, at every level."""
    out: list[str] = []
    if isinstance(full, dict) and isinstance(obj, dict):
        for key, value in full.items():
            out += [f"{path}.{key}"] if key not in obj else _missing(obj[key], value,
                                                                     f"{path}.{key}")
    elif isinstance(full, list) and isinstance(obj, list):
        for i, (a, b) in enumerate(zip(obj, full, strict=False)):
            out += _missing(a, b, f"{path}[{i}]")
    return out


@pytest.mark.parametrize("release", RELEASES)
def test_no_field_of_an_older_event_is_left_to_todays_default(release: str) -> None:
    """Each field its release's struct lacked is set by an upcaster, which says what its
    absence meant; msgspec fills in none."""
    stored = rows(release)
    assert len(stored) > 30
    for raw in stored:
        obj = json.loads(raw)
        assert "version" not in obj  # stored before versions
        event = obj["event"]
        upcasting.upcast(event, 0)
        read = msgspec.to_builtins(decode_stored(raw))
        assert _missing(event, read["event"]) == [], raw
        assert read["event"] == event  # and the upcast object is what is read
        assert read["version"] == version_of(event["type"])


@pytest.mark.parametrize("release", RELEASES)
def test_a_command_run_before_the_sandbox_reads_as_it_ran(release: str) -> None:
    actions = {json.loads(raw)["event"]["action"]["type"]: decode_stored(raw).event
               for raw in by_type(release)["action_requested"]}
    run = actions["run_command"]
    assert isinstance(run, ev.ActionRequested)
    # not today's default, "workspace-write" without the network: it ran bare
    assert (run.action.sandbox, run.action.network) == ("none", True)  # type: ignore[union-attr]
    assert actions["mcp_call"].action.sandbox == "none"  # type: ignore[union-attr]
    created = decode_stored(by_type(release)["session_created"][0]).event
    assert isinstance(created, ev.SessionCreated)
    assert (created.sandbox, created.network, created.origin) == ("none", True, "unknown")
    assert created.worktree is None and created.agent is None


def test_what_745192a_lacked_reads_as_what_it_meant() -> None:
    found = {json.loads(raw)["event"]["type"]: decode_stored(raw).event
             for raw in rows("745192a")}
    worker = found["worker_connected"]
    assert isinstance(worker, ev.WorkerConnected)
    assert worker.replica == ""
    assert worker.capabilities.sandbox.kind == "none"
    assert worker.capabilities.sandbox.reason == \
        f"codey-worker {worker.worker_version} is older than the OS sandbox"
    assert found["worker_paired"].fingerprint == ""  # type: ignore[union-attr]
    started = found["schedule_fired"]
    assert isinstance(started, ev.ScheduleFired) and started.item_id == ""
    usage = found["token_usage_recorded"]
    assert isinstance(usage, ev.TokenUsageRecorded) and usage.cache_write_tokens == 0
    items = {type(e.item).__name__: e.item for raw in by_type("745192a")["session_item_appended"]
             if isinstance(e := decode_stored(raw).event, ev.SessionItemAppended)}
    assert items["UserMessage"].origin == "unknown"  # type: ignore[union-attr]
    assert items["ToolCall"].image is None  # type: ignore[union-attr]


def test_an_old_workers_mcp_tools_have_no_hints() -> None:
    raw = (b'{"seq":1,"ts":1.0,"session_id":null,"event":{"type":"worker_connected",'
           b'"worker_id":"w","hostname":"h","os":"Linux","worker_version":"0.1",'
           b'"capabilities":{"executors":[],"mcp_servers":[{"name":"fs","tools":[{"name":"read",'
           b'"description":"","input_schema":{}}],"error":null}]}}}')
    event = decode_stored(raw).event
    assert isinstance(event, ev.WorkerConnected)
    tool = event.capabilities.mcp_servers[0].tools[0]
    assert (tool.read_only_hint, tool.destructive_hint) == (None, None)
    assert event.capabilities.terminal is False and event.capabilities.acp_agents == []


def test_a_field_the_old_event_has_keeps_its_value() -> None:
    raw = (b'{"seq":1,"ts":1.0,"session_id":"s","event":{"type":"session_created","title":"t",'
           b'"worker_id":"w","workdir":"/w","provider":"p","model":"m","policy":"suggest",'
           b'"sandbox":"read-only","network":false}}')
    created = decode_stored(raw).event
    assert isinstance(created, ev.SessionCreated)
    assert (created.sandbox, created.network) == ("read-only", False)
    assert created.origin == "unknown"  # the one it lacked


def test_a_current_envelope_is_read_and_sent_as_it_is() -> None:
    env = ev.Envelope(seq=3, ts=2.0, session_id="s",
                      event=ev.SessionCreated(title="t", worker_id="w", workdir="/w",
                                              provider="p", model="m", sandbox="full-access"),
                      version=version_of("session_created"))
    raw = encode(env)
    assert decode_stored(raw) == env
    assert decode_stored_many([raw, raw]) == [env, env]
    sent = current_json_many([raw])
    assert sent[0] is raw  # no decode, no re-encode


def test_a_page_of_old_and_current_envelopes() -> None:
    old = rows("745192a")[:5]
    current = encode(ev.Envelope(seq=99, ts=1.0, session_id=None,
                                 event=ev.WorkerRevoked(worker_id="w"),
                                 version=version_of("worker_revoked")))
    page = [*old, current]
    envs = decode_stored_many(page)
    assert envs == [decode_stored(raw) for raw in page]
    sent = current_json_many(page)
    assert sent[-1] is current
    assert [msgspec.json.decode(raw) for raw in sent] == [msgspec.to_builtins(e) for e in envs]


def test_newer_and_broken_envelopes_are_refused() -> None:
    newer = json.loads(rows("745192a")[0])
    newer["version"] = version_of(newer["event"]["type"]) + 1
    for bad, code in ((json.dumps(newer).encode(), "newer_data"),
                      (b"not json", "bad_frame"),
                      (b'{"seq":1,"ts":1.0,"session_id":null}', "bad_frame"),
                      (b'{"seq":1,"ts":1.0,"session_id":null,"version":-1,"event":{}}',
                       "bad_frame"),
                      (b'{"seq":1,"ts":1.0,"session_id":null,"event":{"type":"no_such"}}',
                       "bad_frame")):
        for read in (decode_stored, lambda raw: decode_stored_many([raw]),
                     lambda raw: current_json_many([raw])):
            with pytest.raises(ProtocolError) as refused:
                read(bad)
            assert refused.value.code == code, bad


def test_upcasters_run_in_order_from_the_stored_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next change of a shape: version 2 of ``session_title_changed`` renamed nothing but
    says the title was checked; a version-0 event goes through 0 → 1 → 2, a version-1 event
    through 1 → 2 only, a version-2 event through none."""
    seen: list[str] = []

    def v0(event: dict[str, Any]) -> None:
        seen.append("v0")

    def v1(event: dict[str, Any]) -> None:
        seen.append("v1")
        event["title"] = event["title"] + " (upcast)"

    monkeypatch.setitem(VERSIONS, "session_title_changed", 2)
    monkeypatch.setitem(UPCASTERS, ("session_title_changed", 0), v0)
    monkeypatch.setitem(UPCASTERS, ("session_title_changed", 1), v1)
    for version, steps in ((None, ["v0", "v1"]), (1, ["v1"]), (2, [])):
        seen.clear()
        obj: dict[str, Any] = {"seq": 1, "ts": 1.0, "session_id": "s",
                               "event": {"type": "session_title_changed", "title": "t"}}
        if version is not None:
            obj["version"] = version
        env = decode_stored(json.dumps(obj).encode())
        assert seen == steps
        assert env.version == 2
        assert env.event == ev.SessionTitleChanged(title="t" if version == 2 else "t (upcast)")
    # what a browser is sent: a current one as stored, the others upcast
    stored = [encode(ev.Envelope(seq=1, ts=1.0, session_id="s", event=ev.SessionTitleChanged(
        title="t"), version=version)) for version in (1, 2)]
    other = encode(ev.Envelope(seq=3, ts=1.0, session_id="s",
                               event=ev.WorkerRevoked(worker_id="w"), version=1))
    sent = current_json_many([*stored, other])
    assert sent[1] is stored[1] and sent[2] is other
    assert json.loads(sent[0])["event"]["title"] == "t (upcast)"
    assert json.loads(sent[0])["version"] == 2


# --- every shape change raises its type's version ------------------------------------------


def _without_descriptions(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_descriptions(v) for k, v in value.items() if k != "description"}
    if isinstance(value, list):
        return [_without_descriptions(v) for v in value]
    return value


def shapes() -> dict[str, list[Any]]:
    """``{type: [its current version, a hash of its JSON Schema]}`` for every event type."""
    out: dict[str, list[Any]] = {}
    for cls in typing.get_args(ev.Event):
        tag = cls.__struct_config__.tag
        schema = msgspec.json.encode(_without_descriptions(msgspec.json.schema(cls)),
                                     order="sorted")
        out[tag] = [version_of(tag), hashlib.sha256(schema).hexdigest()[:16]]
    return dict(sorted(out.items()))


def record() -> None:
    """Write :func:`shapes` into event_shapes.json (after a shape change and its version)."""
    lines = [f" {json.dumps(tag)}: {json.dumps(shape)}" for tag, shape in shapes().items()]
    SHAPES.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")


def test_an_events_shape_changes_only_with_its_version() -> None:
    """A field added to an event (or to anything it holds: an item, an action, a worker's
    capabilities) is a new shape: the type's version must rise, with an upcaster saying what
    an event stored without the field meant. The recorded shapes are in event_shapes.json."""
    recorded = json.loads(SHAPES.read_text(encoding="utf-8"))
    now = shapes()
    how = (f"write {SHAPES.name} anew: cd {SHAPES.parent} && python -c 'import "
           f"test_upcasting as t; t.record()'")
    for tag, (version, digest) in now.items():
        if tag not in recorded:
            assert version == 1, f"a new event type {tag!r} starts at version 1"
            pytest.fail(f"new event type {tag!r}: record its shape ({how})")
        was_version, was_digest = recorded[tag]
        if digest != was_digest:
            assert version > was_version, (
                f"the shape of {tag!r} changed at version {version}: raise "
                f"VERSIONS[{tag!r}] in codey_protocol/upcasting.py to {was_version + 1}, add "
                f"UPCASTERS[({tag!r}, {was_version})] saying what an event stored without the "
                f"change meant (never a new default presented as recorded), then {how}")
            pytest.fail(f"{tag!r} is at version {version} now: {how}")
        assert version == was_version, f"{tag!r}: version raised, shape the same? {how}"
    for tag, version in VERSIONS.items():
        assert (tag, version - 1) in UPCASTERS, f"{tag!r} at {version} has no upcaster to it"
