"""The pure parts of checkpoints: ref names, the commit message, git's name-status, and the
paths a request may name."""

from __future__ import annotations

import pytest

from codey_worker.checkpoints import (
    FileDelta,
    checkpoint_message,
    end_ref,
    parse_message,
    parse_name_status,
    safe_relative,
    start_ref,
)
from codey_worker.confine import ActionRefused


def test_refs_are_private_and_take_only_plain_ids() -> None:
    assert start_ref("ses_1", "itm-2") == "refs/codey/checkpoints/ses_1/itm-2"
    assert end_ref("ses_1", "itm-2") == "refs/codey/checkpoint-ends/ses_1/itm-2"
    for bad in ("", "../x", "a/b", "x.lock", "a b", "~1", "x" * 129):
        with pytest.raises(ActionRefused):
            start_ref("ses_1", bad)


def test_the_message_carries_what_a_restore_needs() -> None:
    text = checkpoint_message("s", "t", "start", 12, 3, ["big.bin (over 10 bytes)"])
    assert text.startswith("codey checkpoint t (start)\n\n")
    assert parse_message(text) == {"session": "s", "turn": "t", "phase": "start", "at_ns": 12,
                                   "files": 3, "skipped": ["big.bin (over 10 bytes)"]}
    assert parse_message("someone else's commit\n") == {}
    assert parse_message("x\n\n{not json\n") == {}


def test_name_status() -> None:
    out = b"M\0a.txt\0A\0dir/new file\0D\0gone\0T\0link\0"
    assert parse_name_status(out) == [FileDelta("a.txt", "M"), FileDelta("dir/new file", "A"),
                                      FileDelta("gone", "D"), FileDelta("link", "T")]
    assert parse_name_status(b"") == []


@pytest.mark.parametrize("path", ["", "/etc/passwd", "../x", "a/../../x", "a/..", ".git/config",
                                  "./.git/HEAD", "a\0b"])
def test_a_path_outside_the_workdir_is_refused(path: str) -> None:
    with pytest.raises(ActionRefused) as err:
        safe_relative(path)
    assert err.value.code == "path_outside_workdir"


def test_a_path_inside_is_normalised() -> None:
    assert safe_relative("./src//app.py") == "src/app.py"
    assert safe_relative("a/.gitignore") == "a/.gitignore"
