"""MCP servers configured in ``worker-config.json``, reached over stdio with the ``mcp`` SDK.

Confinement — what the worker does, and where it stops:

* Each server runs **per session workdir**: one process for each (server, workdir) pair, started
  with the workdir as its **cwd**, the workdir declared as its only MCP **root** (the client's
  ``roots/list`` answer: the protocol's own way to tell a server where it may work), and the
  **environment commands get** (:func:`codey_worker.shell.build_env`: an allowlist, no
  ``*KEY*``/``*TOKEN*``/``*SECRET*`` names) plus the ``env`` its config entry sets. At most
  :data:`MAX_INSTANCES` per server run at once; the least recently used idle one is stopped.
* A stdio server runs **in the OS sandbox** (:mod:`codey_worker.sandbox`) in the mode the call
  names (``McpCall.sandbox``, default ``workspace-write``: its workdir writable, the rest
  read-only, ``$CODEY_HOME`` and credential folders hidden, a throwaway ``/tmp``), with the
  network unless its config says ``"network": false``, and its own ``writable_paths`` (a
  ``uvx`` server's cache) writable too; ``"sandbox": false`` in its config runs it bare.
  One process per (server, workdir, mode). Without a working sandbox a sandboxed server does
  not start (``sandbox_unavailable``).
* A session's tool lists are taken in its workdir (``list_all(workdir)``, when the session
  is attached), by the process its calls there use (the default ``workspace-write`` one),
  which is left running for them: a server that confines itself to its cwd
  (``mcp-server-git --repository .``) can start only there. The worker's own list, for
  ``hello`` before any session, is taken from a process started in an empty scratch
  directory with no roots and stopped once it has answered. Lists are cached per server and
  workdir; the last one a server gave anywhere is what ``hello`` reports next.
* Tools the owner's policy denies (``denied_mcp_tools``) are left out of those lists.
* A third-party server is a program running with the user's rights: roots are advice it may
  ignore. Inside the sandbox its writes stop at its workdir and it cannot read the hidden
  paths; with the network on (the default for servers) it can still send what it reads.

One long-lived asyncio task per process enters ``stdio_client`` and ``ClientSession`` (anyio
needs a context manager to be left by the task that entered it) and waits; calls are made on
its session from any task.

* A tool that fails (``isError``) is a *result* (``McpCallResult(is_error=True)``), not an
  error: the model reads it and corrects itself.
* Protocol errors (unknown tool, bad arguments) raise ``ActionRefused("mcp_error")``; a server
  that cannot start or has died raises ``ActionRefused("mcp_unavailable")``.
* A server found dead (connection closed) is torn down and started again on the next call. A
  call that was cut by the crash is *not* retried: it may have had effects already.
* :meth:`McpManager.list_all` lists every server concurrently and reports a failing one with
  ``error`` set instead of raising.

The servers' stderr goes to ``<log_dir>/mcp-<name>.log`` (or nowhere), never to the terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from codey_protocol.worker import McpCallResult, McpServerInfo, McpTool, SandboxMode
from codey_worker.config import McpServerConfig
from codey_worker.confine import ActionRefused
from codey_worker.home import codey_home
from codey_worker.policy import LocalPolicy
from codey_worker.sandbox import Sandbox, SandboxSettings
from codey_worker.shell import build_env, merge_git_env

if TYPE_CHECKING:
    # The MCP SDK is imported where a server is started or called, never at the worker's
    # start: it costs about 1.5 s and 30 MB, and most workers configure no MCP server.
    from mcp import ClientSession
    from mcp import types as mcp_types

__all__ = ["McpManager"]

log = logging.getLogger(__name__)

_CONNECTION_CLOSED = -32000  # mcp_types.jsonrpc.CONNECTION_CLOSED
START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 300.0
#: running processes per configured server (one per workdir in use), at most
MAX_INSTANCES = 8
#: what a failure to start quotes of the server's stderr, at most
STDERR_QUOTED_LINES = 5
STDERR_QUOTED_BYTES = 4096


@contextlib.asynccontextmanager
async def _http_streams(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=headers, timeout=30.0) as http, \
            streamable_http_client(url, http_client=http) as streams:
        yield streams


def server_env(config: McpServerConfig, cwd: Path) -> dict[str, str]:
    """The environment of an MCP server: what a command gets, plus its config's ``env``.

    The config's ``env`` is the owner's own, written for this server (a token a GitHub server
    needs, say), so it is passed as written: only the worker's inherited environment is
    stripped. The server runs on the model's behalf, so its gits get the hardening commands
    get; git settings in ``env`` come after it (the owner may deliberately turn one back).
    """
    return merge_git_env(build_env({}, cwd=str(cwd)), config.env)


class _Server:
    """One process of a configured server, for one workdir (``None``: for listing tools, in
    ``scratch``, with no roots) and sandbox mode, and once started, the task holding its
    session."""

    def __init__(self, config: McpServerConfig, log_dir: Path | None, workdir: Path | None,
                 scratch: Path, sandbox: Sandbox | None = None,
                 mode: SandboxMode = "workspace-write") -> None:
        self.config = config
        self.workdir = workdir
        self.cwd = workdir if workdir is not None else scratch
        self._sandbox = sandbox
        self._mode = mode
        self._log_dir = log_dir
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[ClientSession] | None = None
        self._stop: asyncio.Event | None = None
        self.busy = 0  # calls in flight
        self._lock = asyncio.Lock()
        #: where this process's stderr starts in the server's log (its first lines are what
        #: a failure to start quotes)
        self._log_offset = 0

    def _log_path(self) -> Path | None:
        return None if self._log_dir is None else self._log_dir / f"mcp-{self.config.name}.log"

    def _errlog(self) -> TextIO:
        path = self._log_path()
        if path is None:
            return open(os.devnull, "w")
        path.parent.mkdir(parents=True, exist_ok=True)
        errlog = open(path, "a")  # noqa: SIM115 (closed by _hold, which uses it)
        self._log_offset = errlog.tell()
        return errlog

    def stderr_head(self) -> str:
        """The first lines this process wrote to its stderr ("" : none, or no log), for an
        error that would otherwise say only "Connection closed"."""
        path = self._log_path()
        if path is None:
            return ""
        try:
            with open(path, "rb") as f:
                f.seek(self._log_offset)
                data = f.read(STDERR_QUOTED_BYTES)
        except OSError:
            return ""
        lines = [line.strip()[:200] for line in data.decode(errors="replace").splitlines()]
        return " | ".join([line for line in lines if line][:STDERR_QUOTED_LINES])

    def _with_stderr(self, message: str) -> str:
        head = self.stderr_head()
        return f"{message}; its stderr: {head}" if head else message

    async def _list_roots(self, context: Any) -> mcp_types.ListRootsResult:
        """The client's ``roots/list`` answer: the session's workdir, nothing else."""
        from mcp import types as mcp_types
        from pydantic import FileUrl

        if self.workdir is None:
            return mcp_types.ListRootsResult(roots=[])
        return mcp_types.ListRootsResult(roots=[
            mcp_types.Root(uri=FileUrl(self.workdir.as_uri()),
                           name=self.workdir.name or "workdir")])

    async def session(self, timeout: float = START_TIMEOUT_S) -> ClientSession:
        """The live session, starting the server first if it is not running."""
        async with self._lock:
            if self._task is None or self._task.done():
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
            raise ActionRefused("mcp_unavailable", self._with_stderr(
                f"MCP server {self.config.name!r} could not start: {_describe(exc)}")) from None

    def _transport(self, errlog: TextIO) -> Any:
        """The streams to the server: a process over stdio, or streamable HTTP at ``url``."""
        if self.config.url is not None:
            return _http_streams(self.config.url, self.config.headers)
        from mcp import StdioServerParameters, stdio_client

        command, args = self.config.command, list(self.config.args)
        env = server_env(self.config, self.cwd)
        if self.config.sandbox and self._mode != "full-access" and self._sandbox is not None:
            cwd = Path(os.path.realpath(self.cwd))
            spec = self._sandbox.spec(mode=self._mode, network=self.config.network,
                                      workdir=cwd, cwd=cwd,
                                      tmp=self._sandbox.tmp_for(self._mode, None))
            own = SandboxSettings(writable_paths=self.config.writable_paths).writable()
            spec = dataclasses.replace(spec, writable=(*spec.writable, *own))
            # raises sandbox_unavailable: the server does not start bare for lack of one
            command, *args = self._sandbox.wrap([command, *args], spec)
            env = self._sandbox.env(env, spec)
        params = StdioServerParameters(command=command, args=args, env=env, cwd=self.cwd)
        return stdio_client(params, errlog=errlog)

    async def _hold(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        from mcp import ClientSession

        errlog = self._errlog()
        try:
            async with self._transport(errlog) as (read, write):  # noqa: SIM117
                async with ClientSession(read, write,
                                         list_roots_callback=self._list_roots) as session:
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


def _tool(listed: Any) -> McpTool:
    hints = listed.annotations
    return McpTool(name=listed.name, description=listed.description or "",
                   input_schema=dict(listed.input_schema or {}),
                   read_only_hint=hints.read_only_hint if hints else None,
                   destructive_hint=hints.destructive_hint if hints else None)


class McpManager:
    """Every configured MCP server, by name. Use from one event loop; :meth:`close` at exit.

    ``policy`` (the owner's) hides and refuses the tools it denies; without one nothing is.
    ``sandbox``: the worker's (default: this machine's, with ``$CODEY_HOME`` hidden).
    """

    def __init__(self, servers: dict[str, McpServerConfig], log_dir: Path | None = None,
                 *, call_timeout_s: float = CALL_TIMEOUT_S, policy: LocalPolicy | None = None,
                 max_instances: int = MAX_INSTANCES, sandbox: Sandbox | None = None) -> None:
        self._configs = dict(servers)
        self._log_dir = log_dir
        self._call_timeout_s = call_timeout_s
        self._policy = policy
        self._max_instances = max(1, max_instances)
        if sandbox is None:
            sandbox = Sandbox.detected(codey_home())
        self._sandbox = sandbox
        self._instances: OrderedDict[tuple[str, Path | None, SandboxMode], _Server] = \
            OrderedDict()
        self._tools: dict[str, list[McpTool]] = {}  # the last list each gave, anywhere
        self._errors: dict[str, str] = {}
        self._workdir_tools: dict[tuple[str, Path], list[McpTool]] = {}
        self._scratch: Path | None = None
        self._list_locks: dict[tuple[str, Path | None], asyncio.Lock] = {}

    @property
    def names(self) -> list[str]:
        return list(self._configs)

    def _config(self, name: str) -> McpServerConfig:
        config = self._configs.get(name)
        if config is None:
            known = ", ".join(self._configs) or "none configured"
            raise ActionRefused("unknown_mcp_server",
                                f"no MCP server named {name!r} on this worker ({known})")
        return config

    def _scratch_dir(self) -> Path:
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="codey-mcp-"))
        return self._scratch

    async def _instance(self, name: str, workdir: Path | None,
                        mode: SandboxMode = "workspace-write") -> _Server:
        """The process for ``name`` in ``workdir`` under ``mode`` (made if needed; the oldest
        idle one of that server is stopped when more than ``max_instances`` would run)."""
        key = (name, workdir, mode)
        server = self._instances.get(key)
        if server is None:
            server = _Server(self._config(name), self._log_dir, workdir, self._scratch_dir(),
                             self._sandbox, mode)
            self._instances[key] = server
            same = [k for k in self._instances if k[0] == name and k != key]
            for old in same[: max(0, len(same) + 1 - self._max_instances)]:
                if self._instances[old].busy == 0:
                    await self._instances.pop(old).stop()
        self._instances.move_to_end(key)
        return server

    async def _drop(self, name: str, workdir: Path | None,
                    mode: SandboxMode = "workspace-write") -> None:
        server = self._instances.pop((name, workdir, mode), None)
        if server is not None:
            await server.stop()

    def _visible(self, name: str, tools: list[McpTool]) -> list[McpTool]:
        if self._policy is None:
            return tools
        return [t for t in tools if not self._policy.mcp_tool_denied(name, t.name)]

    def cached(self) -> list[McpServerInfo]:
        """What is known without starting anything: listed tools, or the last error."""
        return [McpServerInfo(name=name, tools=self._visible(name, self._tools.get(name, [])),
                              error=self._errors.get(name))
                for name in self._configs]

    async def list_tools(self, name: str, workdir: Path | None = None) -> list[McpTool]:
        """The tools of server ``name`` with their input schemas and hints (cached per
        server and workdir).

        ``workdir`` (a checked real path): listed by the server's process for that workdir
        (the ``workspace-write`` one, which a session's calls use by default), started there
        if it is not running and left running for the calls. None: by a process started for
        the purpose in an empty scratch directory, with no roots, and stopped once it has
        answered. Either way the list is what :meth:`cached` (``hello``) reports next.
        """
        self._config(name)
        async with self._list_locks.setdefault((name, workdir), asyncio.Lock()):
            if workdir is not None:
                tools = self._workdir_tools.get((name, workdir))
                if tools is None:
                    tools = self._workdir_tools[name, workdir] = await self._list(name, workdir)
                self._tools[name] = tools
            elif name not in self._tools:
                try:
                    self._tools[name] = await self._list(name, None)
                finally:
                    await self._drop(name, None)
            tools = self._tools[name]
            self._errors.pop(name, None)
        return self._visible(name, tools)

    async def _list(self, name: str, workdir: Path | None) -> list[McpTool]:
        from mcp.shared.exceptions import MCPError

        for attempt in range(2):  # listing is harmless to repeat after a crash
            server = await self._instance(name, workdir)
            session = await server.session()
            try:
                listed = await asyncio.wait_for(session.list_tools(), self._call_timeout_s)
            except MCPError as exc:
                if exc.code == _CONNECTION_CLOSED and attempt == 0:
                    await self._drop(name, workdir)
                    continue
                raise ActionRefused("mcp_error", f"{name}: {exc.message}") from None
            except TimeoutError:
                raise ActionRefused("mcp_unavailable", f"{name}: listing tools timed out") from None
            except (RuntimeError, ValueError) as exc:  # incl. pydantic's ValidationError
                raise ActionRefused("mcp_error", f"{name}: {exc}") from None
            return [_tool(t) for t in listed.tools]
        raise ActionRefused("mcp_unavailable", f"MCP server {name!r} keeps closing")

    async def list_all(self, workdir: Path | None = None) -> list[McpServerInfo]:
        """Every server with its tools, as listed in ``workdir`` (see :meth:`list_tools`); a
        server that fails has ``error`` set instead (and :meth:`cached` reports it)."""

        async def one(name: str) -> McpServerInfo:
            try:
                return McpServerInfo(name=name, tools=await self.list_tools(name, workdir))
            except ActionRefused as exc:
                message = exc.message
                if workdir is None and self._configs[name].url is None \
                        and exc.code == "mcp_unavailable":
                    # hello's list is taken in an empty scratch folder: a server confined to
                    # a repository (mcp-server-git --repository .) cannot start there, and
                    # does in each session's folder
                    message = (f"starts per session: its tools are listed in each session's "
                               f"folder ({message})")
                self._errors[name] = message
                return McpServerInfo(name=name, error=message)
            except Exception as exc:  # one broken MCP server must not take the worker down
                message = f"{name}: {type(exc).__name__}: {exc}"
                self._errors[name] = message
                return McpServerInfo(name=name, error=message)

        return list(await asyncio.gather(*(one(name) for name in self._configs)))

    async def call(self, name: str, tool: str, arguments: dict[str, Any], *,
                   workdir: Path, sandbox: SandboxMode = "workspace-write") -> McpCallResult:
        """Call ``tool`` on server ``name``'s process for ``workdir`` (a checked real path),
        running in the ``sandbox`` mode.

        A tool error is a result with ``is_error=True``.
        """
        self._config(name)
        if self._policy is not None:
            self._policy.check_mcp_tool(name, tool)
        from mcp.shared.exceptions import MCPError

        server = await self._instance(name, workdir, sandbox)
        server.busy += 1
        try:
            session = await server.session()
            result = await asyncio.wait_for(session.call_tool(tool, arguments),
                                            self._call_timeout_s)
        except MCPError as exc:
            if exc.code == _CONNECTION_CLOSED:
                await self._drop(name, workdir, sandbox)
                raise ActionRefused("mcp_unavailable",
                                    f"MCP server {name!r} exited; it will be restarted on the "
                                    "next call") from None
            raise ActionRefused("mcp_error", f"{name}.{tool}: {exc.message}") from None
        except TimeoutError:
            await self._drop(name, workdir, sandbox)
            raise ActionRefused("mcp_unavailable",
                                f"{name}.{tool} did not answer within "
                                f"{self._call_timeout_s:.0f} s; the server was stopped") from None
        except (RuntimeError, ValueError) as exc:  # input-required / claimed results, bad schema
            raise ActionRefused("mcp_error", f"{name}.{tool}: {exc}") from None
        finally:
            server.busy -= 1
        content = [part.model_dump(mode="json", by_alias=True, exclude_none=True)
                   for part in result.content]
        return McpCallResult(content=content, text=_text_of(content),
                             is_error=bool(result.is_error))

    async def close(self) -> None:
        """Stop every server that was started."""
        servers = list(self._instances.values())
        self._instances.clear()
        await asyncio.gather(*(s.stop() for s in servers), return_exceptions=True)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
