"""The checkpoints service's pure parts: which actions change files (and so want a
checkpoint first), which turn is under way, and which checkpoint a turn's rewind uses."""

from __future__ import annotations

import pytest

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import CheckpointMark, SessionInfo
from codey_server.checkpoints.service import CheckpointError, changes_files, resolve, turn_of

A = {"action_id": "a", "session_id": "s"}


def test_writes_patches_edits_acp_and_writable_commands_change_files() -> None:
    assert changes_files(wk.WriteFile(**A, workdir="/w", path="x", content=""))
    assert changes_files(wk.ApplyPatch(**A, workdir="/w", patch=""))
    assert changes_files(wk.Edit(**A, workdir="/w", path="x", old_string="a", new_string="b"))
    assert changes_files(wk.RunCommand(**A, argv=["make"], workdir="/w"))
    assert changes_files(wk.RunCommand(**A, argv=["make"], workdir="/w",
                                       sandbox="full-access"))
    assert not changes_files(wk.RunCommand(**A, argv=["ls"], workdir="/w",
                                           sandbox="read-only"))
    assert not changes_files(wk.ReadFile(**A, workdir="/w", path="x"))
    assert not changes_files(wk.Grep(**A, workdir="/w", pattern="x"))
    assert not changes_files(wk.LoadContext(**A, workdir="/w"))


def _session(*items: ev.Item, marks: tuple[str, ...] = ()) -> SessionInfo:
    return SessionInfo(session_id="s", title="", worker_id="w", workdir="/w", provider="p",
                       model="m", created_at=0.0, updated_at=0.0, items=list(items),
                       checkpoints=[CheckpointMark(turn=t, commit="c") for t in marks])


def _user(item_id: str, queued: bool = False) -> ev.UserMessage:
    return ev.UserMessage(id=item_id, ts=0.0, text="x", queued=queued)


def test_the_turn_is_the_last_prompt_not_queued() -> None:
    assert turn_of(_session()) is None
    assert turn_of(_session(_user("u1"), _user("u2"), _user("q", queued=True))) == "u2"
    assert turn_of(_session(_user("q", queued=True))) == "q"


def test_a_turn_without_a_checkpoint_uses_the_next_later_one() -> None:
    s = _session(_user("u1"), _user("u2"), _user("u3"), _user("u4"), marks=("u1", "u3"))
    assert resolve(s, "u1") == "u1"
    assert resolve(s, "u2") == "u3"
    assert resolve(s, "u4") is None
    with pytest.raises(CheckpointError) as err:
        resolve(s, "nope")
    assert err.value.code == "not_found"
