"""``/mcp``: Codey as an MCP server (its own bearer tokens, checked by
:class:`~codey_server.mcp.server.CodeyMcp`); ``/api/mcp/tokens``: the browser creates, lists
and revokes those tokens."""

from __future__ import annotations

import msgspec
from litestar import Request, asgi, delete, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, JSONBody
from litestar.types import Receive, Scope, Send

from codey_protocol.events import ApprovalPolicy
from codey_server.http.access import PUBLIC
from codey_server.http.errors import errors
from codey_server.http.resource import Resource
from codey_server.mcp.tokens import (
    DEFAULT_MAX_POLICY,
    DEFAULT_SCOPE,
    McpScope,
    McpToken,
    McpTokens,
)

__all__ = ["McpTokensController", "NewMcpToken", "mcp_endpoint"]


class NewMcpToken(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str  # who will use it, e.g. "claude on laptop"
    #: read (list and read), sessions (also start and prompt sessions), admin (also change
    #: the task board, and a worktree session's base revision and setup script)
    scope: McpScope = DEFAULT_SCOPE
    #: the most a session it starts or prompts may do without asking
    max_policy: ApprovalPolicy = DEFAULT_MAX_POLICY


class McpTokenCreated(msgspec.Struct, kw_only=True):
    token_id: str
    name: str
    token: str  # shown once: only its hash is kept
    scope: McpScope
    max_policy: ApprovalPolicy


class McpTokenInfo(msgspec.Struct, kw_only=True):
    token_id: str
    name: str
    created_at: float
    last_used_at: float | None
    scope: McpScope
    max_policy: ApprovalPolicy


def _info(t: McpToken) -> McpTokenInfo:
    return McpTokenInfo(token_id=t.token_id, name=t.name, created_at=t.created_at,
                        last_used_at=t.last_used_at, scope=t.scope, max_policy=t.max_policy)


class McpTokensController(Resource):
    path = "/api/mcp/tokens"
    tags = ["mcp"]

    @get(responses=errors())
    async def list_tokens(self, mcp_tokens: NamedDependency[McpTokens]) -> list[McpTokenInfo]:
        """The MCP tokens (never the tokens themselves)."""
        return [_info(t) for t in await mcp_tokens.list()]

    @post(status_code=201, responses=errors(400))
    async def create_token(self, data: JSONBody[NewMcpToken],
                           mcp_tokens: NamedDependency[McpTokens]) -> McpTokenCreated:
        """A new token for an MCP client; the answer is the only time it is shown."""
        record, token = await mcp_tokens.create(data.name, data.scope, data.max_policy)
        return McpTokenCreated(token_id=record.token_id, name=record.name, token=token,
                               scope=record.scope, max_policy=record.max_policy)

    @delete("/{token_id:str}", status_code=200, responses=errors(404))
    async def revoke_token(self, token_id: FromPath[str],
                           mcp_tokens: NamedDependency[McpTokens]) -> McpTokenInfo:
        """Revoke a token: once this answers, its next call gets 401 (on every replica)."""
        record = await mcp_tokens.revoke(token_id)
        if record is None:
            raise NotFoundException(f"no MCP token {token_id!r}")
        return _info(record)


# PUBLIC for the access layer: the browser's cookie and the access token do not open /mcp;
# CodeyMcp checks the MCP token itself (the Host check still applies)
@asgi("/mcp", is_mount=True, opt=PUBLIC, copy_scope=True)
async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    services = Request(scope).app.state.services  # set in the lifespan (app.py)
    await services.mcp.handle(scope, receive, send)
