"""``/api/pairing``: an unpaired worker asks for a code; the browser approves or denies it.

The worker's two calls (the request and its long poll) need no login: they are marked
``UNPAIRED_WORKER`` (see :mod:`codey_server.http.access`). A refused step (``PairingError``) is
answered by :mod:`codey_server.http.errors` (``wrong_code`` 403, ``not_found`` 404,
``expired`` 410, ``locked`` 423, ``too_many`` 429).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody

from codey_protocol.worker import PairRequest, PairStatus, PairTicket
from codey_server.http.access import UNPAIRED_WORKER
from codey_server.http.errors import errors
from codey_server.http.fields import NOT_BLANK, pattern
from codey_server.http.resource import Resource
from codey_server.workers.downloads import find_uv
from codey_server.workers.pairing import (
    MAX_NAME_CHARS,
    MAX_ROOT_CHARS,
    MAX_ROOTS,
    MAX_VERSION_CHARS,
    Pairing,
    PendingPairRequest,
)

__all__ = ["PAIR_REQUEST_MAX_BYTES", "Approved", "Denied", "LocalTools", "PairApproval",
           "PairRequestBody", "PairingController"]

#: a pair request is unauthenticated: refuse a body beyond what its largest allowed fields
#: (32 roots of 4096 characters, see pairing.py) need, before reading it
PAIR_REQUEST_MAX_BYTES = 256 * 1024


_Name = Annotated[str, msgspec.Meta(pattern=NOT_BLANK, max_length=MAX_NAME_CHARS)]
_Version = Annotated[str, msgspec.Meta(max_length=MAX_VERSION_CHARS)]
_Root = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ROOT_CHARS)]


class PairRequestBody(PairRequest, kw_only=True, forbid_unknown_fields=True):
    """The protocol's :class:`PairRequest` with its bounds in its types, so the document says
    them (``pairing.py`` checks them again, with the key itself)."""

    public_key: Annotated[str, msgspec.Meta(
        pattern=pattern("^[A-Za-z0-9_-]{43}=?$",
                        "public_key must be a raw Ed25519 key, base64url"),
        description="A raw Ed25519 public key (32 bytes), base64url.")]
    hostname: _Name
    os: _Name
    python_version: _Version
    worker_version: _Version
    roots: Annotated[list[_Root], msgspec.Meta(max_length=MAX_ROOTS)]


class PairApproval(msgspec.Struct, kw_only=True):
    """``POST /api/pairing/requests/{id}/approve``: the code the user compared."""

    code: str


class Approved(msgspec.Struct, kw_only=True):
    worker_id: str


class Denied(msgspec.Struct, kw_only=True):
    denied: str  # the request id


class LocalTools(msgspec.Struct, kw_only=True):
    """Where the tools the Link dialog's command needs are on the server's own machine."""

    #: uv by its absolute path (None: not found). ``./scripts/serve`` installs it into
    #: ``~/.local/bin``, which a new terminal often lacks on its PATH, so a bare ``uvx`` there
    #: is "command not found"; the absolute path works in any terminal of this machine.
    uv: str | None


class PairingController(Resource):
    path = "/api/pairing"
    tags = ["pairing"]

    @post("/requests", status_code=201, opt=UNPAIRED_WORKER,
          request_max_body_size=PAIR_REQUEST_MAX_BYTES,
          responses=errors(400, 403, 413, 429, login=False))
    async def request_pairing(self, request: Request[Any, Any, Any],
                              data: JSONBody[PairRequestBody],
                              pairing: NamedDependency[Pairing]) -> PairTicket:
        """Called by an unpaired worker (it has no credential yet): show ``code`` to the user
        and long-poll ``wait`` with ``poll_secret``."""
        # behind a trusted proxy, the client's address (http/clientaddr.py), not the proxy's:
        # else one worker's retries through the proxy use up everyone's budget
        source = request.client.host if request.client else ""
        return await pairing.request(data, source)

    @get("/requests/{request_id:str}/wait", opt=UNPAIRED_WORKER,
         responses=errors(400, 403, 404, login=False))
    async def wait(self, request_id: FromPath[str], secret: FromQuery[str],
                   pairing: NamedDependency[Pairing],
                   timeout: FromQuery[float] = 25.0) -> PairStatus:
        """The worker's long poll (at most 60 s): ``pending`` until the user decides; the
        credential of an ``approved`` request is delivered once."""
        return await pairing.wait(request_id, secret, min(max(timeout, 0.0), 60.0))

    @get("/requests", responses=errors())
    async def pending(self, pairing: NamedDependency[Pairing]) -> list[PendingPairRequest]:
        """The pending requests, for the browser to show (whichever replica the worker
        asked)."""
        return await pairing.pending()

    @get("/local-tools", sync_to_thread=False, responses=errors())
    def local_tools(self) -> LocalTools:
        """Where uv is on the server's machine, for a Link command that works in a new
        terminal there (a browser with a login only: it names paths of the machine)."""
        return LocalTools(uv=find_uv())

    @get("/code/{code:str}", responses=errors(404))
    async def by_code(self, code: FromPath[str],
                      pairing: NamedDependency[Pairing]) -> PendingPairRequest:
        """The pending request with this code (dash and case ignored)."""
        return await pairing.by_code(code)

    @post("/requests/{request_id:str}/approve", status_code=200,
          responses=errors(400, 404, 410, 423))
    async def approve(self, request_id: FromPath[str], data: JSONBody[PairApproval],
                      pairing: NamedDependency[Pairing]) -> Approved:
        """Pair the worker, if ``code`` is the request's code (the 5th wrong one locks it)."""
        return Approved(worker_id=await pairing.approve(request_id, data.code))

    @post("/requests/{request_id:str}/deny", status_code=200, responses=errors(404, 410, 423))
    async def deny(self, request_id: FromPath[str], pairing: NamedDependency[Pairing]) -> Denied:
        """Refuse the request; the waiting worker is told."""
        await pairing.deny(request_id)
        return Denied(denied=request_id)
