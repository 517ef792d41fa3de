"""``view_image``: let the model look at an image file of the workdir.

The worker sends the image's bytes; the server keeps them in its blob store (by content
hash, like an image sent with a prompt) before the call settles, and the call's item carries
the :class:`~codey_protocol.events.Attachment`. From then on the image goes with the call's
result on every model request (the wires put it where each format can carry it), and the
transcript shows it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.tools.base import (
    SANDBOXED,
    Display,
    Sandboxing,
    Settled,
    WorkerTool,
    obj,
    string,
)

__all__ = ["VIEW_IMAGE", "ViewImageArgs", "image_bytes"]


@dataclass(frozen=True, slots=True)
class ViewImageArgs:
    path: str


def image_bytes(outcome: wk.ImageContent) -> bytes | None:
    try:
        return base64.b64decode(outcome.data, validate=True)
    except (binascii.Error, ValueError):
        return None


class ViewImage(WorkerTool[ViewImageArgs]):
    name = "view_image"
    guide = ("`view_image` lets you look at an image file: a screenshot your test took, a "
             "chart, a design to match.")
    display = Display("View image", "image", "image")
    description = (
        "Look at an image file of the workdir (PNG, JPEG, GIF or WebP, up to about 700 KiB): "
        "a screenshot your test took, a chart, a diagram, a UI to match. The image comes "
        "with this call's result, so you see it as the user would. Anything else, or a "
        "larger file, is refused; make a smaller copy first (e.g. with ImageMagick or PIL "
        "through shell). Do not use it for text files: read_file.")
    parameters = obj({"path": {"type": "string",
                               "description": "the image file, relative to the workdir"}},
                     ["path"])
    read_only = True
    in_plan_mode = True
    for_readers = True

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> ViewImageArgs:
        return ViewImageArgs(string(args, "path") or "")

    def shows(self, args: ViewImageArgs) -> dict[str, Any]:
        return {"path": args.path}

    def action(self, args: ViewImageArgs, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.ViewImage(action_id=action_id, session_id=session_id, workdir=workdir,
                            path=args.path)

    def stores(self, outcome: wk.ActionOutcome) -> bytes | None:
        return image_bytes(outcome) if isinstance(outcome, wk.ImageContent) else None

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.ImageContent):
            return super().reads(outcome)
        size = (f", {outcome.width}×{outcome.height} px"
                if outcome.width and outcome.height else "")
        return (f"the image {outcome.path} ({outcome.mime}, {outcome.size:,} bytes{size}) "
                "is attached to this result")

    def settle(self, outcome: wk.ActionOutcome, stream_truncated: bool) -> Settled:
        data = self.stores(outcome)
        if not isinstance(outcome, wk.ImageContent) or data is None:
            return super().settle(outcome, stream_truncated)
        image = ev.Attachment(hash=hashlib.sha256(data).hexdigest(), name=outcome.path,
                              mime=outcome.mime, size=len(data))
        return "done", self.reads(outcome), {"image": image}


VIEW_IMAGE = ViewImage()
