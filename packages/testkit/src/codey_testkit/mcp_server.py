"""A tiny stdio MCP server for tests, written with the ``mcp`` SDK: annotations and roots.

    python -m codey_testkit.mcp_server [--needs FILE]

``--needs FILE``: refuse to start (exit 1, before answering anything) unless the working
directory has ``FILE``, as a server that confines itself to its folder does
(``mcp-server-git --repository .`` needs a repository there).

Tools, one per danger level a Codey server tells apart:

* ``where`` (``readOnlyHint``): what the server sees of its confinement — its working
  directory, the roots the client declared (``roots/list``), and the names in its environment;
* ``note`` (not read-only, ``destructiveHint: false``): appends ``text`` to ``notes.txt`` in
  its working directory;
* ``wipe`` (``destructiveHint``): deletes ``notes.txt`` from its working directory.

Relative to the working directory on purpose: the worker starts MCP servers in the
session's workdir, so these touch only that workdir.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

__all__ = ["main", "server"]

server = MCPServer("codey-testkit")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def where(ctx: Context) -> str:
    """Report the working directory, the client's roots and the environment's names."""
    try:
        with warnings.catch_warnings():  # roots are deprecated in the newest spec revision
            warnings.simplefilter("ignore")
            listed = await ctx.session.list_roots()
        roots = [str(root.uri) for root in listed.roots]
    except Exception as exc:  # a client without roots: say so rather than fail
        roots = [f"error: {exc}"]
    return json.dumps({"cwd": os.getcwd(), "roots": roots, "env": sorted(os.environ)})


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def note(text: str) -> str:
    """Append a line to notes.txt in the working directory."""
    with open("notes.txt", "a", encoding="utf-8") as f:
        f.write(text + "\n")
    return "noted"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def wipe() -> str:
    """Delete notes.txt from the working directory."""
    Path("notes.txt").unlink(missing_ok=True)
    return "wiped"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m codey_testkit.mcp_server",
                                     description="A tiny stdio MCP server for tests.")
    parser.add_argument("--needs", metavar="FILE",
                        help="start only in a working directory that has FILE")
    args = parser.parse_args(argv)
    if args.needs and not Path(args.needs).exists():
        sys.exit(f"{Path.cwd()} has no {args.needs}: not starting")
    server.run("stdio")


if __name__ == "__main__":
    main()
