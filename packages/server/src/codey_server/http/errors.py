"""Errors as HTTP answers: one map from the error hierarchy to statuses, one error body.

Every error a handler lets escape is answered here (:data:`exception_handlers`):

- a :class:`~codey_server.errors.ServerError` carrying a ``code`` (``CommandRejected``,
  ``PairingError``, ``AuthError``, ``OAuthFailed``) gets the status of that code in
  :data:`STATUS_OF_CODE`; a code not listed there is an identity provider's own refusal for
  the login errors (502) and a bad request for the others (400). ``LogClosed`` (the server is
  stopping) is 503; any other ``ServerError`` is a bug of ours, 500.
- Litestar's ``ValidationException`` (a body or parameter that does not fit its type) is 400
  with msgspec's own words in ``detail``, or those of the pattern that failed
  (:mod:`.fields`).
- Anything else is a 500, logged with its traceback (Litestar logs nothing: the CLI owns
  logging). One exception: Litestar calls a body field that does not fit its type a failed
  dependency (a 500) when the field has the name of one of the server's parts (``agent`` of
  ``POST /api/sessions``, the ``agent`` service): that is answered as the 400 it is.

The body is always :class:`ErrorBody`: ``{"status_code", "detail", "extra"}``, where ``extra``
is ``{"code": ...}`` for a coded error. Handlers document theirs with :func:`errors`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import (
    InternalServerException,
    SerializationException,
    ValidationException,
)
from litestar.openapi.datastructures import ResponseSpec
from litestar.types import ExceptionHandlersMap

from codey_server.errors import LogClosed, ServerError
from codey_server.http.fields import words_for

log = logging.getLogger("codey.http")

__all__ = ["STATUS_OF_CODE", "ErrorBody", "JSONRequest", "errors", "exception_handlers",
           "status_of", "strict_body"]

#: the HTTP status of every error code a ServerError carries (decide.py, pairing.py, auth/)
STATUS_OF_CODE: Mapping[str, int] = {
    "bad_request": 400,
    "bad_state": 400,
    # a well-formed request refused by what the server holds: the provider lacks what was
    # asked (no device flow, no usable client auth method), or this server's config does (no
    # client secret in the environment)
    "unsupported": 409,
    "not_configured": 409,
    # a pairing code that is not the request's: the proof failed
    "wrong_code": 403,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "expired": 410,
    "too_large": 413,
    "locked": 423,
    "too_many": 429,
    # a git operation the worker would not do to a session's worktree (workspaces/): what
    # the repository holds stands in the way
    "dirty": 409,
    "unmerged": 409,
    "no_remote": 409,
    "gh_missing": 409,
    "gh_not_logged_in": 409,
    "git_failed": 409,
    "not_a_repository": 409,
    "outside_allowed_roots": 409,
    "gh_failed": 409,
    "timeout": 409,
    # the worktree's folder or its branch is not there any more
    "worktree_gone": 409,
    "branch_gone": 409,
    # checkpoints (checkpoints/): a restore refused, with the reason the UI shows
    "turn_running": 409,
    "checkpoint_gone": 409,
    "worker_offline": 409,
    "path_outside_workdir": 409,
    # a move (moves/): a bundle refused or lost on its way, a folder the worker keeps
    "bad_bundle": 409,
    "bundle_gone": 409,
    "protected_path": 409,
}

class ErrorBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Every 4xx/5xx body: Litestar's own shape, which the access layer answers with too."""

    status_code: int
    detail: str
    #: ``{"code": ...}`` for a coded error; the failed fields for a malformed request
    extra: dict[str, Any] | list[dict[str, Any]] | None = None


def status_of(err: ServerError) -> int:
    """The HTTP status a ServerError is answered with (see the module docstring)."""
    code = getattr(err, "code", None)
    if isinstance(code, str):
        status = STATUS_OF_CODE.get(code)
        if status is not None:
            return status
        # an identity provider's own refusal (``invalid_grant``, ...): a bad gateway
        return 502 if err.upstream_codes else 400
    if isinstance(err, LogClosed):
        return 503
    return 500


def _server_error(request: Request[Any, Any, Any], err: ServerError) -> Response[ErrorBody]:
    status = status_of(err)
    code = getattr(err, "code", None)
    if status >= 500 and not isinstance(code, str):
        log.error("%s %s failed", request.method, request.url.path, exc_info=err)
    message = getattr(err, "message", None)
    return Response(ErrorBody(status_code=status,
                              detail=message if isinstance(message, str) else str(err),
                              extra={"code": code} if isinstance(code, str) else None),
                    status_code=status)


_NO_BODY = "expected a JSON object in the request body"


def _problem(entry: Any) -> dict[str, Any]:
    problem = dict(entry) if isinstance(entry, Mapping) else {"message": str(entry)}
    if problem.get("key") == "data" and problem.get("message") == repr("data"):
        problem["message"] = _NO_BODY  # Litestar's way of saying there was no body at all
    elif isinstance(problem.get("message"), str):
        problem["message"] = words_for(problem["message"])  # a pattern's own words
    return problem


def _said(problem: Mapping[str, Any]) -> str:
    key = problem.get("key")
    message = str(problem.get("message", ""))
    return f"{message} - at `{key}`" if key and key != "data" else message


def _invalid(request: Request[Any, Any, Any], exc: ValidationException) -> Response[ErrorBody]:
    problems = [_problem(e) for e in exc.extra] if isinstance(exc.extra, list) else []
    detail = "; ".join(_said(p) for p in problems) or exc.detail
    return Response(ErrorBody(status_code=400, detail=detail, extra=problems or None),
                    status_code=400)


def _body_field(err: BaseException | None) -> str | None:
    """The body field msgspec's error names, when it is about the request's body (``data``)."""
    if not isinstance(err, msgspec.ValidationError):
        return None
    message, _, where = str(err).rpartition(" - at `$.data.")
    return where.split("`", 1)[0] if message and where.endswith("`") else None


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[ErrorBody]:
    """Every 500 no other handler took: Litestar's own, and any exception of a handler."""
    if isinstance(exc, InternalServerException) and (key := _body_field(exc.__cause__)):
        # Litestar's signature model took a body field named like a dependency for the
        # dependency (its key loses the ``data.`` prefix before the check): the client's fault
        problem = _problem({"message": str(exc.__cause__).rpartition(" - at ")[0],
                            "key": key, "source": "body"})
        return Response(ErrorBody(status_code=400, detail=_said(problem), extra=[problem]),
                        status_code=400)
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return Response(ErrorBody(status_code=500, detail="Internal Server Error"),
                    status_code=500)


#: the one map from the error hierarchy to HTTP answers, for ``Litestar(exception_handlers=)``
exception_handlers: ExceptionHandlersMap = {
    ServerError: _server_error,
    ValidationException: _invalid,
    # Litestar's 500s, and any exception no class above takes (its fallback for a 500 key)
    500: _unexpected,
}


class JSONRequest(Request[Any, Any, Any]):
    """Litestar's request, with two mends to how it takes a JSON body:

    - a body nested too deeply for msgspec is a 400, not a 500;
    - the body is checked against the handler's body type as strictly as the document says
      (:func:`strict_body`): Litestar converts it leniently (``strict=False``, which its path
      and query parameters need), so ``{"network": 0}`` or ``{"limit": "5"}`` would be taken
      for a ``bool`` or an ``int`` the document does not allow.
    """

    async def json(self) -> Any:
        try:
            value = await super().json()
        except RecursionError:  # msgspec's answer to absurdly deep nesting
            raise SerializationException("JSON is nested too deeply") from None
        body = _body_type(self.route_handler)
        if body is not None:
            strict_body(value, body)
        return value


def strict_body(value: Any, body: Any) -> None:
    """Raise the 400 Litestar would for ``value`` not fitting ``body`` under msgspec's strict
    rules (no ``0`` for ``false``, no ``"5"`` for ``5``)."""
    try:
        msgspec.convert(value, body, strict=True, str_keys=True)
    except msgspec.ValidationError as err:
        message, _, where = str(err).rpartition(" - at `$")
        problem: dict[str, Any] = {"message": message or str(err), "source": "body"}
        if where.endswith("`"):
            problem["key"] = where[:-1].lstrip(".") or "data"
        raise ValidationException(detail=str(err), extra=[problem]) from None


def _body_type(handler: Any) -> Any:
    """The type of a handler's ``data`` (its JSON body), or None when it takes none."""
    try:
        return _BODY_TYPES[handler]
    except KeyError:
        pass
    param = handler.parsed_fn_signature.parameters.get("data")
    body = param.annotation if param is not None and param.annotation is not Any else None
    _BODY_TYPES[handler] = body
    return body


#: each route handler's body type, found once (the handlers live as long as the app)
_BODY_TYPES: dict[Any, Any] = {}


_DESCRIPTIONS = {
    400: "The body or a parameter is malformed, or the request cannot be carried out "
         "(`extra.code` says why).",
    401: "Not logged in: no session cookie and no `Authorization: Bearer <access token>`.",
    403: "A foreign `Host` or `Origin`, a cookie-authenticated change without same-origin "
         "proof, a wrong pairing code, or a forbidden request.",
    404: "No such resource.",
    409: "The request conflicts with the current state.",
    410: "Expired.",
    413: "The body is too large, or the files it sends with a prompt are.",
    423: "Locked after too many wrong tries.",
    429: "Too many pending requests.",
    502: "The identity provider refused or failed.",
}


def errors(*statuses: int, login: bool = True) -> dict[int, ResponseSpec]:
    """The documented error answers of a route: ``statuses``, plus 401 and 403 when it needs
    a login (the access layer answers those before the handler runs)."""
    wanted = sorted({*statuses, *((401, 403) if login else ())})
    return {status: ResponseSpec(ErrorBody, description=_DESCRIPTIONS[status],
                                 generate_examples=False)
            for status in wanted}
