"""The fold's version: the same for the same code everywhere, another when an event or the
state gains a field; and the snapshots that carry it."""

from __future__ import annotations

import os
import subprocess
import sys
import typing

import msgspec

from codey_protocol import events as ev
from codey_protocol import state as st
from codey_protocol.codec import decode_state, encode
from codey_protocol.foldversion import (
    FOLD_REVISION,
    FOLD_VERSION,
    encode_snapshot,
    fold_version,
    read_snapshot,
)

_PRINT = "from codey_protocol.foldversion import FOLD_VERSION; print(FOLD_VERSION)"


def test_the_same_code_has_the_same_version_in_every_process() -> None:
    """Deterministic: not the order of a dict built at import, not the hash seed."""
    seen = set()
    for seed in ("0", "1", "12345"):
        out = subprocess.run([sys.executable, "-c", _PRINT], check=True, capture_output=True,
                             text=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        seen.add(out.strip())
    assert seen == {FOLD_VERSION}
    assert fold_version() == FOLD_VERSION and len(FOLD_VERSION) == 16


def _with(old: type, new: type) -> typing.Any:
    """The Event union with ``new`` in place of ``old``."""
    members = [new if cls is old else cls for cls in typing.get_args(ev.Event)]
    return typing.Union[tuple(members)]  # noqa: UP007 (built at run time)


def test_a_field_added_to_an_event_changes_it() -> None:
    class SessionTitleChanged(ev.EventBase, kw_only=True):  # the same name and tag
        title: str
        subtitle: str = ""

    assert fold_version(event=_with(ev.SessionTitleChanged, ev.SessionTitleChanged)) == \
        FOLD_VERSION
    assert fold_version(event=_with(ev.SessionTitleChanged, SessionTitleChanged)) != \
        FOLD_VERSION


def test_a_field_added_to_an_item_an_event_holds_changes_it() -> None:
    class Notice(ev.ItemBase, kw_only=True):
        code: str
        text: str
        seen: bool = False

    items = typing.Union[tuple(  # noqa: UP007
        Notice if cls is ev.Notice else cls for cls in typing.get_args(ev.Item))]

    def appended(item: typing.Any) -> typing.Any:
        return msgspec.defstruct("SessionItemAppended", [("item", item)],
                                 bases=(ev.EventBase,), kw_only=True)

    assert fold_version(event=_with(ev.SessionItemAppended, appended(ev.Item))) == FOLD_VERSION
    assert fold_version(event=_with(ev.SessionItemAppended, appended(items))) != FOLD_VERSION


def test_a_field_added_to_the_state_changes_it() -> None:
    class State(st.State, kw_only=True):  # the same name
        busy_minutes: float = 0.0

    assert fold_version(state=State) != FOLD_VERSION


def test_an_events_version_or_the_revision_changes_it() -> None:
    assert fold_version(versions={"session_created": 2}) != FOLD_VERSION
    assert fold_version(revision=FOLD_REVISION + 1) != FOLD_VERSION


def test_a_docstring_does_not_change_it() -> None:
    class SessionTitleChanged(ev.EventBase, kw_only=True):
        """Said otherwise."""

        title: str

    assert fold_version(event=_with(ev.SessionTitleChanged, SessionTitleChanged)) == \
        FOLD_VERSION


def test_a_snapshot_names_its_fold_and_an_older_one_names_none() -> None:
    state = st.State(seq=7, sessions={"s": st.SessionInfo(
        session_id="s", title="t", worker_id="w", workdir="/w", provider="p", model="m",
        busy_seconds=42.0)})
    data = encode_snapshot(state)
    fold, raw = read_snapshot(data)
    assert fold == FOLD_VERSION and decode_state(bytes(raw)) == state
    assert msgspec.json.decode(data)["fold"] == FOLD_VERSION
    assert read_snapshot(encode_snapshot(state, fold="0123456789abcdef"))[0] == \
        "0123456789abcdef"
    bare = encode(state)  # how every snapshot was stored before
    fold, raw = read_snapshot(bare)
    assert fold == "" and bytes(raw) == bare
