"""MCP servers configured in ``worker-config.json``, reached over stdio with the ``mcp`` SDK.

A server is started on first use and kept: one long-lived asyncio task per server enters
``stdio_client`` and ``ClientSession`` (anyio needs a context manager to be left by the task
that entered it) and waits; calls are made on its session from any task.

* A tool that fails (``isError``) is a *result* (``McpCallResult(is_error=True)``), not an
  error: the model reads it and corrects itself.
* Protocol errors (unknown tool, bad arguments) raise ``ActionRefused("mcp_error")``; a server
  that cannot start or has died raises ``ActionRefused("mcp_unavailable")``.
* A server found dead (connection closed) is torn down and started again on the next call. A
  call that was cut by the crash is *not* retried: it may have had effects already.
* ``list_tools`` results are cached per server process; :meth:`McpManager.list_all` lists every
  server concurrently and reports a failing one with ``error`` set instead of raising.

The servers' stderr goes to ``<log_dir>/mcp-<name>.log`` (or nowhere), never to the terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Any, TextIO

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from codey_protocol.worker import McpCallResult, McpServerInfo, McpTool
from codey_worker.config import McpServerConfig
from codey_worker.confine import ActionRefused

__all__ = ["McpManager"]

log = logging.getLogger(__name__)

_CONNECTION_CLOSED = -32000  # mcp_types.jsonrpc.CONNECTION_CLOSED
START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 300.0


class _Server:
    """One configured server and, once started, the task holding its session."""

    def __init__(self, config: McpServerConfig, log_dir: Path | None) -> None:
        self.config = config
        self._log_dir = log_dir
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[ClientSession] | None = None
        self._stop: asyncio.Event | None = None
        self.tools: list[McpTool] | None = None
        self._lock = asyncio.Lock()

    def _errlog(self) -> TextIO:
        if self._log_dir is None:
            return open(os.devnull, "w")
        self._log_dir.mkdir(parents=True, exist_ok=True)
        return open(self._log_dir / f"mcp-{self.config.name}.log", "a")

    async def session(self, timeout: float = START_TIMEOUT_S) -> ClientSession:
        """The live session, starting the server first if it is not running."""
        async with self._lock:
            if self._task is None or self._task.done():
                self.tools = None
                loop = asyncio.get_running_loop()
                self._ready = loop.create_future()
                self._stop = asyncio.Event()
                self._task = asyncio.create_task(self._hold(self._ready, self._stop),
                                                 name=f"mcp-{self.config.name}")
            ready = self._ready
        assert ready is not None
        try:
            return await asyncio.wait_for(asyncio.shield(ready), timeout)
        except TimeoutError:
            await self.stop()
            raise ActionRefused("mcp_unavailable",
                                f"MCP server {self.config.name!r} did not start within "
                                f"{timeout:.0f} s") from None
        except ActionRefused:
            raise
        except Exception as exc:
            raise ActionRefused("mcp_unavailable",
                                f"MCP server {self.config.name!r} could not start: "
                                f"{_describe(exc)}") from None

    async def _hold(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        params = StdioServerParameters(command=self.config.command, args=self.config.args,
                                       env=self.config.env or None)
        errlog = self._errlog()
        try:
            async with stdio_client(params, errlog=errlog) as (read, write):  # noqa: SIM117
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    ready.set_result(session)
                    await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else
                                    RuntimeError(f"stopped: {type(exc).__name__}"))
            if not isinstance(exc, Exception):
                raise
            log.warning("MCP server %s ended: %s", self.config.name, _describe(exc))
        finally:
            errlog.close()

    async def stop(self) -> None:
        """Stop the server (if running); the next use starts it again."""
        task, stop = self._task, self._stop
        self._task = None
        self.tools = None
        if task is None:
            return
        if stop is not None:
            stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 10)
        except (TimeoutError, Exception):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def _describe(exc: BaseException) -> str:
    """A one-line reason, digging into exception groups (anyio task groups raise them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]


def _text_of(content: list[dict[str, Any]]) -> str:
    return "\n".join(str(part.get("text", "")) for part in content if part.get("type") == "text")


class McpManager:
    """Every configured MCP server, by name. Use from one event loop; :meth:`close` at exit."""

    def __init__(self, servers: dict[str, McpServerConfig], log_dir: Path | None = None,
                 *, call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        self._servers = {name: _Server(cfg, log_dir) for name, cfg in servers.items()}
        self._call_timeout_s = call_timeout_s
        self._errors: dict[str, str] = {}

    @property
    def names(self) -> list[str]:
        return list(self._servers)

    def _get(self, name: str) -> _Server:
        server = self._servers.get(name)
        if server is None:
            known = ", ".join(self._servers) or "none configured"
            raise ActionRefused("unknown_mcp_server",
                                f"no MCP server named {name!r} on this worker ({known})")
        return server

    def cached(self) -> list[McpServerInfo]:
        """What is known without starting anything: listed tools, or the last error."""
        return [McpServerInfo(name=name, tools=list(server.tools or []),
                              error=self._errors.get(name))
                for name, server in self._servers.items()]

    async def list_tools(self, name: str) -> list[McpTool]:
        """The tools of server ``name`` with their input schemas (cached while it runs)."""
        server = self._get(name)
        if server.tools is not None:
            return server.tools
        for attempt in range(2):  # listing is harmless to repeat after a crash
            session = await server.session()
            try:
                listed = await asyncio.wait_for(session.list_tools(), self._call_timeout_s)
            except MCPError as exc:
                if exc.code == _CONNECTION_CLOSED and attempt == 0:
                    await server.stop()
                    continue
                raise ActionRefused("mcp_error", f"{name}: {exc.message}") from None
            except TimeoutError:
                await server.stop()
                raise ActionRefused("mcp_unavailable", f"{name}: listing tools timed out") from None
            except (RuntimeError, ValueError) as exc:  # incl. pydantic's ValidationError
                raise ActionRefused("mcp_error", f"{name}: {exc}") from None
            server.tools = [McpTool(name=t.name, description=t.description or "",
                                    input_schema=dict(t.input_schema or {}))
                            for t in listed.tools]
            self._errors.pop(name, None)
            return server.tools
        raise ActionRefused("mcp_unavailable", f"MCP server {name!r} keeps closing")

    async def list_all(self) -> list[McpServerInfo]:
        """Every server with its tools; a server that fails has ``error`` set instead."""

        async def one(name: str) -> McpServerInfo:
            try:
                return McpServerInfo(name=name, tools=await self.list_tools(name))
            except ActionRefused as exc:
                self._errors[name] = exc.message
                return McpServerInfo(name=name, error=exc.message)
            except Exception as exc:  # one broken MCP server must not take the worker down
                message = f"{name}: {type(exc).__name__}: {exc}"
                self._errors[name] = message
                return McpServerInfo(name=name, error=message)

        return list(await asyncio.gather(*(one(name) for name in self._servers)))

    async def call(self, name: str, tool: str, arguments: dict[str, Any]) -> McpCallResult:
        """Call ``tool`` on server ``name``. A tool error is a result with ``is_error=True``."""
        server = self._get(name)
        session = await server.session()
        try:
            result = await asyncio.wait_for(session.call_tool(tool, arguments),
                                            self._call_timeout_s)
        except MCPError as exc:
            if exc.code == _CONNECTION_CLOSED:
                await server.stop()
                raise ActionRefused("mcp_unavailable",
                                    f"MCP server {name!r} exited; it will be restarted on the "
                                    "next call") from None
            raise ActionRefused("mcp_error", f"{name}.{tool}: {exc.message}") from None
        except TimeoutError:
            await server.stop()
            raise ActionRefused("mcp_unavailable",
                                f"{name}.{tool} did not answer within "
                                f"{self._call_timeout_s:.0f} s; the server was stopped") from None
        except (RuntimeError, ValueError) as exc:  # input-required / claimed results, bad schema
            raise ActionRefused("mcp_error", f"{name}.{tool}: {exc}") from None
        content = [part.model_dump(mode="json", by_alias=True, exclude_none=True)
                   for part in result.content]
        return McpCallResult(content=content, text=_text_of(content),
                             is_error=bool(result.is_error))

    async def close(self) -> None:
        """Stop every server that was started."""
        await asyncio.gather(*(s.stop() for s in self._servers.values()),
                             return_exceptions=True)
