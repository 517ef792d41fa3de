"""Codey as an MCP server: ``/mcp`` (streamable HTTP), for agents inside and outside Codey.

Its tools drive this server the way a browser does, through ``Engine.execute`` (so ``decide``
checks every call): ``list_sessions``, ``get_session``, ``list_workers``, ``start_session``,
``send_prompt``, the task board's ``list_tasks``, ``create_task``, ``update_task``, and
``move_session`` ("Move to…", with a token of the admin scope). It
is authenticated with tokens the user creates and
revokes in the UI (:class:`McpTokens`; ``Authorization: Bearer cmcp_...``), never with the
browser's cookie or the access token: an agent gets exactly this and can be cut off alone.

The MCP SDK is imported on the first authenticated request, in a thread: it costs seconds of
CPU, which the server's start and its event loop should not pay when nobody uses ``/mcp``.
The SDK's session manager runs in a task of its own (it holds an anyio task group) until the
server stops. Requests are stateless (each POST is answered on its own, JSON, no session id),
so nothing is lost when the server restarts between two calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_server.core.engine import Engine
from codey_server.core.rules import CommandRejected
from codey_server.errors import ServerError
from codey_server.mcp.tokens import POLICIES, TOKEN_PREFIX, McpScope, McpToken, McpTokens

if TYPE_CHECKING:
    from litestar.types import HTTPResponseStartEvent, Receive, Scope, Send

__all__ = ["TOKEN_PREFIX", "CodeyMcp", "McpToken", "McpTokens", "worktree_request"]

log = logging.getLogger("codey.mcp")

class _Moved(Protocol):
    @property
    def worker_id(self) -> str: ...
    @property
    def workdir(self) -> str: ...
    @property
    def files(self) -> int: ...


class Mover(Protocol):
    """What the MCP endpoint needs of the moves feature (``Moves``)."""

    async def move(self, session_id: str, worker_id: str, workdir: str) -> _Moved: ...


#: the token of the request being handled
_CALLER: ContextVar[McpToken | None] = ContextVar("codey_mcp_caller", default=None)


def _public(session: Any) -> dict[str, Any]:
    items = [msgspec.to_builtins(i) for i in session.items]
    return {"session_id": session.session_id, "title": session.title,
            "status": session.status, "worker_id": session.worker_id,
            "workdir": session.workdir, "items": items[-50:]}


class CodeyMcp:
    """The ``/mcp`` endpoint: checks the token, then hands the request to the SDK."""

    def __init__(self, engine: Engine, tokens: McpTokens, moves: Mover | None = None) -> None:
        self.engine = engine
        self.tokens = tokens
        #: "Move to…" (the moves feature's part), for the move_session tool
        self.moves = moves
        self._manager: Any = None
        self._ready: asyncio.Future[Any] | None = None
        self._stop = asyncio.Event()
        self._holder: asyncio.Task[None] | None = None
        #: more tools (the task board adds its own): name → (function, description)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        auth = headers.get("authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        caller = await self.tokens.check(token) if token else None
        if caller is None:
            await _reply(send, 401, {"error": "an MCP token is needed: create one in Codey's "
                                              "MCP dialog; send it as Authorization: Bearer"})
            return
        manager = await self._started()
        # the tools see who calls (the SDK runs them in a task started from this one)
        _CALLER.set(caller)
        await manager.handle_request(scope, receive, send)

    async def _started(self) -> Any:
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            self._holder = asyncio.create_task(self._hold(self._ready))
        return await asyncio.shield(self._ready)

    async def _hold(self, ready: asyncio.Future[Any]) -> None:
        try:
            server_module = await asyncio.to_thread(_import_sdk)
            manager = self._build(server_module)
            async with manager.run():
                ready.set_result(manager)
                await self._stop.wait()
        except Exception as err:  # no MCP for anyone, but the server goes on
            log.exception("the MCP endpoint could not start")
            if not ready.done():
                ready.set_exception(err)

    async def stop(self) -> None:
        self._stop.set()
        if self._holder is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._holder, 5)

    def _build(self, sdk: Any) -> Any:
        mcp_server_cls, security_cls, tool_error, annotations_cls = sdk
        server = mcp_server_cls(name="codey", instructions=(
            "Codey runs coding-agent sessions on the user's machines. Start a session on a "
            "worker and a folder, send it prompts, read what it did."))
        engine = self.engine

        def caller(scope: McpScope) -> McpToken:
            """The calling token, if it may act in ``scope`` (else the client is told why)."""
            token = _CALLER.get()
            if token is None:  # not through handle(): nobody to act for
                raise tool_error("no MCP token")
            if not token.allows(scope):
                raise tool_error(f"this token ({token.name}) has the scope {token.scope!r}; "
                                 f"this tool needs {scope!r}: make a token with it in Codey's "
                                 "MCP dialog")
            return token

        async def execute(token: McpToken, command: cl.ClientToServer) -> list[Any]:
            try:
                return await engine.execute(command, origin=f"mcp:{token.token_id}")
            except CommandRejected as err:
                raise tool_error(err.message) from None

        def list_sessions() -> str:
            """Every session: id, title, status, machine and folder."""
            caller("read")
            return json.dumps([
                {"session_id": s.session_id, "title": s.title, "status": s.status,
                 "worker_id": s.worker_id, "workdir": s.workdir}
                for s in engine.state.sessions.values() if not s.archived])

        def get_session(session_id: str) -> str:
            """One session with its latest 50 items."""
            caller("read")
            session = engine.state.sessions.get(session_id)
            if session is None:
                raise tool_error(f"no session {session_id!r}")
            return json.dumps(_public(session))

        def list_workers() -> str:
            """The machines (workers) sessions can run on."""
            caller("read")
            return json.dumps([
                {"worker_id": w.worker_id, "hostname": w.hostname, "connected": w.connected,
                 "roots": w.roots} for w in engine.state.workers.values() if not w.revoked])

        async def start_session(worker_id: str, workdir: str, prompt: str,
                                policy: str = "suggest", worktree: bool = False,
                                base: str = "", setup: bool | None = None) -> str:
            """Start a session on a worker in a folder with a first prompt. policy: suggest
            (asks before changes), auto-edit or full-auto — at most the token's own.
            worktree: in a git worktree of its own on a new branch — to fan a task out into
            attempts that do not see each other's changes. Two worktree options run code
            before any approval and need a token with the admin scope: base (a revision to
            branch from; empty, the default: the folder's current branch) and setup (run the
            project's .codey/setup.sh in the new worktree; the default: true for an admin
            token, false for any other)."""
            token = caller("sessions")
            if policy not in POLICIES:
                raise tool_error("policy must be suggest, auto-edit or full-auto")
            if not token.allows_policy(policy):
                raise tool_error(f"this token may start sessions up to {token.max_policy!r}, "
                                 f"not {policy!r}")
            request = worktree_request(token, base, setup)
            if isinstance(request, str):
                raise tool_error(request)
            envs = await execute(token, cl.CreateSession(
                worker_id=worker_id, workdir=workdir, prompt=prompt, policy=policy,
                worktree=request if worktree else None))
            return json.dumps({"session_id": envs[0].session_id})

        async def send_prompt(session_id: str, text: str) -> str:
            """Send a prompt to a session (queued if it is working)."""
            token = caller("sessions")
            session = engine.state.sessions.get(session_id)
            if session is not None and not token.allows_policy(session.policy):
                # a prompt makes the session act under its own policy
                raise tool_error(f"the session runs under {session.policy!r}; this token may "
                                 f"drive sessions up to {token.max_policy!r}")
            await execute(token, cl.SendPrompt(session_id=session_id, text=text))
            return json.dumps({"ok": True})

        def list_tasks() -> str:
            """The task board: every task with its status (todo, in_progress, review, done),
            dependencies and sessions."""
            caller("read")
            return json.dumps([msgspec.to_builtins(t) for t in sorted(
                engine.state.tasks.values(), key=lambda t: (t.status, t.order))])

        async def create_task(title: str, description: str = "",
                              depends_on: list[str] | None = None) -> str:
            """Add a task to the board's todo column; depends_on: ids of tasks to finish
            first."""
            token = caller("admin")
            envs = await execute(token, cl.CreateTask(
                title=title, description=description, depends_on=depends_on or []))
            return json.dumps({"task_id": envs[0].event.task_id})

        async def update_task(task_id: str, title: str | None = None,
                              description: str | None = None,
                              status: str | None = None) -> str:
            """Change a task's title or text, or move it (status: todo, in_progress, review,
            done)."""
            token = caller("admin")
            task = engine.state.tasks.get(task_id)
            if task is None:
                raise tool_error(f"no task {task_id!r}")
            if status is not None and status not in ("todo", "in_progress", "review", "done"):
                raise tool_error("status: todo, in_progress, review or done")
            if title is not None or description is not None:
                await execute(token, cl.UpdateTask(
                    task_id=task_id, title=title if title is not None else task.title,
                    description=description if description is not None
                    else task.description, depends_on=list(task.depends_on)))
            if status is not None:
                await execute(token, cl.MoveTask(task_id=task_id,
                                                 status=status))  # type: ignore[arg-type]
            return json.dumps({"ok": True})

        async def rewind_conversation(session_id: str, turn: str) -> str:
            """Take a session's conversation back to just before one of its prompts (turn:
            the prompt's item id, from get_session); that prompt and what followed stay
            visible, folded, but are no longer sent to the model. Its files stay as they are.
            Refused while a turn runs."""
            token = caller("sessions")
            session = engine.state.sessions.get(session_id)
            if session is not None and not token.allows_policy(session.policy):
                raise tool_error(f"the session runs under {session.policy!r}; this token may "
                                 f"drive sessions up to {token.max_policy!r}")
            await execute(token, cl.RewindConversation(session_id=session_id, turn=turn))
            return json.dumps({"ok": True})

        moves = self.moves

        async def move_session(session_id: str, worker_id: str, workdir: str) -> str:
            """Move a session to another machine (worker) and a new folder there: its
            running processes stop, its files (uncommitted changes included) are carried
            over and it goes on there; the first machine's files stay as they were. Refused
            while a turn is under way, for an offline machine, or a folder outside its
            roots."""
            token = caller("admin")
            if moves is None:
                raise tool_error("this server cannot move sessions")
            try:
                done = await moves.move(session_id, worker_id, workdir)
            except ServerError as err:
                raise tool_error(getattr(err, "message", str(err))) from None
            log.info("mcp:%s moved session %s", token.token_id, session_id)
            return json.dumps({"session_id": session_id, "worker_id": done.worker_id,
                               "workdir": done.workdir, "files": done.files})

        read_only = annotations_cls(readOnlyHint=True, destructiveHint=False,
                                    openWorldHint=False)
        changes = annotations_cls(readOnlyHint=False, destructiveHint=False,
                                  openWorldHint=False)
        for tool, hints in ((list_sessions, read_only), (get_session, read_only),
                            (list_workers, read_only), (list_tasks, read_only),
                            (start_session, changes), (send_prompt, changes),
                            (create_task, changes), (update_task, changes),
                            (rewind_conversation, annotations_cls(
                                readOnlyHint=False, destructiveHint=True,
                                openWorldHint=False)),
                            (move_session, changes)):
            server.add_tool(tool, description=" ".join((tool.__doc__ or "").split()),
                            annotations=hints)
        server.streamable_http_app(stateless_http=True, json_response=True,
                                   transport_security=security_cls(
                                       enable_dns_rebinding_protection=False))
        return server.session_manager


def worktree_request(token: McpToken, base: str, setup: bool | None
                     ) -> ev.WorktreeRequest | str:
    """The worktree a ``start_session`` call of ``token`` may ask for, or why not.

    The setup script runs, and a ``base`` revision is checked out, before the session's first
    approval, so neither is bounded by the token's maximum policy: both need ``admin``. A
    token without it gets no setup unless it asks (then it is refused): a default that
    refused every worktree would make ``worktree`` useless to it, one that ran setup would
    run code no approval covers."""
    admin = token.allows("admin")
    if base and not admin:
        return (f"this token ({token.name}) has the scope {token.scope!r}; choosing a base "
                "revision needs 'admin' (it checks out code no approval covers): leave base "
                "empty to branch from the current one, or make a token with 'admin' in "
                "Codey's MCP dialog")
    if setup and not admin:
        return (f"this token ({token.name}) has the scope {token.scope!r}; running the "
                "project's setup script needs 'admin' (it runs before any approval): leave "
                "setup out (it is false for this token), or make a token with 'admin' in "
                "Codey's MCP dialog")
    return ev.WorktreeRequest(base=base, setup=admin if setup is None else setup)


def _import_sdk() -> tuple[Any, Any, Any, Any]:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.transport_security import TransportSecuritySettings
    from mcp.types import ToolAnnotations

    return MCPServer, TransportSecuritySettings, ToolError, ToolAnnotations


async def _reply(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    start: HTTPResponseStartEvent = {
        "type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
            (b"www-authenticate", b'Bearer realm="codey-mcp"')]}
    await send(start)
    await send({"type": "http.response.body", "body": data, "more_body": False})
