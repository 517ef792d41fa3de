"""Every message of every union survives ``encode`` → the union's typed decoder unchanged.

Strategies are built by introspecting the structs (``msgspec.structs.fields``), so a field added
to a message is exercised without touching this file, and a tagged message that is not a member
of a covered union fails :func:`test_every_tagged_struct_is_in_a_covered_union`.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import codey_protocol
from codey_protocol import client, codec, events, state, worker

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
# msgspec encodes inf/nan as null, which cannot decode back into a float field.
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
# Lone surrogates cannot be UTF-8 encoded, so no real frame carries them.
TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | INT64 | FLOATS | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for values of ``tp`` that msgspec can encode and decode back equal.

    Handles msgspec Structs, unions (``X | Y``, ``Optional``), ``Literal``, ``list``, ``dict``,
    ``str``/``int``/``float``/``bool``/``None`` and ``Any`` (JSON-ish values).
    """
    if tp is Any:
        return JSON_VALUES
    if tp is type(None) or tp is None:
        return st.none()
    if tp is bool:
        return st.booleans()
    if tp is int:
        return INT64
    if tp is float:
        return FLOATS
    if tp is str:
        return TEXT
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return _struct_strategy(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([strategy_for(a) for a in args])
    if origin is list:
        return st.lists(strategy_for(args[0]), max_size=2)
    if origin is dict:
        return st.dictionaries(strategy_for(args[0]), strategy_for(args[1]), max_size=2)
    raise TypeError(f"no strategy for {tp!r}; extend strategy_for")


_STRUCT_CACHE: dict[type[Any], st.SearchStrategy[Any]] = {}


def _struct_strategy(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    if cls not in _STRUCT_CACHE:
        required: dict[str, st.SearchStrategy[Any]] = {}
        optional: dict[str, st.SearchStrategy[Any]] = {}
        for f in msgspec.structs.fields(cls):
            (required if f.required else optional)[f.name] = strategy_for(f.type)
        # Optional fields are sometimes left out so defaults are exercised too.
        _STRUCT_CACHE[cls] = st.fixed_dictionaries(required, optional=optional).map(
            functools.partial(_build, cls)
        )
    return _STRUCT_CACHE[cls]


def _build(cls: type[Any], kwargs: dict[str, Any]) -> Any:
    return cls(**kwargs)


def members(union: Any) -> list[type[Any]]:
    return list(typing.get_args(union))


# ---------------------------------------------------------------------------------------------
# the table of covered unions: union → how a member is encoded and decoded back


def _direct(decoder: Callable[[bytes], Any]) -> Callable[[Any], Any]:
    return lambda msg: decoder(codec.encode(msg))


def _item_roundtrip(item: Any) -> Any:
    # Items travel inside SessionItemAppended; decode through the event decoder.
    out = codey_protocol.decode_event(codec.encode(events.SessionItemAppended(item=item)))
    assert isinstance(out, events.SessionItemAppended)
    return out.item


def _outcome_roundtrip(outcome: Any) -> Any:
    # Outcomes travel inside ActionResult; decode through the worker→server decoder.
    msg = worker.ActionResult(action_id="a1", result=outcome)
    out = codey_protocol.decode_worker_to_server(codec.encode(msg))
    assert isinstance(out, worker.ActionResult)
    return out.result


UNIONS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "ServerToWorker": (worker.ServerToWorker, _direct(codey_protocol.decode_server_to_worker)),
    "WorkerToServer": (worker.WorkerToServer, _direct(codey_protocol.decode_worker_to_server)),
    "ActionMessage": (worker.ActionMessage, _direct(codey_protocol.decode_action)),
    "ActionOutcome": (worker.ActionOutcome, _outcome_roundtrip),
    "ClientToServer": (client.ClientToServer, _direct(codey_protocol.decode_client_to_server)),
    "ServerToClient": (client.ServerToClient, _direct(codey_protocol.decode_server_to_client)),
    "Event": (events.Event, _direct(codey_protocol.decode_event)),
    "Item": (events.Item, _item_roundtrip),
}


def _via_convert(cls: type[Any]) -> Callable[[Any], Any]:
    # Pairing bodies arrive over HTTP; the server parses JSON then converts.
    return lambda msg: codec.convert(msgspec.json.decode(codec.encode(msg)), cls)


PLAIN: dict[type[Any], Callable[[Any], Any]] = {
    events.Envelope: _direct(codey_protocol.decode_envelope),
    state.State: _direct(codey_protocol.decode_state),
    worker.PairRequest: _via_convert(worker.PairRequest),
    worker.PairTicket: _via_convert(worker.PairTicket),
    worker.PairStatus: _via_convert(worker.PairStatus),
}

CASES = [
    pytest.param(name, cls, id=f"{name}.{cls.__name__}")
    for name, (union, _) in UNIONS.items()
    for cls in members(union)
]


@pytest.mark.parametrize(("union_name", "cls"), CASES)
@SETTINGS
@given(data=st.data())
def test_union_member_roundtrips(union_name: str, cls: type[Any], data: st.DataObject) -> None:
    msg = data.draw(strategy_for(cls))
    roundtrip = UNIONS[union_name][1]
    back = roundtrip(msg)
    assert type(back) is cls
    assert back == msg
    # Encoding is canonical: the decoded message encodes to the same bytes.
    assert codec.encode(back) == codec.encode(msg)


@pytest.mark.parametrize("cls", list(PLAIN), ids=lambda c: c.__name__)
@SETTINGS
@given(data=st.data())
def test_plain_struct_roundtrips(cls: type[Any], data: st.DataObject) -> None:
    msg = data.draw(strategy_for(cls))
    back = PLAIN[cls](msg)
    assert type(back) is cls
    assert back == msg


def _protocol_structs() -> list[type[msgspec.Struct]]:
    found: list[type[msgspec.Struct]] = []
    for module in (worker, events, client, state):
        for obj in vars(module).values():
            if (inspect.isclass(obj) and issubclass(obj, msgspec.Struct)
                    and obj.__module__ == module.__name__):
                found.append(obj)
    return found


def test_every_tagged_struct_is_in_a_covered_union() -> None:
    """A new tagged message that no covered union (hence no round-trip test) holds fails here."""
    covered = {cls for union, _ in UNIONS.values() for cls in members(union)}
    tagged_leaves = {
        cls for cls in _protocol_structs()
        if cls.__struct_config__.tag is not None and not cls.__subclasses__()
    }
    assert tagged_leaves - covered == set()
    assert len(tagged_leaves) > 40  # the walk really found the messages


def test_every_union_alias_is_covered() -> None:
    """A new union alias in a protocol module must be added to UNIONS (and so get tests)."""
    aliases = {
        name for module in (worker, events, client)
        for name, obj in vars(module).items()
        if isinstance(obj, types.UnionType)
        and all(inspect.isclass(a) and issubclass(a, msgspec.Struct) for a in typing.get_args(obj))
    }
    assert aliases == set(UNIONS)


def test_every_untagged_message_struct_is_covered() -> None:
    """Top-level untagged structs that cross a boundary on their own are round-tripped."""
    for cls in (events.Envelope, state.State, worker.PairRequest, worker.PairTicket,
                worker.PairStatus):
        assert cls in PLAIN


@pytest.mark.parametrize(("union_name", "cls"), CASES)
def test_tag_is_snake_case_of_class_name(union_name: str, cls: type[Any]) -> None:
    tag = cls.__struct_config__.tag
    assert tag == "".join(f"_{c.lower()}" if c.isupper() else c for c in cls.__name__).lstrip("_")
    assert f'"{cls.__struct_config__.tag_field}":"{tag}"'.encode() in codec.encode(
        _minimal(cls)
    )


def _minimal(cls: type[Any]) -> Any:
    """An instance with only the required fields, each set to a fixed simple value."""
    kwargs = {f.name: _first_value(f.type) for f in msgspec.structs.fields(cls) if f.required}
    return cls(**kwargs)


def _first_value(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if tp is str:
        return "x"
    if tp in (int, float):
        return tp(1)
    if tp is bool:
        return True
    if tp is Any or tp is type(None):
        return None
    if origin is typing.Literal:
        return typing.get_args(tp)[0]
    if origin in (typing.Union, types.UnionType):
        return _first_value(typing.get_args(tp)[0])
    if origin is list:
        return []
    if origin is dict:
        return {}
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return _minimal(tp)
    raise TypeError(tp)


def test_examples_decode_from_handwritten_json() -> None:
    """The wire format is what the JS client writes: ``type`` tags, snake_case fields."""
    cmd = codey_protocol.decode_client_to_server(
        b'{"type":"decide_approval","session_id":"s1","approval_id":"a1",'
        b'"decision":"approve_for_session","request_id":"r1"}'
    )
    assert cmd == client.DecideApproval(session_id="s1", approval_id="a1",
                                        decision="approve_for_session", request_id="r1")
    env = codey_protocol.decode_envelope(
        b'{"seq":3,"ts":1.5,"session_id":"s1","event":{"type":"session_item_appended",'
        b'"item":{"kind":"user_message","id":"i1","ts":1.5,"text":"hi"}}}'
    )
    assert env.event == events.SessionItemAppended(
        item=events.UserMessage(id="i1", ts=1.5, text="hi"))
    res = codey_protocol.decode_worker_to_server(
        b'{"type":"action_result","action_id":"a","result":{"kind":"command_result",'
        b'"exit_code":null}}'
    )
    assert res == worker.ActionResult(action_id="a", result=worker.CommandResult(exit_code=None))
