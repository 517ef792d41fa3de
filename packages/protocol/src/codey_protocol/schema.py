"""JSON Schema of the browser-facing unions, written to ``web/protocol.schema.json``.

``python -m codey_protocol.schema OUT`` regenerates the file; a test regenerates it and diffs,
so the JS client and the Python structs cannot drift apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from codey_protocol.client import ClientToServer, ServerToClient
from codey_protocol.events import Envelope, Event
from codey_protocol.state import State


def browser_schema() -> dict[str, Any]:
    (c2s, s2c, event, envelope, state), components = msgspec.json.schema_components(
        [ClientToServer, ServerToClient, Event, Envelope, State],
        ref_template="#/$defs/{name}",
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Codey browser protocol",
        "$defs": components,
        "properties": {
            "ClientToServer": c2s,
            "ServerToClient": s2c,
            "Event": event,
            "Envelope": envelope,
            "State": state,
        },
    }


def render() -> str:
    return json.dumps(browser_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stdout.write(render())
        return 0
    Path(args[0]).write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
