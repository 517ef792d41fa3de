"""``/api/auth/*``: model-provider login (OAuth with PKCE, device code, API keys); and
``/api/providers``: the providers defined in Settings → Models (added, changed, removed).

The callback is ``PUBLIC``: the provider's cross-site redirect carries no SameSite=Strict
cookie, so it checks the login's own binding cookie instead (see its docstring). A refused
login step (``AuthError``) is answered by :mod:`codey_server.http.errors`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar
from urllib.parse import quote

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.datastructures import Cookie
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.response import Redirect

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.events import ProviderAuth, ProviderKind
from codey_server.cluster.errors import SecretKeyError
from codey_server.core.engine import Engine
from codey_server.http.access import PUBLIC, BrowserAccess, browser_session
from codey_server.http.errors import errors
from codey_server.http.fields import NOT_BLANK, pattern
from codey_server.http.resource import Resource
from codey_server.http.sessions import Seq
from codey_server.http.urls import HTTP_URL, MAX_URL_CHARS
from codey_server.providers.decide import MAX_MODEL_CHARS, MAX_MODELS
from codey_server.providers.service import (
    LOGIN_TTL_S,
    MAX_API_KEY_CHARS,
    AuthError,
    AuthService,
    DeviceLogin,
    ProviderStatus,
)

__all__ = ["CALLBACK_PATH", "ApiKey", "AuthController", "LoginLinkAnswer", "ProviderBody",
           "ProviderChoice", "ProvidersController", "redirect_uri"]

CALLBACK_PATH = "/api/auth/callback"

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class ProviderChoice(msgspec.Struct, kw_only=True):
    provider: NonEmpty


class ApiKey(msgspec.Struct, kw_only=True):
    provider: NonEmpty
    #: printable ASCII without spaces, as every provider's keys are (the web client trims
    #: what was pasted; ``set_api_key`` would strip it)
    api_key: Annotated[str, msgspec.Meta(pattern=pattern(
        f"^[!-~]{{1,{MAX_API_KEY_CHARS}}}$", "that does not look like an API key"))]


class LoginLinkAnswer(msgspec.Struct, kw_only=True):
    url: str  # open it in this browser to log in
    state: str


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


class AuthController(Resource):
    path = "/api/auth"
    tags = ["auth"]

    @get("/status", responses=errors())
    async def status(self, auth: NamedDependency[AuthService]) -> list[ProviderStatus]:
        """Each configured provider's login state. Never a credential."""
        return await auth.status()

    @post("/login-link", status_code=200, responses=errors(400, 404, 409, 502))
    async def login_link(self, request: Request[Any, Any, Any], data: JSONBody[ProviderChoice],
                         auth: NamedDependency[AuthService],
                             access: NamedDependency[BrowserAccess]) -> Response[LoginLinkAnswer]:
        """Start an OAuth login: open ``url`` in this browser."""
        link = await auth.login_link(
            data.provider, session_id=browser_session(request),
            redirect_uri=redirect_uri(request, access))
        return Response(LoginLinkAnswer(url=link.url, state=link.state),
                        cookies=[_binder_cookie(access, link.binder, int(LOGIN_TTL_S))],
                        headers={"cache-control": "no-store"})

    @get("/callback", status_code=303, opt=PUBLIC, responses=errors(login=False))
    async def callback(self, request: Request[Any, Any, Any],
                       access: NamedDependency[BrowserAccess],
                           auth: NamedDependency[AuthService]) -> Redirect:
        """The provider's redirect. Needs no session cookie (a SameSite=Strict cookie is not
        sent on a cross-site redirect); the state must be one this browser started — proven
        by its session cookie or by the login's own Lax cookie. Always redirects to the UI:
        ``/#/`` on success, ``/#/?login_error=...`` otherwise."""
        access = access
        q = request.query_params
        session = request.cookies.get(access.cookie_name)
        try:
            await auth.callback(
                state=q.get("state"), code=q.get("code"), error=q.get("error"),
                error_description=q.get("error_description"),
                session_id=session if session and await access.check_session(session) else None,
                binder=request.cookies.get(f"{access.cookie_name}_login"))
            target = "/#/"
        except (AuthError, SecretKeyError) as err:
            target = f"/#/?login_error={quote(err.code + ': ' + err.message, safe='')}"
        return Redirect(target, status_code=303,
                        cookies=[_binder_cookie(access, "", 0)],
                        headers={"cache-control": "no-store", "referrer-policy": "no-referrer"})

    @post("/device", status_code=200, responses=errors(400, 404, 409, 502))
    async def device_login(self, data: JSONBody[ProviderChoice],
                           auth: NamedDependency[AuthService]) -> DeviceLogin:
        """Start a device-code login; the server polls and reports by
        ``auth_status_updated``."""
        return await auth.start_device(data.provider)

    @post("/api-key", status_code=200, responses=errors(400, 404, 409))
    async def api_key(self, data: JSONBody[ApiKey],
                      auth: NamedDependency[AuthService]) -> ProviderStatus:
        """Store a pasted API key (it is never echoed)."""
        return await auth.set_api_key(data.provider, data.api_key)

    @post("/logout", status_code=200, responses=errors(400, 404))
    async def provider_logout(self, data: JSONBody[ProviderChoice],
                              auth: NamedDependency[AuthService]) -> ProviderStatus:
        """Forget that provider's credentials (the browser stays logged in)."""
        return await auth.logout(data.provider)


# providers defined in Settings → Models -----------------------------------------------------

#: a provider's name, as :func:`codey_server.providers.decide.check_provider` takes it
ProviderName = Annotated[str, msgspec.Meta(pattern=pattern(
    "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
    "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"))]
ModelName = Annotated[str, msgspec.Meta(max_length=MAX_MODEL_CHARS, pattern=NOT_BLANK)]


class ProviderBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/providers``: add or change a provider of Settings → Models, and store its
    key when one is pasted (never echoed)."""

    name: ProviderName
    kind: ProviderKind = "chat"
    base_url: Annotated[str, msgspec.Meta(max_length=MAX_URL_CHARS, pattern=HTTP_URL)]
    models: Annotated[list[ModelName], msgspec.Meta(max_length=MAX_MODELS)] = \
        msgspec.field(default_factory=list)
    default_model: Annotated[str, msgspec.Meta(max_length=MAX_MODEL_CHARS)] | None = None
    auth: ProviderAuth = "api_key"
    issuer: Annotated[str, msgspec.Meta(max_length=MAX_URL_CHARS, pattern=HTTP_URL)] | None \
        = None
    client_id: Annotated[str, msgspec.Meta(min_length=1, max_length=500)] | None = None
    api_key: Annotated[str, msgspec.Meta(pattern=pattern(
        f"^[!-~]{{1,{MAX_API_KEY_CHARS}}}$", "that does not look like an API key"))] | None = None

    # an OAuth provider names its issuer and client (check_provider refuses it otherwise)
    __schema_rules__: ClassVar[dict[str, Any]] = {
        "if": {"properties": {"auth": {"const": "oauth"}}, "required": ["auth"]},
        "then": {"required": ["issuer", "client_id"],
                 "properties": {"issuer": {"type": "string"}, "client_id": {"type": "string"}}},
    }


class ProvidersController(Resource):
    path = "/api/providers"
    tags = ["auth"]

    @post("/", status_code=200, responses=errors(400, 409))
    async def save(self, data: JSONBody[ProviderBody], engine: NamedDependency[Engine],
                   auth: NamedDependency[AuthService]) -> ProviderStatus:
        """Add or change a provider; used at once, no restart. Answers its login state."""
        fields = {f: getattr(data, f) for f in ev.ProviderEntry.__struct_fields__
                  if f != "updated_at"}
        await engine.execute(cl.SaveProvider(provider=ev.ProviderEntry(**fields)))
        if data.api_key is not None:
            return await auth.set_api_key(data.name, data.api_key)
        return await auth.status_of(data.name)

    @delete("/{name:str}", status_code=200, responses=errors(404, 409))
    async def remove(self, name: FromPath[str], engine: NamedDependency[Engine]) -> Seq:
        """Remove a provider of Settings → Models, and its stored key or login."""
        envs = await engine.execute(cl.RemoveProvider(name=name))
        return Seq(seq=envs[-1].seq)
