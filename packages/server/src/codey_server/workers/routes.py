"""``/api/workers/{worker_id}``: name or revoke a worker; run one action on it directly.
``WS /ws/worker``: a paired worker's socket."""

from __future__ import annotations

import logging
import secrets
import time
import typing
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

import msgspec
from litestar import Response, WebSocket, get, post, websocket
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, FromQuery, JSONBody

from codey_protocol import client as cl
from codey_protocol import worker as wk
from codey_server.core.actions import ActionFailed
from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.core.rules import CommandRejected
from codey_server.http.access import UNPAIRED_WORKER
from codey_server.http.errors import errors
from codey_server.http.resource import Resource
from codey_server.settings import Settings
from codey_server.workers import decide
from codey_server.workers.keys import WorkerKeys
from codey_server.workers.sockets import LogLine, WorkerRegistry, serve_worker

log = logging.getLogger("codey.http")

__all__ = ["ActionDone", "ActionNotDone", "ActionRequest", "NameBody", "Named", "Progress",
           "Revoked", "WorkersController", "worker_socket"]

#: streamed output repeated in a response, at most (the result keeps head and tail anyway)
_PROGRESS_CAP = 256 * 1024


def _ids_optional(action: type[wk.Action]) -> type[wk.Action]:
    """``action`` as a request body: the same frame, ``action_id`` and ``session_id`` optional
    (empty: filled in). Derived, so a field added to the protocol's action is here too."""
    return typing.cast(type[wk.Action], msgspec.defstruct(
        f"{action.__name__}Request", [("action_id", str, ""), ("session_id", str, "")],
        bases=(action,), tag=action.__struct_config__.tag, tag_field="type", kw_only=True))


_REQUESTS = {_ids_optional(a): a for a in typing.get_args(wk.ActionMessage)}
if TYPE_CHECKING:
    ActionRequest: TypeAlias = wk.ActionMessage
else:
    #: ``POST /api/workers/{id}/actions`` body: any action frame (``type`` picks which)
    ActionRequest = typing.Union[tuple(_REQUESTS)]  # noqa: UP007 (built at run time)


class Revoked(msgspec.Struct, kw_only=True):
    revoked: str  # the worker id


class NameBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    #: "" gives the machine back its hostname as its name
    name: Annotated[str, msgspec.Meta(
        max_length=4 * decide.MAX_WORKER_NAME,
        description=f"At most {decide.MAX_WORKER_NAME} characters once runs of white space "
                    "are one space; no control or invisible formatting characters; \"\" "
                    "(or the hostname) gives it back its hostname.")]


class Named(msgspec.Struct, kw_only=True):
    worker_id: str
    name: str  # "" when it goes by its hostname
    seq: int | None  # None: it had that name already


class Progress(msgspec.Struct, kw_only=True):
    stream: str  # "stdout" or "stderr"
    data: JSONBody[str]


class ActionDone(msgspec.Struct, kw_only=True):
    ok: Literal[True]
    action_id: str
    result: wk.ActionOutcome
    progress: list[Progress]  # streamed output, up to 256 KiB


class ActionNotDone(msgspec.Struct, kw_only=True):
    ok: Literal[False]
    action_id: str
    code: str  # the worker's action_errored code, or "timeout"
    message: str


_TIMEOUT = ResponseSpec(ActionNotDone, generate_examples=False,
                        description="No outcome within `timeout` seconds (`code`: `timeout`).")


class WorkersController(Resource):
    path = "/api/workers/{worker_id:str}"
    tags = ["workers"]

    @post("/revoke", status_code=200, responses=errors(404))
    async def revoke(self, worker_id: FromPath[str], keys: NamedDependency[WorkerKeys],
                     engine: NamedDependency[Engine]) -> Revoked:
        """Forget the worker's key, close its socket (4403) and fail its waiting actions."""
        info = engine.state.workers.get(worker_id)
        if info is None:
            raise NotFoundException(f"no worker {worker_id!r}")
        if not info.revoked:
            # the key goes first, where every replica checks it: once this answers, no
            # handshake anywhere accepts the worker's credential
            await keys.remove(worker_id)
            # every server's registry, on folding it, closes the socket and fails the waits
            await engine.submit(decide.revoked, worker_id)
        return Revoked(revoked=worker_id)

    @post("/name", status_code=200, responses=errors(400, 404))
    async def rename(self, worker_id: FromPath[str], data: JSONBody[NameBody],
                     engine: NamedDependency[Engine]) -> Named:
        """Name the machine, as the pickers and its card show it (the browser's
        ``rename_worker`` command)."""
        envs = await engine.execute(cl.RenameWorker(worker_id=worker_id, name=data.name))
        return Named(worker_id=worker_id, name=engine.state.workers[worker_id].name,
                     seq=envs[-1].seq if envs else None)

    @get("/log", sync_to_thread=False, responses=errors(404))
    def worker_log(self, worker_id: FromPath[str], engine: NamedDependency[Engine],
                   workers: NamedDependency[WorkerRegistry]) -> list[LogLine]:
        """The last lines the worker printed (at most 50, oldest first), since this server
        started."""
        if worker_id not in engine.state.workers:
            raise NotFoundException(f"no worker {worker_id!r}")
        return list(workers.log_lines.get(worker_id, ()))

    @post("/actions", status_code=200, responses={504: _TIMEOUT, **errors(400, 404)})
    async def run_action(self, worker_id: FromPath[str], data: JSONBody[ActionRequest],
                         settings: NamedDependency[Settings], engine: NamedDependency[Engine],
                         actions: NamedDependency[Delivery],
                         timeout: FromQuery[float] = 60.0,
                         ) -> Response[ActionDone | ActionNotDone]:
        """Run one action on the worker directly: the owner's own call, without the approval
        gate (the worker's local policy still applies). A refusal by the worker is
        ``{"ok": false, "code", "message"}``; the ``server-timing`` header gives the
        server → worker → server time.

        Off (403) unless the server runs with ``--direct-actions``: such an action needs no
        approval and leaves no event in the log, so it is for benchmarks and tests only. Each
        one is written to the server's log."""
        if not settings.direct_actions:
            raise CommandRejected("forbidden", "direct actions are off: they bypass approvals "
                                               "and the event log; start the server with "
                                               "--direct-actions to allow them (benchmarks, "
                                               "tests)")
        info = engine.state.workers.get(worker_id)
        if info is None or info.revoked:
            raise NotFoundException(f"no worker {worker_id!r}")
        fields = msgspec.structs.asdict(data)
        fields["action_id"] = data.action_id or f"act_{secrets.token_hex(8)}"
        action = typing.cast(wk.ActionMessage, _REQUESTS[type(data)](**fields))
        progress: list[Progress] = []
        kept = 0
        log.info("direct action %s %s on %s (no approval, not in the event log)",
                 type(action).__name__, action.action_id, worker_id)

        async def on_progress(p: wk.ActionProgress) -> None:
            # the response repeats streamed output only up to a cap; the result has head and
            # tail
            nonlocal kept
            if kept < _PROGRESS_CAP:
                chunk = p.data[: _PROGRESS_CAP - kept]
                kept += len(chunk)
                progress.append(Progress(stream=p.stream, data=chunk))

        started = time.perf_counter()
        try:
            outcome = await actions.run(worker_id, action, on_progress=on_progress,
                                        timeout=timeout)
        except ActionFailed as err:
            return Response(ActionNotDone(ok=False, action_id=action.action_id, code=err.code,
                                          message=err.message))
        except TimeoutError:
            return Response(ActionNotDone(ok=False, action_id=action.action_id, code="timeout",
                                          message=f"no outcome within {timeout} s"),
                            status_code=504)
        # server → worker → server, without this request's own HTTP overhead
        elapsed_ms = (time.perf_counter() - started) * 1000
        return Response(ActionDone(ok=True, action_id=action.action_id, result=outcome,
                                   progress=progress),
                        headers={"server-timing": f"action;dur={elapsed_ms:.3f}"})


# no login: a worker proves itself by signing the server's challenge
@websocket("/ws/worker", opt=UNPAIRED_WORKER)
async def worker_socket(socket: WebSocket[Any, Any, Any], workers: NamedDependency[WorkerRegistry],
                        settings: NamedDependency[Settings]) -> None:
    """A paired worker: the signed handshake, hello, then actions down and events up."""
    await socket.accept()
    await serve_worker(socket, workers,
                       silence_s=settings.worker_silence_s)
