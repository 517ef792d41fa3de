"""An action's outcome → the tool-call item's final status, result text and fields."""

from __future__ import annotations

from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.tools import format_outcome

__all__ = ["ITEM_OUTPUT_CAP", "settle_fields"]

#: streamed command output kept in one item; the final result replaces it with head + tail
ITEM_OUTPUT_CAP = 256 * 1024


def settle_fields(outcome: wk.ActionOutcome,
                  stream_truncated: bool) -> tuple[ev.ToolStatus, str, dict[str, Any]]:
    """``(status, result, fields)`` for the item update that finishes a tool call.

    ``stream_truncated``: the item's streamed output hit :data:`ITEM_OUTPUT_CAP`, so the
    output is replaced by the result's head and tail.
    """
    fields: dict[str, Any] = {}
    status: ev.ToolStatus = "done"
    if isinstance(outcome, wk.CommandResult):
        fields["exit_code"] = outcome.exit_code
        fields["truncated"] = outcome.truncated or stream_truncated
        if stream_truncated or outcome.truncated:
            fields["output"] = (outcome.stdout + outcome.stderr)[:2 * ITEM_OUTPUT_CAP]
        if outcome.exit_code != 0:
            status = "failed"
    elif isinstance(outcome, wk.PatchResult):
        fields["diff"] = outcome.diff
        fields["files"] = outcome.files
    elif isinstance(outcome, wk.McpCallResult) and outcome.is_error:
        status = "failed"
    return status, format_outcome(outcome), fields
