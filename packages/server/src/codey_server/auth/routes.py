"""HTTP routes of provider login (``/api/auth/*``). Browser access is checked by
:mod:`codey_server.access` before these run, except the callback (see its docstring)."""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import quote

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.exceptions import HTTPException
from litestar.response import Redirect

from codey_server.access import BrowserAccess, browser_session
from codey_server.auth.service import LOGIN_TTL_S, AuthError, AuthService

__all__ = ["auth_routes"]

_STATUS = {"not_found": 404, "conflict": 409, "bad_request": 400, "bad_state": 400}
CALLBACK_PATH = "/api/auth/callback"


class _Services(Protocol):
    auth: AuthService
    access: BrowserAccess


def _services(request: Request[Any, Any, Any]) -> _Services:
    services: _Services = request.app.state.services
    return services


def _http_error(err: AuthError) -> HTTPException:
    return HTTPException(status_code=_STATUS.get(err.code, 502), detail=err.message,
                         extra={"code": err.code})


async def _fields(request: Request[Any, Any, Any], *names: str) -> list[str]:
    try:
        body = msgspec.json.decode(await request.body() or b"{}")
    except (msgspec.DecodeError, RecursionError):  # RecursionError: absurdly deep nesting
        raise HTTPException(status_code=400, detail="expected a JSON object") from None
    values = []
    for name in names:
        value = body.get(name) if isinstance(body, dict) else None
        if not isinstance(value, str) or not value:
            raise HTTPException(status_code=400, detail=f"{name} is required")
        values.append(value)
    return values


def redirect_uri(request: Request[Any, Any, Any], access: BrowserAccess) -> str:
    """``{server origin}/api/auth/callback``: the public URL when configured, else the origin
    this browser reached us at (its Host header was already checked)."""
    settings = access.settings
    if settings.public_url:
        return settings.public_url.rstrip("/") + CALLBACK_PATH
    scheme = "https" if settings.tls else request.url.scheme
    return f"{scheme}://{request.headers.get('host', '')}{CALLBACK_PATH}"


def _binder_cookie(access: BrowserAccess, value: str, max_age: int) -> Cookie:
    # Lax, not Strict: it must come back on the provider's cross-site redirect to us.
    return Cookie(key=f"{access.cookie_name}_login", value=value, path=CALLBACK_PATH,
                  httponly=True, samesite="lax", secure=access.settings.tls, max_age=max_age)


@get("/api/auth/status", sync_to_thread=False)
def auth_status(request: Request[Any, Any, Any]) -> list[dict[str, Any]]:
    """Per configured provider: provider, state, method, account, expires_at, error,
    verification_uri, user_code. Never a credential."""
    return _services(request).auth.status()


@post("/api/auth/login-link", status_code=200)
async def login_link(request: Request[Any, Any, Any]) -> Response[dict[str, str]]:
    """``{provider}`` → ``{url, state}``: open ``url`` in this browser to log in."""
    (provider,) = await _fields(request, "provider")
    services = _services(request)
    try:
        link = await services.auth.login_link(
            provider, session_id=browser_session(request),
            redirect_uri=redirect_uri(request, services.access))
    except AuthError as err:
        raise _http_error(err) from None
    return Response({"url": link.url, "state": link.state},
                    cookies=[_binder_cookie(services.access, link.binder, int(LOGIN_TTL_S))],
                    headers={"cache-control": "no-store"})


@get(CALLBACK_PATH)
async def login_callback(request: Request[Any, Any, Any]) -> Redirect:
    """The provider's redirect. Needs no session cookie (a SameSite=Strict cookie is not sent
    on a cross-site redirect); the state must be one this browser started — proven by its
    session cookie or by the login's own Lax cookie. Always redirects to the UI:
    ``/#/`` on success, ``/#/?login_error=...`` otherwise."""
    services = _services(request)
    access = services.access
    q = request.query_params
    session = request.cookies.get(access.cookie_name)
    try:
        await services.auth.callback(
            state=q.get("state"), code=q.get("code"), error=q.get("error"),
            error_description=q.get("error_description"),
            session_id=session if session and access.check_session(session) else None,
            binder=request.cookies.get(f"{access.cookie_name}_login"))
        target = "/#/"
    except AuthError as err:
        target = f"/#/?login_error={quote(err.code + ': ' + err.message, safe='')}"
    return Redirect(target, status_code=303,
                    cookies=[_binder_cookie(access, "", 0)],
                    headers={"cache-control": "no-store", "referrer-policy": "no-referrer"})


@post("/api/auth/device", status_code=200)
async def device_login(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """``{provider}`` → ``{verification_uri, verification_uri_complete, user_code,
    expires_in, interval}``; the server polls and reports by ``auth_status_updated``."""
    (provider,) = await _fields(request, "provider")
    try:
        return await _services(request).auth.start_device(provider)
    except AuthError as err:
        raise _http_error(err) from None


@post("/api/auth/api-key", status_code=200)
async def api_key(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """``{provider, api_key}`` → the provider's status (the key is never echoed)."""
    provider, key = await _fields(request, "provider", "api_key")
    try:
        return await _services(request).auth.set_api_key(provider, key)
    except AuthError as err:
        raise _http_error(err) from None


@post("/api/auth/logout", status_code=200)
async def provider_logout(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """``{provider}``: forget that provider's credentials (the browser stays logged in)."""
    (provider,) = await _fields(request, "provider")
    try:
        return await _services(request).auth.logout(provider)
    except AuthError as err:
        raise _http_error(err) from None


auth_routes = [auth_status, login_link, login_callback, device_login, api_key, provider_logout]
