"""Codey as an MCP server, as a plugin: ``/mcp`` and ``/api/mcp/tokens``; its tokens (shown
once, kept as hashes) and the server, which stops taking calls first at shutdown."""

from __future__ import annotations

from typing import Protocol

from codey_server.core.engine import Engine
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.mcp.routes import McpTokensController, mcp_endpoint
from codey_server.mcp.server import CodeyMcp, Mover
from codey_server.mcp.tokens import McpTokens, McpTokenStore
from codey_server.settings import Settings

__all__ = ["PLUGIN"]


class _Stores(Protocol):
    @property
    def mcp_tokens(self) -> McpTokenStore: ...


def _tokens(settings: Settings, stores: _Stores) -> McpTokens:
    return McpTokens(settings.data_dir / "mcp_tokens.json", stores.mcp_tokens)


def _mcp(engine: Engine, mcp_tokens: McpTokens, moves: Mover) -> CodeyMcp:
    return CodeyMcp(engine, mcp_tokens, moves)


PLUGIN = FeaturePlugin(
    "mcp",
    routes=(McpTokensController, mcp_endpoint),
    parts=(Part("mcp_tokens", _tokens),
           Part("mcp", _mcp, stop=CodeyMcp.stop, intake=True)),
)
