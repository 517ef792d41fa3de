"""What a ``start_session`` call of an MCP token may ask of a worktree: the setup script and
a chosen base revision run code before any approval, so they need the ``admin`` scope."""

from __future__ import annotations

from codey_protocol import events as ev
from codey_server.mcp.server import worktree_request
from codey_server.mcp.tokens import McpToken


def _token(scope: str) -> McpToken:
    return McpToken(token_id="mcp_1", name="an agent", created_at=0.0,
                    scope=scope)  # type: ignore[arg-type]


def test_without_admin_a_worktree_gets_no_setup_and_no_base() -> None:
    token = _token("sessions")
    assert worktree_request(token, "", None) == ev.WorktreeRequest(base="", setup=False)
    assert worktree_request(token, "", False) == ev.WorktreeRequest(base="", setup=False)
    setup = worktree_request(token, "", True)
    assert isinstance(setup, str) and "has the scope 'sessions'" in setup
    assert "setup script needs 'admin'" in setup
    for base, asked in (("evil", None), ("main", False), ("HEAD~3", True)):
        refused = worktree_request(token, base, asked)
        assert isinstance(refused, str) and "base revision needs 'admin'" in refused


def test_an_admin_token_runs_the_setup_by_default_from_the_base_it_names() -> None:
    token = _token("admin")
    assert worktree_request(token, "", None) == ev.WorktreeRequest(base="", setup=True)
    assert worktree_request(token, "dev", False) == ev.WorktreeRequest(base="dev", setup=False)
    assert worktree_request(token, "dev", True) == ev.WorktreeRequest(base="dev", setup=True)
