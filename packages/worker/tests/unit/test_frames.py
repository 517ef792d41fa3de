"""Responses larger than one frame are cut to fit, keeping head and tail."""

from __future__ import annotations

from codey_protocol import MAX_FRAME_BYTES, decode_worker_to_server
from codey_protocol.worker import ActionErrored, ActionResult, CommandResult, DirEntry, DirListing
from codey_worker.frames import FRAME_BUDGET, encode_fitted


def test_small_response_is_unchanged() -> None:
    msg = ActionResult(action_id="a", result=CommandResult(exit_code=0, stdout="hi\n"))
    assert decode_worker_to_server(encode_fitted(msg)) == msg


def test_command_output_that_escapes_badly_is_cut_to_fit() -> None:
    # control characters encode as \\u00XX: 1 MiB of them is ~6 MiB of JSON
    noisy = "\x01" * (1024 * 1024)
    msg = ActionResult(action_id="a", result=CommandResult(
        exit_code=0, stdout="HEAD" + noisy + "TAIL", stderr="err"))
    frame = encode_fitted(msg)
    assert len(frame) <= FRAME_BUDGET < MAX_FRAME_BYTES
    back = decode_worker_to_server(frame)
    assert isinstance(back, ActionResult) and isinstance(back.result, CommandResult)
    assert back.result.truncated
    assert back.result.stdout.startswith("HEAD") and back.result.stdout.endswith("TAIL")
    assert "cut to fit one frame" in back.result.stdout
    assert back.result.stderr == "err"


def test_long_lists_are_shortened() -> None:
    entries = [DirEntry(path=f"dir/{'n' * 200}{i}", kind="file") for i in range(20_000)]
    msg = ActionResult(action_id="a", result=DirListing(path=".", entries=entries))
    frame = encode_fitted(msg)
    assert len(frame) <= FRAME_BUDGET
    back = decode_worker_to_server(frame)
    assert isinstance(back, ActionResult) and isinstance(back.result, DirListing)
    assert back.result.truncated and 0 < len(back.result.entries) < 20_000
    assert back.result.entries[0] == entries[0]


def test_huge_error_message_is_cut() -> None:
    msg = ActionErrored(action_id="a", code="internal", message="x" * (3 * 1024 * 1024))
    assert len(encode_fitted(msg)) <= FRAME_BUDGET
