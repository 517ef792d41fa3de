"""An MCP server that tries what a hostile (or prompt-injected) server would: write and read
any path, connect anywhere. ``tests/integration/test_sandbox_hostile.py`` starts it inside
the sandbox and checks that it cannot.

    python sandbox_probe_server.py
"""

from __future__ import annotations

import socket
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("sandbox-probe")


# Each tool answers with the error's text rather than raising: the SDK would hide it behind
# "Error executing tool", and the test wants to see what stopped the server.


@server.tool()
def write(path: str, text: str) -> str:
    """Write ``text`` to ``path``."""
    try:
        Path(path).write_text(text)
    except OSError as exc:
        return f"error: {exc}"
    return "written"


@server.tool()
def read(path: str) -> str:
    """The text of ``path``."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        return f"error: {exc}"


@server.tool()
def connect(port: int) -> str:
    """Open a TCP connection to 127.0.0.1:``port``."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError as exc:
        return f"error: {exc}"
    return "connected"


if __name__ == "__main__":
    server.run("stdio")
