"""Pairing an unlinked machine with a server, over plain HTTP (stdlib ``urllib``).

Order (:func:`pair`)::

    generate an Ed25519 key (once)
    loop:
        POST {server}/api/pairing/requests   PairRequest        -> 201 PairTicket
        print "Open {server}/#/pair/{code} to link this machine"
        loop: GET .../requests/{id}/wait?secret=…&timeout=25  -> PairStatus
            pending  -> ask again          (connection errors: retry with backoff)
            approved -> return Identity    (the caller saves worker.json)
            expired  -> say so, next code with the same key
            denied / locked -> PairingRefused

The worker never reads the terminal: the user confirms the code in the browser.

The key helpers (:func:`generate_key`, :func:`sign`, :func:`public_key_b64`) live in
:mod:`codey_worker.keys` and are re-exported here.
"""

from __future__ import annotations

import json
import platform
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_exception, wait_random_exponential

from codey_protocol import codec
from codey_protocol.worker import PairRequest, PairStatus, PairTicket
from codey_worker.config import Identity
from codey_worker.console import WorkerConsole
from codey_worker.errors import WorkerError
from codey_worker.keys import b64url, b64url_decode, generate_key, public_key_b64, sign

__all__ = [
    "PairingError",
    "PairingRefused",
    "b64url",
    "b64url_decode",
    "generate_key",
    "machine_info",
    "pair",
    "public_key_b64",
    "sign",
    "worker_version",
]

WAIT_TIMEOUT_S = 25
_HTTP_SLACK_S = 15  # the long poll may take WAIT_TIMEOUT_S; the socket waits a little longer
_BACKOFF_MAX_S = 30.0
#: the wait before asking the server again (tenacity): full jitter (anywhere up to a ceiling
#: of 0.5 s doubling to :data:`_BACKOFF_MAX_S`)
PAIRING_WAIT = wait_random_exponential(multiplier=0.5, max=_BACKOFF_MAX_S)


class PairingError(WorkerError):
    """The server answered pairing with something unusable (a 4xx, a malformed body)."""


class PairingRefused(PairingError):
    """The user denied the request, or the code was locked after too many wrong tries."""

    def __init__(self, status: str) -> None:
        super().__init__(f"pairing {status}")
        self.status = status


# ---------------------------------------------------------------------------------------------
# machine facts


def worker_version() -> str:
    from codey_protocol.version import __version__

    return __version__


def machine_info() -> dict[str, str]:
    """hostname, os, python_version and worker_version, as sent in PairRequest and Hello."""
    return {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}".strip(),
        "python_version": platform.python_version(),
        "worker_version": worker_version(),
    }


# ---------------------------------------------------------------------------------------------
# HTTP


class _HttpError(WorkerError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


def _request(method: str, url: str, body: bytes | None, timeout: float) -> Any:
    """One JSON request; returns the parsed body. Raises _HttpError for a non-2xx answer and
    OSError (URLError included) when the server cannot be reached."""
    req = urllib.request.Request(url, data=body, method=method)
    req.add_header("Accept", "application/json")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace")
        raise _HttpError(exc.code, text) from None


Sleep = Callable[[float], None]


def _unanswered(exc: BaseException) -> bool:
    """The server could not be reached, or failed (5xx): ask again. A 4xx is an answer."""
    if isinstance(exc, _HttpError):
        return exc.status >= 500
    return isinstance(exc, (OSError, json.JSONDecodeError))


def _with_retries(call: Callable[[], Any], console: WorkerConsole, what: str,
                  sleep: Sleep) -> Any:
    """Run ``call`` until the server answers; connection errors and 5xx retry with backoff
    (:data:`PAIRING_WAIT`), each said on the console with its delay before it waits."""

    def say(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _HttpError):
            reason = f"{what}: server error {exc.status}"
        else:
            reason = f"{what}: {getattr(exc, 'reason', None) or exc}"
        console.reconnecting(state.upcoming_sleep, reason)

    retrying = Retrying(wait=PAIRING_WAIT, retry=retry_if_exception(_unanswered),
                        before_sleep=say, sleep=sleep, reraise=True)
    return retrying(call)


def _ticket(server: str, request: PairRequest, console: WorkerConsole,
            sleep: Sleep) -> PairTicket:
    url = f"{server}/api/pairing/requests"
    body = codec.encode(request)
    try:
        data = _with_retries(lambda: _request("POST", url, body, 30), console, "pairing", sleep)
    except _HttpError as exc:
        raise PairingError(f"the server refused the pairing request: {exc}") from None
    try:
        return codec.convert(data, PairTicket)
    except ValueError as exc:
        raise PairingError(f"unexpected pairing answer from the server: {exc}") from None


def _wait(server: str, ticket: PairTicket, console: WorkerConsole, sleep: Sleep) -> PairStatus:
    query = urllib.parse.urlencode({"secret": ticket.poll_secret, "timeout": WAIT_TIMEOUT_S})
    rid = urllib.parse.quote(ticket.request_id, safe="")
    url = f"{server}/api/pairing/requests/{rid}/wait?{query}"
    while True:
        try:
            data = _with_retries(
                lambda: _request("GET", url, None, WAIT_TIMEOUT_S + _HTTP_SLACK_S),
                console, "waiting for approval", sleep)
        except _HttpError as exc:
            if exc.status in (404, 410):  # the server forgot the request: start over
                return PairStatus(status="expired")
            raise PairingError(f"the server refused to report the pairing status: {exc}") from None
        try:
            status = codec.convert(data, PairStatus)
        except ValueError as exc:
            raise PairingError(f"unexpected pairing status from the server: {exc}") from None
        if status.status != "pending":
            return status


def pair(server: str, roots: list[str], console: WorkerConsole, *,
         private_key: str | None = None, sleep: Sleep = time.sleep) -> Identity:
    """Pair this machine with ``server`` and return its new identity (not yet saved).

    Blocks until the user approves in the browser. Raises PairingRefused (denied or locked)
    and PairingError (the server's answers make no sense); never reads stdin.
    """
    key = private_key or generate_key()
    info = machine_info()
    request = PairRequest(public_key=public_key_b64(key), roots=roots, **info)
    while True:
        ticket = _ticket(server, request, console, sleep)
        console.pair_url(server, ticket.code)
        status = _wait(server, ticket, console, sleep)
        if status.status == "approved":
            if not status.worker_id or not status.credential:
                raise PairingError("the server approved pairing without a worker id or credential")
            return Identity(worker_id=status.worker_id, server=server, private_key=key,
                            credential=status.credential)
        if status.status == "expired":
            console.code_expired()
            continue
        raise PairingRefused(status.status)

