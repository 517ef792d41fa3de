"""``AuthService``: model-provider logins run by the server, and the tokens they leave.

For each configured provider (``ProviderConfig.auth``):

- ``"none"``: nothing to do; :meth:`AuthService.token_for` gives None.
- ``"api_key"`` (or any provider, really): :meth:`set_api_key` stores a pasted key.
- ``"oauth"``: :meth:`login_link` → the browser goes to the provider → :meth:`callback`
  (authorization code + PKCE S256, state single-use and bound to the browser session, nonce
  checked in the ID token); or :meth:`start_device` (RFC 8628), polled in the background.

Credentials live in ``DATA_DIR/auth.json`` (0600), or among replicas in sealed rows every
replica reads (:mod:`.store`), and are refreshed before they expire, by a background task and
on demand in :meth:`token_for` — among replicas by one replica at a time, under a database
lock, after which the others read its result. A credential is bound to the provider's base URL
when it was given (``Credential.base_url``): once the provider points elsewhere it is sent
nowhere until a key is given again or a login made for the new URL. The only thing browsers
ever learn is an
``AuthStatusUpdated`` event (provider, state, method, account, expiry, error, and — during a
device login — the verification URI and user code). Never log a credential: log the provider
name and the account.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from tenacity import wait_exponential

from codey_protocol import events as ev
from codey_server.cluster.errors import SecretKeyError
from codey_server.core.background import Background
from codey_server.core.engine import Engine
from codey_server.core.retry import wait_after
from codey_server.errors import ServerError
from codey_server.http.urls import same_endpoint
from codey_server.providers import decide
from codey_server.providers.device import DeviceGrant, poll_device, start_device
from codey_server.providers.oauth import OAuthFailed, OAuthProvider, TokenSet, account_of
from codey_server.providers.store import (
    Credential,
    CredentialStore,
    FileCredentialStore,
    LoginStore,
    MemoryLoginStore,
    PendingLogin,
)
from codey_server.settings import ProviderConfig, Settings, provider_config

if TYPE_CHECKING:
    import httpx  # loaded by the first login or refresh (the ``http`` property)

log = logging.getLogger("codey.auth")

__all__ = ["AuthError", "AuthService", "DeviceLogin", "LoginLink", "ProviderStatus"]

LOGIN_TTL_S = 600.0
REFRESH_MARGIN_S = 60.0
#: after a failed refresh (provider down, 5xx) the next try waits 1 s, doubling up to 5 min
REFRESH_BACKOFF_MIN_S = 1.0
REFRESH_BACKOFF_MAX_S = 300.0
#: that wait (tenacity), after the n-th failure in a row (:mod:`codey_server.core.retry`)
REFRESH_WAIT = wait_exponential(multiplier=REFRESH_BACKOFF_MIN_S, max=REFRESH_BACKOFF_MAX_S)
MAX_API_KEY_CHARS = 4096
#: refresh errors after which the refresh token is worthless: log in again
_FATAL_REFRESH = frozenset({"invalid_grant", "invalid_client", "unauthorized_client",
                            "invalid_response"})


class AuthError(ServerError):
    """A login request that cannot be carried out. ``code``: not_found, bad_request,
    conflict, bad_state, or an OAuth error code from the provider."""

    upstream_codes = True

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ProviderStatus(msgspec.Struct, kw_only=True):
    """A provider's login state as browsers see it: the fields of ``AuthStatusUpdated``
    without its ``type``. Never a credential."""

    provider: str
    state: ev.AuthState
    method: Literal["oauth", "device_code", "api_key", "none"] = "none"
    account: str | None = None
    expires_at: float | None = None
    error: str | None = None
    verification_uri: str | None = None  # device code flow: where the user goes
    user_code: str | None = None  # device code flow: what the user types there


def _public(status: ev.AuthStatusUpdated) -> ProviderStatus:
    return ProviderStatus(**{f: getattr(status, f) for f in ProviderStatus.__struct_fields__})


class DeviceLogin(msgspec.Struct, kw_only=True):
    """What a device login needs from the user (RFC 8628); the device code stays here."""

    provider: str
    verification_uri: str
    verification_uri_complete: str | None
    user_code: str
    expires_in: float
    interval: float


@dataclass(frozen=True)
class LoginLink:
    """What :meth:`AuthService.login_link` gives: the URL for the browser, the state, and
    the binder (a secret for a SameSite=Lax cookie that proves the callback comes back to the
    same browser even when the Strict session cookie is withheld on the cross-site redirect)."""

    url: str
    state: str
    binder: str


def _session_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _bound_to(cred: Credential, config: ProviderConfig) -> bool:
    """``cred`` may be sent to ``config``'s base URL: it was given for that endpoint (or
    before credentials were bound, and is bound at start)."""
    return cred.base_url is None or same_endpoint(cred.base_url, config.base_url)


def _margin(cred: Credential) -> float:
    """Refresh this long before expiry: 60 s, or half the lifetime of a short-lived token."""
    if cred.expires_at is None:
        return REFRESH_MARGIN_S
    return min(REFRESH_MARGIN_S, max(0.5, (cred.expires_at - cred.obtained_at) / 2))


class AuthService:
    """Runs provider logins and hands tokens to the agent loop. Start once, stop once."""

    def __init__(self, settings: Settings, engine: Engine,
                 http: httpx.AsyncClient | None = None, *,
                 store: CredentialStore | None = None, logins: LoginStore | None = None,
                 refresh_guard: Callable[[str], AbstractAsyncContextManager[None]] | None = None
                 ) -> None:
        self.settings = settings
        self.engine = engine
        #: config.json's providers, then those of Settings → Models (config.json's win)
        self._configs = {p.name: p for p in settings.providers}
        self._file_providers = frozenset(self._configs)
        self._http = http
        #: the credentials: ``auth.json`` in the data dir unless a store is given (replicas
        #: give the shared rows)
        self._store = store
        #: OAuth logins begun and not called back yet
        self.logins: LoginStore = logins or MemoryLoginStore()
        self._oauth: dict[str, OAuthProvider] = {}
        self._devices: dict[str, asyncio.Task[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._failures: dict[str, int] = {}  # provider → refreshes failed in a row
        self._backoff: dict[str, float] = {}  # provider → the last backoff delay, seconds
        self._retry_at: dict[str, float] = {}  # provider → no refresh before (monotonic)
        self._refresher: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        #: among replicas: held around a refresh (a lock in the database), so one replica
        #: refreshes and the others, reading the row after it, use its token
        self.refresh_guard = refresh_guard
        self._background = Background(log)

    # lifecycle ------------------------------------------------------------------------------

    @property
    def store(self) -> CredentialStore:
        if self._store is None:
            self._store = FileCredentialStore(self.settings.data_dir / "auth.json")
        return self._store

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            import httpx

            self._http = httpx.AsyncClient(timeout=30.0)
        return self._http

    async def start(self) -> None:
        """Publish each provider's status where it differs from the log; start refreshing."""
        for entry in self.engine.state.providers.values():
            self._define(entry)
        self.engine.listeners.append(self._on_event)
        for config in list(self._configs.values()):
            await self._bind_unbound(config)
            await self._publish(await self._stored_status(config))
        self._wake = asyncio.Event()
        self._refresher = asyncio.create_task(self._refresh_loop(), name="auth-refresher")

    async def stop(self) -> None:
        await self._background.cancel()
        tasks = [t for t in (self._refresher, *self._devices.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._devices.clear()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # providers of Settings → Models ---------------------------------------------------------

    def _define(self, entry: ev.ProviderEntry) -> bool:
        if entry.name in self._file_providers:
            return False
        self._configs[entry.name] = provider_config(entry)
        self._oauth.pop(entry.name, None)  # its issuer or client may have changed
        return True

    def _on_event(self, env: ev.Envelope) -> None:
        e = env.event
        if isinstance(e, ev.AuthStatusUpdated) and self.engine.applying_foreign:
            # another replica's login, logout or refresh (folded: this one answers as it
            # does): the refresher recomputes when the next refresh is due (it takes its turn)
            if e.provider in self._configs and self._wake is not None:
                self._wake.set()
        elif isinstance(e, ev.ProviderSaved):
            if self._define(e.provider) and not self.engine.applying_foreign:
                self._background.spawn(self._publish_stored(self._configs[e.provider.name]),
                                       f"status-{e.provider.name}")
        elif isinstance(e, ev.ProviderRemoved) and e.name not in self._file_providers:
            self._configs.pop(e.name, None)
            self._oauth.pop(e.name, None)
            self._cancel_device(e.name)
            if not self.engine.applying_foreign:
                # a delete is a delete: its key or tokens go with it
                self._background.spawn(self.store.remove(e.name), f"forget-{e.name}")

    # queries --------------------------------------------------------------------------------

    async def status(self) -> list[ProviderStatus]:
        """One entry per configured provider (no secrets in it)."""
        return [await self._current(config) for config in list(self._configs.values())]

    async def status_of(self, name: str) -> ProviderStatus:
        """One provider's login state (no secret in it)."""
        return await self._current(self._config(name))

    async def _current(self, config: ProviderConfig) -> ProviderStatus:
        """The status folded (published here, or by another replica), except that whether a
        login is stored is read from the store: among replicas a login or logout elsewhere is
        seen on the next request, before its event is folded here."""
        folded = self.engine.state.auth.get(config.name)
        if folded is not None and folded.state not in ("logged_in", "logged_out"):
            # pending, error, expired: only the log knows those
            return ProviderStatus(**msgspec.structs.asdict(folded))
        return _public(await self._stored_status(config))

    async def token_for(self, provider_name: str) -> str | None:
        """The bearer for ``provider_name``: its API key or access token (refreshed when it is
        about to expire), else the ``api_key_env`` variable; None for ``auth == "none"``, an
        unknown provider, or nobody logged in."""
        config = self._configs.get(provider_name)
        if config is None or config.auth == "none":
            return None
        try:
            cred = await self.store.get(provider_name)
        except SecretKeyError as err:
            # loud in the log; the call goes on with the environment's key, if any
            log.error("provider %s: %s", provider_name, err.message)
            return self._env_key(config)
        if cred is not None and not _bound_to(cred, config):
            cred = None  # given for another URL than the provider's now: not sent here
        if cred is not None and cred.method == "api_key":
            return cred.api_key
        if cred is not None and cred.access_token:
            if cred.refresh_token and cred.expires_at is not None and \
                    cred.expires_at - time.time() < _margin(cred):
                await self._refresh(provider_name)
                cred = await self.store.get(provider_name)
            if cred is not None and cred.access_token and (
                    cred.expires_at is None or cred.expires_at > time.time()):
                return cred.access_token
        return self._env_key(config)

    # API keys -------------------------------------------------------------------------------

    async def set_api_key(self, provider_name: str, api_key: str) -> ProviderStatus:
        config = self._config(provider_name)
        if config.auth == "none":
            raise AuthError("conflict", f"provider {provider_name!r} needs no credentials")
        key = api_key.strip()
        if not key or len(key) > MAX_API_KEY_CHARS or any(c.isspace() for c in key):
            raise AuthError("bad_request", "that does not look like an API key")
        self._cancel_device(provider_name)
        self._reset_backoff(provider_name)
        await self.store.put(provider_name, Credential(method="api_key", api_key=key,
                                                       base_url=config.base_url))
        log.info("provider %s: API key stored", provider_name)
        return await self._publish(ev.AuthStatusUpdated(
            provider=provider_name, state="logged_in", method="api_key"))

    # authorization code + PKCE --------------------------------------------------------------

    async def login_link(self, provider_name: str, *, session_id: str | None,
                         redirect_uri: str) -> LoginLink:
        """Start a browser login. ``redirect_uri`` must be exactly the one registered with the
        provider (``{server origin}/api/auth/callback``); the callback uses the same."""
        provider = self._provider(provider_name)
        await self.logins.expire(LOGIN_TTL_S)
        state = secrets.token_urlsafe(32)
        pending = PendingLogin(
            provider=provider_name,
            session_hash=_session_hash(session_id) if session_id is not None else None,
            binder=secrets.token_urlsafe(32), verifier=secrets.token_urlsafe(64),
            nonce=secrets.token_urlsafe(24), redirect_uri=redirect_uri, created=time.time())
        try:
            url = await provider.authorization_url(redirect_uri=redirect_uri, state=state,
                                                   nonce=pending.nonce,
                                                   code_verifier=pending.verifier)
        except OAuthFailed as err:
            raise AuthError(err.code, err.message) from None
        # kept where the callback finds it, on whichever replica the redirect reaches
        await self.logins.put(state, pending)
        return LoginLink(url=url, state=state, binder=pending.binder)

    async def callback(self, *, state: str | None, code: str | None, error: str | None,
                       error_description: str | None, session_id: str | None,
                       binder: str | None) -> str:
        """Finish a browser login; returns the provider name. Raises AuthError (the state is
        used up either way: a second callback with it is refused)."""
        pending = await self.logins.take(state) if state else None
        if pending is None or time.time() - pending.created > LOGIN_TTL_S:
            raise AuthError("bad_state", "unknown, used or expired login state")
        bound = (session_id is not None and pending.session_hash is not None
                 and secrets.compare_digest(_session_hash(session_id).encode(),
                                            pending.session_hash.encode())
                 ) or (binder is not None
                       and secrets.compare_digest(binder.encode(), pending.binder.encode()))
        if not bound:
            raise AuthError("bad_state", "this login was started by another browser")
        name = pending.provider
        if error:
            await self._login_failed(name, "oauth", f"{error}: {error_description or ''}".strip())
            raise AuthError(error[:64], error_description or "the provider refused the login")
        if not code:
            raise AuthError("bad_request", "the callback carries no code")
        provider = self._provider(name)
        try:
            tokens = await provider.exchange_code(code=code, redirect_uri=pending.redirect_uri,
                                                  code_verifier=pending.verifier)
            account = None
            if tokens.id_token:
                claims = await provider.validate_id_token(tokens.id_token, pending.nonce)
                account = account_of(claims)
            if account is None:
                account = await provider.userinfo_account(tokens.access_token)
        except OAuthFailed as err:
            await self._login_failed(name, "oauth", err.message)
            raise AuthError(err.code, err.message) from None
        await self._logged_in(name, "oauth", tokens, account)
        return name

    # device code ----------------------------------------------------------------------------

    async def start_device(self, provider_name: str) -> DeviceLogin:
        """Start a device login; the server polls in the background. Returns what the user
        needs: ``verification_uri`` (+ ``verification_uri_complete``), ``user_code``,
        ``expires_in``."""
        provider = self._provider(provider_name)
        try:
            grant = await start_device(provider, self.http)
        except OAuthFailed as err:
            raise AuthError(err.code, err.message) from None
        self._cancel_device(provider_name)
        await self._publish(ev.AuthStatusUpdated(
            provider=provider_name, state="pending", method="device_code",
            verification_uri=grant.verification_uri, user_code=grant.user_code))
        self._devices[provider_name] = asyncio.create_task(
            self._device(provider_name, provider, grant), name=f"device-login-{provider_name}")
        return DeviceLogin(provider=provider_name, verification_uri=grant.verification_uri,
                           verification_uri_complete=grant.verification_uri_complete,
                           user_code=grant.user_code, expires_in=grant.expires_in,
                           interval=grant.interval)

    async def _device(self, name: str, provider: OAuthProvider, grant: DeviceGrant) -> None:
        try:
            tokens = await poll_device(provider, self.http, grant)
            account = await provider.userinfo_account(tokens.access_token)
        except OAuthFailed as err:
            self._devices.pop(name, None)
            await self._login_failed(name, "device_code", err.message)
            return
        self._devices.pop(name, None)
        try:
            await self._logged_in(name, "device_code", tokens, account)
        except SecretKeyError as err:  # nowhere to keep the login: say so
            await self._login_failed(name, "device_code", err.message)

    def _cancel_device(self, name: str) -> None:
        task = self._devices.pop(name, None)
        if task is not None:
            task.cancel()

    # logout ---------------------------------------------------------------------------------

    async def logout(self, provider_name: str) -> ProviderStatus:
        """Forget this provider's credentials (and stop a device login in progress)."""
        config = self._config(provider_name)
        self._cancel_device(provider_name)
        try:
            cred = await self.store.get(provider_name)
        except SecretKeyError:
            cred = None  # unreadable here: forgotten all the same, not revoked upstream
        self._reset_backoff(provider_name)
        if await self.store.remove(provider_name):
            log.info("provider %s: logged out", provider_name)
        if cred is not None and cred.refresh_token and config.auth == "oauth":
            await self._revoke(provider_name, cred.refresh_token)
        return await self._publish_stored(config)

    async def _revoke(self, name: str, token: str) -> None:
        """Best effort (RFC 7009): a provider without a revocation endpoint just forgets."""
        import httpx

        with contextlib.suppress(OAuthFailed, httpx.HTTPError):
            provider = self._provider(name)
            meta = await provider.discovery()
            if meta.revocation_endpoint:
                client = await provider.client_auth()  # RFC 7009 §2.1: as at the token endpoint
                await self.http.post(meta.revocation_endpoint, auth=client.auth, data={
                    "token": token, "token_type_hint": "refresh_token", **client.data})

    # refresh --------------------------------------------------------------------------------

    async def refresh_rejected(self, provider_name: str) -> bool:
        """The provider answered 401 to a token we thought valid: refresh it now, once.
        True when a new access token is stored (the caller tries again with it)."""
        try:
            cred = await self.store.get(provider_name)
        except SecretKeyError:
            return False  # said by token_for already
        if cred is None or not cred.refresh_token:
            return False
        await self._refresh(provider_name, force=True, rejected=cred.access_token)
        new = await self.store.get(provider_name)
        return new is not None and bool(new.access_token) and \
            new.access_token != cred.access_token

    async def _refresh(self, name: str, *, force: bool = False,
                       rejected: str | None = None) -> None:
        async with self._refreshing(name):
            await self._refresh_now(name, force=force, rejected=rejected)

    @contextlib.asynccontextmanager
    async def _refreshing(self, name: str) -> AsyncIterator[None]:
        """Held while ``name``'s stored login is read and written back (a refresh)."""
        guard = self.refresh_guard(name) if self.refresh_guard is not None \
            else contextlib.nullcontext()
        # this server's callers queue here, not on the guard: among replicas the guard holds a
        # database connection while it waits, and a dozen turns asking at once would hold
        # them all, leaving none for the refresh they wait for
        async with self._locks.setdefault(name, asyncio.Lock()), guard:
            yield

    async def _bind_unbound(self, config: ProviderConfig) -> None:
        """Bind a credential stored before credentials were bound to the provider's base URL
        now (the one it has been sent to). Under the refresh's lock: a refresh elsewhere
        between the read and the write would be lost."""
        try:
            cred = await self.store.get(config.name)
            if cred is None or cred.base_url is not None:
                return  # the usual case: no lock taken
            async with self._refreshing(config.name):
                cred = await self.store.get(config.name)
                if cred is not None and cred.base_url is None:
                    await self.store.put(config.name, msgspec.structs.replace(
                        cred, base_url=config.base_url))
        except SecretKeyError:
            return  # unreadable here: its status says so

    async def _refresh_now(self, name: str, *, force: bool,
                           rejected: str | None) -> None:
        """Refresh ``name``'s access token if it is due and no failed try is backing off.

        The network call runs without holding the store still: a logout, a new API key or a
        new login meanwhile replaces the credential, and then this refresh's result (good or
        bad) is dropped instead of undoing the change. (Stored credentials are compared by
        value: among replicas each read is a fresh copy of the row.) Called under this
        server's lock and the guard (:meth:`_refresh`).
        """
        cred = await self.store.get(name)
        if cred is None or not cred.refresh_token:
            return  # nothing to refresh with
        if force and rejected is not None and cred.access_token != rejected:
            return  # another replica refreshed it already
        if not force and (cred.expires_at is None
                          or cred.expires_at - time.time() >= _margin(cred)):
            return  # someone else refreshed while we waited, or nothing is due
        if not force and time.monotonic() < self._retry_at.get(name, 0.0):
            return  # the last try failed; wait out its backoff
        try:
            tokens = await self._provider(name).refresh(cred.refresh_token)
        except (OAuthFailed, AuthError) as err:
            if await self.store.get(name) != cred:
                return
            code = err.code
            self._back_off(name)
            if code in _FATAL_REFRESH or (cred.expires_at or 0) <= time.time():
                if code in _FATAL_REFRESH:
                    await self.store.remove(name)
                log.warning("provider %s: refresh failed (%s); log in again", name, code)
                await self._publish(ev.AuthStatusUpdated(
                    provider=name, state="expired", method=cred.method,
                    account=cred.account, expires_at=cred.expires_at,
                    error=f"refresh failed: {code}"))
            else:
                log.warning("provider %s: refresh failed (%s); retry in %.0f s", name, code,
                            self._backoff[name])
            return
        if await self.store.get(name) != cred:
            log.info("provider %s: credentials changed during a refresh; result dropped",
                     name)
            return
        await self._logged_in(name, cred.method, tokens, cred.account, quiet=True,
                              base_url=cred.base_url)

    def _back_off(self, name: str) -> None:
        """After a failed refresh: wait 1 s, then twice as long after each further failure, at
        most :data:`REFRESH_BACKOFF_MAX_S` (:data:`REFRESH_WAIT`)."""
        failures = self._failures[name] = self._failures.get(name, 0) + 1
        delay = self._backoff[name] = wait_after(REFRESH_WAIT, failures)
        self._retry_at[name] = time.monotonic() + delay

    def _reset_backoff(self, name: str) -> None:
        self._failures.pop(name, None)
        self._backoff.pop(name, None)
        self._retry_at.pop(name, None)

    async def _refresh_loop(self) -> None:
        assert self._wake is not None
        while True:
            delay = 30.0
            try:
                names = await self.store.names()
            except Exception as err:  # the database away: try again later
                log.warning("could not read the stored logins (%s)", err)
                names = []
            for name in names:
                try:
                    cred = await self.store.get(name)
                except Exception as err:
                    log.warning("provider %s: could not read its login (%s)", name, err)
                    continue
                if cred is None or not cred.refresh_token or cred.expires_at is None:
                    continue
                due = cred.expires_at - _margin(cred) - time.time()
                if due <= 0:
                    try:
                        await self._refresh(name)
                    except Exception:  # the loop must outlive any one provider's trouble
                        log.exception("provider %s: refresh crashed", name)
                        self._back_off(name)
                    retry_in = self._retry_at.get(name, 0.0) - time.monotonic()
                    delay = min(delay, max(retry_in, 1.0))
                else:
                    delay = min(delay, due)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(delay, 0.2))

    # helpers --------------------------------------------------------------------------------

    def _config(self, name: str) -> ProviderConfig:
        config = self._configs.get(name)
        if config is None:
            raise AuthError("not_found", f"no provider {name!r}")
        return config

    def _provider(self, name: str) -> OAuthProvider:
        config = self._config(name)
        if config.auth != "oauth":
            raise AuthError("conflict", f"provider {name!r} does not log in with OAuth")
        provider = self._oauth.get(name)
        if provider is None:
            try:
                provider = OAuthProvider(config, self.http)
            except OAuthFailed as err:
                raise AuthError(err.code, err.message) from None
            self._oauth[name] = provider
        return provider

    @staticmethod
    def _env_key(config: ProviderConfig) -> str | None:
        return os.environ.get(config.api_key_env) or None if config.api_key_env else None

    async def _publish_stored(self, config: ProviderConfig) -> ProviderStatus:
        return await self._publish(await self._stored_status(config))

    async def _stored_status(self, config: ProviderConfig) -> ev.AuthStatusUpdated:
        name = config.name
        if config.auth == "none":
            return ev.AuthStatusUpdated(provider=name, state="logged_in", method="none")
        try:
            cred = await self.store.get(name)
        except SecretKeyError as err:
            return ev.AuthStatusUpdated(provider=name, state="error",
                                        method="oauth" if config.auth == "oauth" else "none",
                                        error=err.message[:500])
        elsewhere = cred is not None and not _bound_to(cred, config)
        if elsewhere:
            cred = None
        if cred is not None and cred.method == "api_key":
            return ev.AuthStatusUpdated(provider=name, state="logged_in", method="api_key")
        if cred is not None:
            usable = cred.refresh_token is not None or (
                cred.expires_at is None or cred.expires_at > time.time())
            return ev.AuthStatusUpdated(provider=name, state="logged_in" if usable else "expired",
                                        method=cred.method, account=cred.account,
                                        expires_at=cred.expires_at)
        if self._env_key(config):
            return ev.AuthStatusUpdated(provider=name, state="logged_in", method="api_key",
                                        account=f"${config.api_key_env}")
        return ev.AuthStatusUpdated(
            provider=name, state="logged_out",
            method="oauth" if config.auth == "oauth" else "none",
            error="its stored credential was given for another URL: it goes nowhere else; "
                  "give the key again, or log in again, for this one" if elsewhere else None)

    async def _logged_in(self, name: str, method: Any, tokens: TokenSet, account: str | None,
                         *, quiet: bool = False, base_url: str | None = None) -> None:
        """Store a login's tokens, bound to ``base_url`` (a refresh keeps the old login's),
        by default the provider's base URL now."""
        self._reset_backoff(name)
        await self.store.put(name, Credential(
            method=method, access_token=tokens.access_token, refresh_token=tokens.refresh_token,
            expires_at=tokens.expires_at, account=account, scope=tokens.scope,
            base_url=base_url or self._config(name).base_url))
        if not quiet:
            log.info("provider %s: logged in as %s (%s)", name, account or "?", method)
        await self._publish(ev.AuthStatusUpdated(
            provider=name, state="logged_in", method=method, account=account,
            expires_at=tokens.expires_at))
        if self._wake is not None:
            self._wake.set()  # the refresher recomputes when the next refresh is due

    async def _login_failed(self, name: str, method: Any, message: str) -> None:
        log.warning("provider %s: login failed: %s", name, message[:200])
        with contextlib.suppress(SecretKeyError):
            if await self.store.get(name) is not None:
                return  # a failed new login leaves a working old one alone
        await self._publish(ev.AuthStatusUpdated(provider=name, state="error", method=method,
                                                 error=message[:500]))

    async def _publish(self, status: ev.AuthStatusUpdated) -> ProviderStatus:
        await self.engine.submit(decide.status_changed, status)
        return _public(status)
