"""Every decoder turns garbage into :class:`ProtocolError` — never another exception.

An adapter answers a ProtocolError with a typed error frame or a 4000-range close; any other
exception would be a server traceback, so the fuzz tests assert that nothing else escapes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codey_protocol import (
    MAX_FRAME_BYTES,
    FrameTooLarge,
    ProtocolError,
    decode_action,
    decode_client_to_server,
    decode_envelope,
    decode_event,
    decode_server_to_client,
    decode_server_to_worker,
    decode_state,
    decode_worker_to_server,
)
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.codec import convert

CODES = {"bad_frame", "unknown_type", "bad_field", "too_large"}

DECODERS: list[Callable[[Any], Any]] = [
    decode_client_to_server,
    decode_server_to_client,
    decode_server_to_worker,
    decode_worker_to_server,
    decode_event,
    decode_envelope,
    decode_state,
    decode_action,
]
# The unions that are objects tagged by ``type`` (Envelope and State are plain objects).
TAGGED = [
    decode_client_to_server,
    decode_server_to_client,
    decode_server_to_worker,
    decode_worker_to_server,
    decode_event,
    decode_action,
]
CAPPED = [decode_client_to_server, decode_worker_to_server]

ids = lambda f: f.__name__  # noqa: E731


def _error(decoder: Callable[[Any], Any], data: bytes | str) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        decoder(data)
    assert info.value.code in CODES
    assert str(info.value)  # the message says what was wrong
    return info.value


# ---------------------------------------------------------------------------------------------
# one case per kind of garbage


@pytest.mark.parametrize("decoder", DECODERS, ids=ids)
@pytest.mark.parametrize("data", [b"", b"{", b"hello", b"{'type': 'x'}", b"\x00\x01", b'{"a" 1}'])
def test_not_json_is_bad_frame(decoder: Callable[[Any], Any], data: bytes) -> None:
    assert _error(decoder, data).code == "bad_frame"


@pytest.mark.parametrize("decoder", DECODERS, ids=ids)
@pytest.mark.parametrize("data", [b"{}}", b'{"type":"subscribe"} {}', b'{"seq":1} x'])
def test_trailing_garbage_is_refused(decoder: Callable[[Any], Any], data: bytes) -> None:
    # msgspec validates while it parses, so the code depends on what it meets first.
    _error(decoder, data)


@pytest.mark.parametrize("decoder", DECODERS, ids=ids)
@pytest.mark.parametrize("data", [b"[]", b"1", b"1.5", b'"x"', b"null", b"true", b'[{"type":1}]'])
def test_json_that_is_not_an_object_is_refused(decoder: Callable[[Any], Any], data: bytes) -> None:
    assert _error(decoder, data).code in {"bad_frame", "bad_field"}


@pytest.mark.parametrize("decoder", TAGGED, ids=ids)
def test_unknown_type_is_unknown_type(decoder: Callable[[Any], Any]) -> None:
    err = _error(decoder, b'{"type":"no_such_message","session_id":"s"}')
    assert err.code == "unknown_type"
    assert "no_such_message" in err.message


@pytest.mark.parametrize("decoder", TAGGED, ids=ids)
def test_missing_type_is_unknown_type(decoder: Callable[[Any], Any]) -> None:
    assert _error(decoder, b'{"session_id":"s","action_id":"a"}').code == "unknown_type"


@pytest.mark.parametrize("decoder", TAGGED, ids=ids)
def test_non_string_type_is_refused(decoder: Callable[[Any], Any]) -> None:
    _error(decoder, b'{"type":7}')
    _error(decoder, b'{"type":null}')


@pytest.mark.parametrize(
    ("decoder", "frame"),
    [
        (decode_client_to_server, b'{"type":"subscribe","after_seq":"ten"}'),
        (decode_client_to_server, b'{"type":"send_prompt","session_id":"s","text":5}'),
        (decode_client_to_server,
         b'{"type":"decide_approval","session_id":"s","approval_id":"a","decision":"maybe"}'),
        (decode_client_to_server, b'{"type":"send_prompt","session_id":"s"}'),  # text missing
        (decode_worker_to_server, b'{"type":"heartbeat","ts":"now"}'),
        (decode_worker_to_server,
         b'{"type":"action_result","action_id":"a","result":{"kind":"nope"}}'),
        (decode_worker_to_server, b'{"type":"action_progress","action_id":"a","stream":"x",'
                                  b'"data":""}'),
        (decode_server_to_worker, b'{"type":"run_command","action_id":"a","session_id":"s",'
                                  b'"argv":"ls","workdir":"/"}'),
        (decode_event, b'{"type":"session_status_changed","status":"sleeping"}'),
        (decode_envelope, b'{"seq":"1","ts":0,"session_id":null,'
                          b'"event":{"type":"worker_revoked","worker_id":"w"}}'),
        (decode_state, b'{"seq":0,"sessions":[]}'),
        (decode_server_to_client, b'{"type":"snapshot","seq":1,"state":7}'),
    ],
)
def test_wrong_field_type_is_bad_field(decoder: Callable[[Any], Any], frame: bytes) -> None:
    err = _error(decoder, frame)
    assert err.code == "bad_field"
    assert "$." in err.message or "missing" in err.message  # says where


@pytest.mark.parametrize(
    "frame",
    [
        b'{"type":"subscribe","after_seq":0,"since":5}',
        b'{"type":"interrupt","session_id":"s","force":true}',
        b'{"type":"create_session","worker_id":"w","workdir":"/x","api_key":"sk-1"}',
    ],
)
def test_browser_commands_forbid_unknown_fields(frame: bytes) -> None:
    err = _error(decode_client_to_server, frame)
    assert err.code == "bad_field"
    assert "unknown field" in err.message


def test_events_and_worker_messages_tolerate_unknown_fields() -> None:
    event = decode_event(b'{"type":"worker_revoked","worker_id":"w","added_later":[1,{"x":2}]}')
    assert event == ev.WorkerRevoked(worker_id="w")
    msg = decode_worker_to_server(b'{"type":"heartbeat","ts":1.0,"cpu":0.5}')
    assert msg == wk.Heartbeat(ts=1.0)
    env = decode_envelope(b'{"seq":1,"ts":2.0,"session_id":null,"node":"a",'
                          b'"event":{"type":"worker_revoked","worker_id":"w"}}')
    assert env == ev.Envelope(seq=1, ts=2.0, session_id=None, event=ev.WorkerRevoked(worker_id="w"))


def test_pair_request_forbids_unknown_fields() -> None:
    body = {"public_key": "k", "hostname": "h", "os": "linux", "python_version": "3.11",
            "worker_version": "0.1", "roots": ["/src"]}
    assert convert(body, wk.PairRequest).hostname == "h"
    with pytest.raises(ProtocolError) as info:
        convert({**body, "credential": "x"}, wk.PairRequest)
    assert info.value.code == "bad_field"


# ---------------------------------------------------------------------------------------------
# size cap


def _padded(frame: bytes, size: int) -> bytes:
    """``frame`` with trailing whitespace (still valid JSON) up to exactly ``size`` bytes."""
    return frame + b" " * (size - len(frame))


@pytest.mark.parametrize("decoder", CAPPED, ids=ids)
def test_frame_over_the_cap_is_too_large(decoder: Callable[[Any], Any]) -> None:
    frame = b'{"type":"subscribe"}' if decoder is decode_client_to_server else b'{"type":"log",' \
        b'"message":"m"}'
    assert decoder(_padded(frame, MAX_FRAME_BYTES)) is not None  # exactly the cap is fine
    with pytest.raises(FrameTooLarge) as info:
        decoder(_padded(frame, MAX_FRAME_BYTES + 1))
    assert isinstance(info.value, ProtocolError)
    assert info.value.code == "too_large"
    assert info.value.size == MAX_FRAME_BYTES + 1
    assert info.value.cap == MAX_FRAME_BYTES


@pytest.mark.parametrize("decoder", CAPPED, ids=ids)
def test_cap_is_checked_before_decoding(decoder: Callable[[Any], Any]) -> None:
    # Garbage over the cap is refused for its size, without being parsed.
    with pytest.raises(FrameTooLarge):
        decoder(b"x" * (MAX_FRAME_BYTES + 1))
    with pytest.raises(FrameTooLarge):
        decoder("x" * (MAX_FRAME_BYTES + 1))


def test_cap_can_be_lowered_or_lifted() -> None:
    frame = b'{"type":"subscribe","after_seq":1}'
    with pytest.raises(FrameTooLarge):
        decode_client_to_server(frame, cap=len(frame) - 1)
    assert decode_client_to_server(frame, cap=len(frame)) is not None
    assert decode_client_to_server(_padded(frame, MAX_FRAME_BYTES + 10), cap=None) is not None


def test_cap_counts_utf8_bytes_of_a_text_frame() -> None:
    text = '{"type":"send_prompt","session_id":"s","text":"' + "é" * (MAX_FRAME_BYTES // 2 + 8)
    text += '"}'
    assert len(text) <= MAX_FRAME_BYTES < len(text.encode())
    with pytest.raises(FrameTooLarge):
        decode_client_to_server(text)


# ---------------------------------------------------------------------------------------------
# encodings


INVALID_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80"]  # stray byte, bad sequence, surrogate


@pytest.mark.parametrize("bad", INVALID_UTF8)
@pytest.mark.parametrize(
    ("decoder", "template"),
    [
        (decode_client_to_server, b'{"type":"send_prompt","session_id":"s","text":"%s"}'),
        (decode_client_to_server, b'{"type":"subscribe","request_id":"%s"}'),
        (decode_server_to_client, b'{"type":"error","code":"c","message":"%s"}'),
        (decode_server_to_worker, b'{"type":"welcome","worker_id":"%s"}'),
        (decode_worker_to_server, b'{"type":"log","message":"%s"}'),
        (decode_event, b'{"type":"worker_revoked","worker_id":"%s"}'),
        (decode_envelope, b'{"seq":1,"ts":0,"session_id":"%s",'
                          b'"event":{"type":"worker_revoked","worker_id":"w"}}'),
        (decode_state, b'{"auth":{"%s":{"provider":"p"}}}'),
        (decode_action, b'{"type":"mcp_list","action_id":"a","session_id":"%s"}'),
    ],
)
def test_invalid_utf8_is_bad_frame(decoder: Callable[[Any], Any], template: bytes,
                                   bad: bytes) -> None:
    assert decoder(template.replace(b"%s", b"ok")) is not None  # the frame is otherwise fine
    assert _error(decoder, template.replace(b"%s", bad)).code == "bad_frame"


@pytest.mark.parametrize("decoder", DECODERS, ids=ids)
def test_utf16_frame_is_bad_frame(decoder: Callable[[Any], Any]) -> None:
    assert _error(decoder, '{"type":"subscribe"}'.encode("utf-16")).code == "bad_frame"


@pytest.mark.parametrize("decoder", DECODERS, ids=ids)
def test_str_with_lone_surrogate_is_refused(decoder: Callable[[Any], Any]) -> None:
    _error(decoder, '{"type":"subscribe","request_id":"\ud800"}')


def test_str_and_bytes_frames_decode_alike() -> None:
    frame = '{"type":"send_prompt","session_id":"s","text":"héllo ✓"}'
    assert decode_client_to_server(frame) == decode_client_to_server(frame.encode())


# ---------------------------------------------------------------------------------------------
# nesting


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("decoder", "frame"),
    [
        # Before the tag is read, the skipped value is nested: even browsers can send this.
        (decode_client_to_server, '{"zzz":' + _deep(5000) + ',"type":"subscribe"}'),
        (decode_worker_to_server, '{"type":"action_result","action_id":"a","result":'
                                  '{"kind":"mcp_call_result","content":[{"x":' + _deep(5000)
                                  + "}]}}"),
        (decode_event, '{"type":"worker_revoked","worker_id":"w","zzz":' + _deep(5000) + "}"),
    ],
    ids=["client_to_server", "worker_to_server", "event"],
)
def test_deep_nesting_is_a_protocol_error(decoder: Callable[[Any], Any], frame: str) -> None:
    assert len(frame) < MAX_FRAME_BYTES
    _error(decoder, frame)


# ---------------------------------------------------------------------------------------------
# fuzz: only ProtocolError escapes

FUZZ = settings(max_examples=60, deadline=None)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12,
)
KNOWN_TAGS = [
    "subscribe", "create_session", "send_prompt", "decide_approval", "set_approval_policy",
    "interrupt", "auth_response", "hello", "action_accepted", "action_progress",
    "action_result", "action_errored", "heartbeat", "log", "workspace_changed", "disconnect",
]
FIELD_NAMES = ["request_id", "after_seq", "session_id", "worker_id", "workdir", "text",
               "decision", "approval_id", "policy", "action_id", "result", "ts", "kind",
               "capabilities", "paths", "stream", "data", "level", "message"]
# Objects that look like messages get further into the decoder than random JSON does.
MESSAGE_LIKE = st.fixed_dictionaries(
    {"type": st.sampled_from(KNOWN_TAGS)},
    optional={name: JSON for name in FIELD_NAMES},
)


def _only_protocol_errors(decoder: Callable[[Any], Any], data: bytes | str) -> None:
    try:
        decoder(data)
    except ProtocolError as err:
        assert err.code in CODES


@pytest.mark.parametrize("decoder", CAPPED, ids=ids)
@FUZZ
@given(data=st.binary(max_size=200))
def test_fuzz_arbitrary_bytes(decoder: Callable[[Any], Any], data: bytes) -> None:
    _only_protocol_errors(decoder, data)


@pytest.mark.parametrize("decoder", CAPPED, ids=ids)
@FUZZ
@given(data=st.text(max_size=200))
def test_fuzz_arbitrary_text(decoder: Callable[[Any], Any], data: str) -> None:
    _only_protocol_errors(decoder, data)


@pytest.mark.parametrize("decoder", CAPPED, ids=ids)
@FUZZ
@given(value=JSON | MESSAGE_LIKE)
def test_fuzz_arbitrary_json(decoder: Callable[[Any], Any], value: Any) -> None:
    # allow_nan: Python's json writes NaN/Infinity, which is not JSON; the decoder must cope.
    _only_protocol_errors(decoder, json.dumps(value).encode())


@pytest.mark.parametrize("decoder", DECODERS, ids=ids)
@settings(max_examples=20, deadline=None)
@given(value=JSON | MESSAGE_LIKE)
def test_fuzz_every_decoder(decoder: Callable[[Any], Any], value: Any) -> None:
    _only_protocol_errors(decoder, json.dumps(value))


def test_an_older_workers_frames_still_decode() -> None:
    """Heartbeat.running_actions is no longer sent nor read, but an older worker's beat keeps
    its shape; ActionAccepted and Hello.running_actions are read by the server's router."""
    beat = decode_worker_to_server(b'{"type":"heartbeat","ts":1.0,"running_actions":["a1"]}')
    assert beat == wk.Heartbeat(ts=1.0, running_actions=["a1"])
    hello = decode_worker_to_server(b'{"type":"hello","worker_version":"0.1.0","hostname":"h",'
                                    b'"os":"Linux","running_actions":["a1"]}')
    assert isinstance(hello, wk.Hello) and hello.running_actions == ["a1"]
    accepted = decode_worker_to_server(b'{"type":"action_accepted","action_id":"a1"}')
    assert accepted == wk.ActionAccepted(action_id="a1", replayed=False)
