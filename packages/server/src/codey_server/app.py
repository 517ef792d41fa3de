"""``create_app(settings)``: the Litestar application and its services.

Services live on ``app.state`` for the app's lifetime (started and stopped in the lifespan) and
reach handlers through dependency injection — no module-level mutable state.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, WebSocket, get, post, websocket
from litestar.di import Provide
from litestar.exceptions import HTTPException, NotFoundException
from litestar.response import Redirect, Stream
from litestar.static_files import create_static_files_router
from litestar.status_codes import HTTP_400_BAD_REQUEST

from codey_protocol import ProtocolError, codec
from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.access import BrowserAccess, access_middleware, access_routes, browser_session
from codey_server.agent.service import AgentService
from codey_server.auth import AuthService, auth_routes
from codey_server.clients import ClientHub, serve_client
from codey_server.decide import CommandRejected, Context
from codey_server.engine import Engine
from codey_server.eventlog import SqliteEventLog
from codey_server.pairing import KeyStore, Pairing, PairingError
from codey_server.secretfile import ensure_private_dir
from codey_server.settings import Settings
from codey_server.workers import CLOSE_REVOKED, ActionFailed, WorkerRegistry, serve_worker

log = logging.getLogger("codey.app")

__all__ = ["Services", "create_app"]

_STATUS_FOR_CODE = {"not_found": 404, "conflict": 409, "forbidden": 403, "bad_request": 400}


class Services:
    """Everything the handlers need, built from settings and started in the lifespan."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # the event log holds prompts, command output and file contents
        ensure_private_dir(settings.data_dir)
        default = settings.default_provider or (
            settings.providers[0].name if settings.providers else "default")
        context = Context(
            default_provider=default,
            default_models={p.name: (p.default_model or (p.models[0] if p.models else ""))
                            for p in settings.providers},
        )
        self.engine = Engine(SqliteEventLog(settings.db_path),
                             snapshot_every=settings.snapshot_every, context=context)
        self.clients = ClientHub()
        self.keys = KeyStore(settings.data_dir / "workers.json")
        self.pairing = Pairing(self.engine, self.keys)
        self.workers = WorkerRegistry(self.engine, self.keys)
        self.access = BrowserAccess(settings)
        self.auth = AuthService(settings, self.engine)
        self.agent = AgentService(self.engine, self.workers, settings, self.token_for)

    async def token_for(self, provider: str) -> str | None:
        """The bearer for a model provider: from the login service, else its env variable."""
        auth = getattr(self, "auth", None)
        if auth is not None:
            token: str | None = await auth.token_for(provider)
            return token
        config = next((p for p in self.settings.providers if p.name == provider), None)
        if config is not None and config.api_key_env:
            return os.environ.get(config.api_key_env) or None
        return None

    async def start(self) -> None:
        await self.engine.start()
        # no worker socket survives a restart: whoever was connected comes back through Hello
        stale = [w for w in self.engine.state.workers.values() if w.connected]
        if stale:
            await self.engine.append([(None, ev.WorkerDisconnected(
                worker_id=w.worker_id, reason="server restarted")) for w in stale])
        await self.pairing.start()
        await self.auth.start()
        await self.agent.start()

    async def stop(self) -> None:
        self.clients.begin_shutdown()
        await self.agent.stop()
        await self.auth.stop()
        await self.engine.stop()


def _services(request: Request[Any, Any, Any]) -> Services:
    services: Services = request.app.state.services
    return services


def _ws_services(socket: WebSocket[Any, Any, Any]) -> Services:
    services: Services = socket.app.state.services
    return services


def _json(value: Any, status_code: int = 200) -> Response[bytes]:
    return Response(content=codec.encode(value), media_type="application/json",
                    status_code=status_code)


def _rejected(err: CommandRejected) -> HTTPException:
    return HTTPException(status_code=_STATUS_FOR_CODE.get(err.code, 400), detail=err.message)


async def _body(request: Request[Any, Any, Any]) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as err:
        raise HTTPException(status_code=HTTP_400_BAD_REQUEST, detail=f"not JSON: {err}") from None
    except RecursionError:  # msgspec's answer to absurdly deep nesting
        raise HTTPException(status_code=HTTP_400_BAD_REQUEST,
                            detail="not JSON: nested too deeply") from None
    if not isinstance(body, dict):
        raise HTTPException(status_code=HTTP_400_BAD_REQUEST, detail="expected a JSON object")
    return body


async def _execute(services: Services, command: cl.ClientToServer) -> list[Any]:
    try:
        return await services.engine.execute(command)
    except CommandRejected as err:
        raise _rejected(err) from None


def _command(type_: type[Any], body: dict[str, Any]) -> Any:
    body = {k: v for k, v in body.items() if k != "type"}
    try:
        return codec.convert(body, type_)
    except ProtocolError as err:
        raise HTTPException(status_code=HTTP_400_BAD_REQUEST, detail=err.message) from None


# ---------------------------------------------------------------------------------------------
# HTTP API


@get("/api/health", sync_to_thread=False)
def health(services: Services) -> dict[str, Any]:
    return {"status": "ok", "seq": services.engine.state.seq}


@get("/api/state/bootstrap")
async def bootstrap(services: Services) -> Response[bytes]:
    state = services.engine.state
    return _json({"seq": state.seq, "state": state})


@get("/api/config", sync_to_thread=False)
def config(services: Services) -> dict[str, Any]:
    s = services.settings
    return {
        "default_provider": services.engine.context.default_provider,
        "providers": [
            # the provider's list: Ollama's is discovered at start-up
            {"name": p.name, "kind": p.kind, "models": services.agent.providers[p.name].models,
             "default_model": services.engine.context.default_models.get(p.name, ""),
             "auth": p.auth}
            for p in s.providers
        ],
    }


@get("/api/sessions", sync_to_thread=False)
def list_sessions(services: Services) -> list[dict[str, Any]]:
    return [
        {"session_id": s.session_id, "title": s.title, "worker_id": s.worker_id,
         "workdir": s.workdir, "provider": s.provider, "model": s.model, "policy": s.policy,
         "status": s.status, "created_at": s.created_at, "updated_at": s.updated_at,
         "items": len(s.items)}
        for s in services.engine.state.sessions.values()
    ]


@post("/api/sessions")
async def create_session(request: Request[Any, Any, Any], services: Services) -> Response[bytes]:
    command = _command(cl.CreateSession, await _body(request))
    envs = await _execute(services, command)
    return _json({"session_id": envs[0].session_id, "seq": envs[-1].seq}, status_code=201)


@get("/api/sessions/{session_id:str}")
async def get_session(session_id: str, services: Services) -> Response[bytes]:
    s = services.engine.state.sessions.get(session_id)
    if s is None:
        raise NotFoundException(f"no session {session_id!r}")
    return _json(s)


@post("/api/sessions/{session_id:str}/prompt")
async def send_prompt(session_id: str, request: Request[Any, Any, Any],
                      services: Services) -> Response[bytes]:
    body = await _body(request)
    command = _command(cl.SendPrompt, {**body, "session_id": session_id})
    envs = await _execute(services, command)
    return _json({"seq": envs[-1].seq}, status_code=202)


@post("/api/sessions/{session_id:str}/approvals/{approval_id:str}")
async def decide_approval(session_id: str, approval_id: str, request: Request[Any, Any, Any],
                          services: Services) -> Response[bytes]:
    body = await _body(request)
    command = _command(cl.DecideApproval,
                       {**body, "session_id": session_id, "approval_id": approval_id})
    envs = await _execute(services, command)
    return _json({"seq": envs[-1].seq})


@post("/api/sessions/{session_id:str}/policy")
async def set_policy(session_id: str, request: Request[Any, Any, Any],
                     services: Services) -> Response[bytes]:
    body = await _body(request)
    command = _command(cl.SetApprovalPolicy, {**body, "session_id": session_id})
    envs = await _execute(services, command)
    return _json({"seq": envs[-1].seq if envs else services.engine.state.seq})


@post("/api/sessions/{session_id:str}/interrupt")
async def interrupt(session_id: str, services: Services) -> Response[bytes]:
    envs = await _execute(services, cl.Interrupt(session_id=session_id))
    return _json({"seq": envs[-1].seq if envs else services.engine.state.seq})


@get("/api/sessions/{session_id:str}/log")
async def session_log(session_id: str, services: Services) -> Stream:
    if session_id not in services.engine.state.sessions:
        raise NotFoundException(f"no session {session_id!r}")
    envs = await services.engine.log.read_session(session_id)

    async def lines() -> AsyncIterator[bytes]:
        for env in envs:
            yield codec.encode(env) + b"\n"

    return Stream(lines(), media_type="application/x-ndjson", headers={
        "content-disposition": f'attachment; filename="{session_id}.ndjson"'})


# ---------------------------------------------------------------------------------------------
# pairing and workers

_PAIRING_STATUS = {"not_found": 404, "wrong_code": 400, "locked": 423, "expired": 410,
                   "too_many": 429, "bad_request": 400}


def _pairing_error(err: PairingError) -> HTTPException:
    return HTTPException(status_code=_PAIRING_STATUS.get(err.code, 400), detail=err.message,
                         extra={"code": err.code})


#: a pair request is unauthenticated: refuse a body beyond what its largest allowed fields
#: (32 roots of 4096 characters, see pairing.py) need, before reading it
PAIR_REQUEST_MAX_BYTES = 256 * 1024


@post("/api/pairing/requests", request_max_body_size=PAIR_REQUEST_MAX_BYTES)
async def pair_request(request: Request[Any, Any, Any], services: Services) -> Response[bytes]:
    """Called by an unpaired worker (it has no credentials yet)."""
    try:
        req = codec.convert(await _body(request), wk.PairRequest)
        source = request.client.host if request.client else ""
        ticket = await services.pairing.request(req, source)
    except ProtocolError as err:
        raise HTTPException(status_code=HTTP_400_BAD_REQUEST, detail=err.message) from None
    except PairingError as err:
        raise _pairing_error(err) from None
    return _json(ticket, status_code=201)


@get("/api/pairing/requests/{request_id:str}/wait")
async def pair_wait(request_id: str, secret: str, services: Services,
                    timeout: float = 25.0) -> Response[bytes]:
    try:
        status = await services.pairing.wait(request_id, secret, min(max(timeout, 0.0), 60.0))
    except PairingError as err:
        raise _pairing_error(err) from None
    return _json(status)


@get("/api/pairing/requests", sync_to_thread=False)
def pair_list(services: Services) -> list[dict[str, Any]]:
    return services.pairing.pending()


@get("/api/pairing/code/{code:str}", sync_to_thread=False)
def pair_by_code(code: str, services: Services) -> dict[str, Any]:
    try:
        return services.pairing.by_code(code)
    except PairingError as err:
        raise _pairing_error(err) from None


@post("/api/pairing/requests/{request_id:str}/approve")
async def pair_approve(request_id: str, request: Request[Any, Any, Any],
                       services: Services) -> Response[bytes]:
    code = (await _body(request)).get("code")
    if not isinstance(code, str):
        raise HTTPException(status_code=HTTP_400_BAD_REQUEST, detail="code is required")
    try:
        worker_id = await services.pairing.approve(request_id, code)
    except PairingError as err:
        raise _pairing_error(err) from None
    return _json({"worker_id": worker_id})


@post("/api/pairing/requests/{request_id:str}/deny")
async def pair_deny(request_id: str, services: Services) -> Response[bytes]:
    try:
        await services.pairing.deny(request_id)
    except PairingError as err:
        raise _pairing_error(err) from None
    return _json({"denied": request_id})


@post("/api/workers/{worker_id:str}/revoke")
async def revoke_worker(worker_id: str, services: Services) -> Response[bytes]:
    info = services.engine.state.workers.get(worker_id)
    if info is None:
        raise NotFoundException(f"no worker {worker_id!r}")
    if not info.revoked:
        services.keys.remove(worker_id)
        await services.engine.append([(None, ev.WorkerRevoked(worker_id=worker_id))])
    await services.workers.close_worker(worker_id, CLOSE_REVOKED, "this worker was revoked")
    services.workers.fail_all(worker_id, "revoked", "the worker was revoked; it will not answer")
    return _json({"revoked": worker_id})


_PROGRESS_CAP = 256 * 1024


@post("/api/workers/{worker_id:str}/actions")
async def run_action(worker_id: str, request: Request[Any, Any, Any], services: Services,
                     timeout: float = 60.0) -> Response[bytes]:
    """Run one action on a worker directly (the owner's own call; no approval gate).

    Body: an action frame (``{"type": "read_file", "workdir": ..., "path": ...}``);
    ``action_id`` and ``session_id`` are filled in when missing.
    """
    info = services.engine.state.workers.get(worker_id)
    if info is None or info.revoked:
        raise NotFoundException(f"no worker {worker_id!r}")
    body = await _body(request)
    body.setdefault("action_id", f"act_{secrets.token_hex(8)}")
    body.setdefault("session_id", "")
    try:
        action = codec.decode_action(msgspec.json.encode(body))
    except ProtocolError as err:
        raise HTTPException(status_code=HTTP_400_BAD_REQUEST, detail=err.message) from None
    progress: list[dict[str, str]] = []
    kept = 0

    async def on_progress(p: wk.ActionProgress) -> None:
        # the response repeats streamed output only up to a cap; the result has head and tail
        nonlocal kept
        if kept < _PROGRESS_CAP:
            data = p.data[: _PROGRESS_CAP - kept]
            kept += len(data)
            progress.append({"stream": p.stream, "data": data})

    started = time.perf_counter()
    try:
        outcome = await services.workers.run(worker_id, action, on_progress=on_progress,
                                             timeout=timeout)
    except ActionFailed as err:
        return _json({"ok": False, "action_id": action.action_id, "code": err.code,
                      "message": err.message})
    except TimeoutError:
        return _json({"ok": False, "action_id": action.action_id, "code": "timeout",
                      "message": f"no outcome within {timeout} s"}, status_code=504)
    response = _json({"ok": True, "action_id": action.action_id, "result": outcome,
                      "progress": progress})
    # server → worker → server, without this request's own HTTP overhead
    elapsed_ms = (time.perf_counter() - started) * 1000
    response.headers["server-timing"] = f"action;dur={elapsed_ms:.3f}"
    return response


# ---------------------------------------------------------------------------------------------
# WebSockets


@websocket("/ws/client")
async def client_socket(socket: WebSocket[Any, Any, Any]) -> None:
    services = _ws_services(socket)
    await socket.accept()
    await serve_client(socket, services.engine, services.clients,
                       batch=services.settings.catchup_batch,
                       queue_max=services.settings.client_queue_max,
                       session_key=browser_session(socket))


@websocket("/ws/worker")
async def worker_socket(socket: WebSocket[Any, Any, Any]) -> None:
    services = _ws_services(socket)
    await socket.accept()
    await serve_worker(socket, services.workers)


# ---------------------------------------------------------------------------------------------


def _web_dir(settings: Settings) -> Path:
    if settings.web_dir is not None:
        return settings.web_dir
    packaged = Path(__file__).parent / "web"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[4] / "web"


def create_app(settings: Settings) -> Litestar:
    """Build the app. Services start in the lifespan, so creating an app does no I/O."""
    services = Services(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        app.state.services = services
        await services.start()
        try:
            yield
        finally:
            await services.stop()

    @get("/favicon.ico", sync_to_thread=False, include_in_schema=False)
    def favicon() -> Redirect:
        return Redirect("/icon.svg")

    web = _web_dir(settings)
    return Litestar(
        route_handlers=[
            health, bootstrap, config, list_sessions, create_session, get_session, send_prompt,
            decide_approval, set_policy, interrupt, session_log, client_socket, favicon,
            pair_request, pair_wait, pair_list, pair_by_code, pair_approve, pair_deny,
            revoke_worker, run_action, worker_socket, *access_routes, *auth_routes,
            create_static_files_router(path="/", directories=[web], html_mode=True,
                                       include_in_schema=False),
        ],
        dependencies={"services": Provide(_services, sync_to_thread=False)},
        middleware=[access_middleware(services.access)],
        lifespan=[lifespan],
        debug=False,
        # Litestar's default config would replace the root handlers (and their secret-masking
        # filter, see logsetup.py) and reset the level; the CLI owns logging
        logging_config=None,
    )
