"""``/api/config``: the model providers sessions can use (never a credential); and what
Settings → Models asks of a provider: the models it lists, and a test call."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from litestar import get, post, put
from litestar.di import NamedDependency
from litestar.exceptions import ClientException, NotFoundException
from litestar.params import FromPath, JSONBody

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.events import ProviderAuth, ProviderKind
from codey_server.agent.errors import ModelError
from codey_server.agent.probe import CallResult, draft_commit_message, list_models, try_call
from codey_server.agent.service import AgentService
from codey_server.agent.web import stored as web_stored
from codey_server.core.actions import ActionFailed
from codey_server.core.costs import DEFAULT_PRICES
from codey_server.core.decide import default_model, default_provider
from codey_server.core.engine import Engine
from codey_server.http.errors import errors
from codey_server.http.fields import pattern
from codey_server.http.resource import Resource
from codey_server.http.urls import HTTP_URL, MAX_URL_CHARS, same_endpoint, url_problem
from codey_server.settings import Settings

__all__ = ["CommitMessage", "ConfigController", "ModelList", "Prices", "ProviderInfo",
           "ServerConfig", "Viewing", "Windows"]


class ProviderInfo(msgspec.Struct, kw_only=True):
    name: str
    kind: ProviderKind
    base_url: str
    models: list[str]  # for Ollama: the list discovered at start-up
    default_model: str
    auth: ProviderAuth
    #: where it is defined: ``config.json`` (change it there) or ``settings`` (Settings →
    #: Models); a name in both is config.json's
    source: Literal["config.json", "settings"]


class ServerConfig(msgspec.Struct, kw_only=True):
    #: the provider a new session uses when none is picked ("" when there is none yet)
    default_provider: str
    providers: list[ProviderInfo]


MAX_KEY_CHARS = 4096


class ModelQuery(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Where to ask for a list of models: a provider being defined (its kind and URL, and
    the key typed in the form, if any), or one already saved (``provider``): its stored
    credential goes only to its stored base URL, never to another one typed here."""

    kind: ProviderKind = "chat"
    base_url: Annotated[str, msgspec.Meta(max_length=MAX_URL_CHARS, pattern=HTTP_URL)]
    provider: str | None = None
    api_key: Annotated[str, msgspec.Meta(pattern=pattern(
        "^[!-~]{1,4096}$", "that does not look like an API key"))] | None = None


class ModelList(msgspec.Struct, kw_only=True):
    models: list[str]
    #: when it would not list them (``models`` is then empty), in our words: the URL and
    #: what went wrong — never the remote's body
    error: str | None = None
    #: the kind of failure: http, unreachable, timeout, not_json, no_model_list, too_large
    code: str | None = None
    #: the HTTP status it answered (``code`` http)
    status: int | None = None


class CommitMessage(msgspec.Struct, kw_only=True):
    message: str


class Prices(msgspec.Struct, kw_only=True):
    """The built-in prices (USD per million tokens, by model name prefix) under the user's
    (``state.prices``)."""

    defaults: dict[str, ev.ModelPrice]


class WebToolsInfo(msgspec.Struct, kw_only=True):
    """Settings → Tools: how the web tools are set up (Settings → Tools' own, over the server's
    ``config.json``'s ``web``); never the search key itself, only whether one is there."""

    #: networks a fetch may reach although they are private
    fetch_allow: list[str]
    fetch_max_bytes: int
    fetch_timeout_s: float
    #: ``none``, ``searxng`` or ``brave``
    search_kind: str
    search_url: str
    #: the environment variable the key is read from ("": none), and whether it is set
    search_key_env: str
    search_key_set: bool
    #: hosts a fetch reaches without asking (and those under them)
    fetch_domains: list[str] = msgspec.field(default_factory=list)
    #: a Brave key is kept by the server (pasted in Settings → Tools)
    search_key_stored: bool = False
    #: where these come from: ``settings`` (Settings → Tools) or ``config.json``
    source: Literal["settings", "config.json"] = "config.json"
    #: they can be changed here (not among replicas: config.json then)
    editable: bool = True


_Network = Annotated[str, msgspec.Meta(max_length=100, pattern=pattern(
    web_stored.NETWORK, "must be a network such as 10.1.0.0/16 or fd00::/8"))]
_Domain = Annotated[str, msgspec.Meta(min_length=1, max_length=253, pattern=pattern(
    web_stored.DOMAIN, "must be a domain name such as docs.python.org"))]
_SEARCH_URL = pattern("^$|" + HTTP_URL, "must be empty or an http:// or https:// URL: a host, "
                      "maybe a port, and a path")


class WebToolsBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``PUT /api/web-tools``: Settings → Tools. ``search_key``: a Brave Search API key to
    keep (None: keep the one kept; "": forget it)."""

    fetch_allow: Annotated[list[_Network], msgspec.Meta(max_length=200)] = msgspec.field(
        default_factory=list)
    fetch_domains: Annotated[list[_Domain], msgspec.Meta(max_length=200)] = msgspec.field(
        default_factory=list)
    search_kind: Literal["none", "searxng", "brave"] = "none"
    search_url: Annotated[str, msgspec.Meta(max_length=MAX_URL_CHARS,
                                            pattern=_SEARCH_URL)] = ""
    search_key: Annotated[str, msgspec.Meta(max_length=500, pattern=pattern(
        web_stored.API_KEY, "must be printable, with no space"))] | None = None


class Viewing(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The sessions a browser shows now (the one open, or the dashboard's): their model
    calls go first when a provider's rate limit runs low."""

    session_ids: Annotated[list[Annotated[str, msgspec.Meta(max_length=100)]],
                           msgspec.Meta(max_length=200)]


class Windows(msgspec.Struct, kw_only=True):
    """Model calls waiting in each provider's rate-limit window now."""

    queued: dict[str, int]


def _web_info(agent: AgentService) -> WebToolsInfo:
    setup = agent.web_config
    web = setup.config
    tools = agent.deps.web
    backend = tools.backend if tools is not None else None
    return WebToolsInfo(
        fetch_allow=list(web.fetch_allow), fetch_max_bytes=web.fetch_max_bytes,
        fetch_timeout_s=web.fetch_timeout_s, search_kind=web.search.kind,
        search_url=backend.url if backend is not None else web.search.url,
        search_key_env=web.search.api_key_env or "",
        search_key_set=backend is not None and bool(backend.api_key),
        fetch_domains=list(setup.fetch_domains),
        search_key_stored=bool(setup.stored and setup.stored.search_key),
        source="settings" if setup.stored is not None else "config.json",
        editable=not agent.settings.database_url)


class ConfigController(Resource):
    path = "/api"
    tags = ["server"]

    @get("/config", sync_to_thread=False, responses=errors())
    def config(self, engine: NamedDependency[Engine], settings: NamedDependency[Settings],
               agent: NamedDependency[AgentService]) -> ServerConfig:
        """The model providers sessions can use, from config.json and Settings → Models
        (never a credential)."""
        state, context = engine.state, engine.context
        providers = [
            ProviderInfo(name=p.name, kind=p.config.kind, base_url=p.config.base_url,
                         models=p.models, default_model=default_model(state, context, p.name),
                         auth=p.config.auth,
                         source="config.json" if p.name in context.file_providers
                         else "settings")
            for p in agent.providers.values()]
        default = default_provider(state, context)
        return ServerConfig(default_provider=default if default in agent.providers else "",
                            providers=providers)

    @get("/prices", sync_to_thread=False, responses=errors())
    def prices(self) -> Prices:
        """The built-in price table; Settings → Usage's prices (``set_prices``) go over it."""
        return Prices(defaults=dict(DEFAULT_PRICES))

    @get("/web-tools", sync_to_thread=False, responses=errors())
    def web_tools(self, agent: NamedDependency[AgentService]) -> WebToolsInfo:
        """How web_fetch and web_search are set up (Settings → Tools)."""
        return _web_info(agent)

    @put("/web-tools", status_code=200, sync_to_thread=False, responses=errors(400, 409))
    def set_web_tools(self, data: JSONBody[WebToolsBody],
                      agent: NamedDependency[AgentService]) -> WebToolsInfo:
        """Set up web_fetch and web_search (Settings → Tools): kept by the server over its
        config.json's ``web``, used by the turns that start from now on. The Brave key is
        kept in a file only the server reads, and never sent back."""
        settings = agent.settings
        if settings.database_url:
            raise ClientException("among replicas the web tools are set in each server's "
                                  "config.json (\"web\")", status_code=409)
        kept = agent.web_config.stored
        stored = web_stored.StoredWeb(
            fetch_allow=[e.strip() for e in data.fetch_allow if e.strip()],
            fetch_domains=[e.strip().lower().rstrip(".") for e in data.fetch_domains
                           if e.strip()],
            search_kind=data.search_kind, search_url=data.search_url.strip(),
            search_key=(kept.search_key if kept else "") if data.search_key is None
            else data.search_key.strip())
        problem = web_stored.check(stored)
        if problem is not None:  # (what the document's patterns let through and is no network)
            raise ClientException(problem, status_code=409)
        web_stored.save(settings.data_dir, stored)
        agent.set_web(stored)
        return _web_info(agent)

    @post("/viewing", status_code=200, responses=errors(400))
    async def viewing(self, data: JSONBody[Viewing],
                      agent: NamedDependency[AgentService]) -> Windows:
        """This browser shows these sessions now (said again every half minute while it
        does): they go first in a rate-limit queue. Answers what waits now."""
        agent.windows.viewing(data.session_ids)
        return Windows(queued=agent.windows.queued())

    @post("/providers/models", status_code=200, responses=errors(400))
    async def models(self, data: JSONBody[ModelQuery],
                     agent: NamedDependency[AgentService]) -> ModelList:
        """The models a provider's API lists (``GET /models``; Ollama's ``/api/tags``). The
        key sent is the one typed (``api_key``), else the saved provider's credential when
        ``base_url`` is its stored one, else none. A failure is a short kind, not the answer's
        body."""
        problem = url_problem(data.base_url)
        if problem is not None:
            raise ClientException(problem)
        token = data.api_key
        saved = agent.providers.get(data.provider) if data.provider is not None else None
        if token is None and saved is not None \
                and same_endpoint(saved.config.base_url, data.base_url):
            token = await agent.token_for(saved.name)
        try:
            return ModelList(models=await list_models(data.kind, data.base_url, token))
        except ModelError as err:
            return ModelList(models=[], error=err.message, code=err.code, status=err.status)

    @post("/providers/{name:str}/test", status_code=200, responses=errors(404))
    async def test(self, name: FromPath[str], engine: NamedDependency[Engine],
                   agent: NamedDependency[AgentService]) -> CallResult:
        """A minimal call to the provider's default model: its answer, or its own words."""
        provider = agent.providers.get(name)
        if provider is None:
            raise NotFoundException(f"no provider {name!r}")
        model = default_model(engine.state, engine.context, name) or provider.default_model
        if not model:
            return CallResult(ok=False, model="", error="no model: list or type its models")
        return await try_call(provider, model)

    @post("/sessions/{session_id:str}/worktree/draft-message", status_code=200,
          responses=errors(404, 409, 502))
    async def draft_message(self, session_id: FromPath[str], engine: NamedDependency[Engine],
                            agent: NamedDependency[AgentService]) -> CommitMessage:
        """A commit message for the session's whole change, drafted by its model (the user
        edits it before committing)."""
        s = engine.state.sessions.get(session_id)
        if s is None:
            raise NotFoundException(f"no session {session_id!r}")
        w = s.worktree
        if w is None or w.status != "ready":
            raise ClientException("the session has no worktree ready", status_code=409)
        provider = agent.providers.get(s.provider)
        if provider is None:
            raise ClientException(f"the provider {s.provider!r} is not configured",
                                  status_code=409)
        try:
            changes = await agent.deps.actions.run(s.worker_id, wk.WorkspaceDiff(
                action_id=engine.context.new_id("act"), session_id=session_id,
                workdir=w.path, base=w.base or w.base_commit), timeout=120)
        except (ActionFailed, TimeoutError) as err:
            raise ClientException(f"the machine could not read the change: {err}",
                                  status_code=409) from None
        assert isinstance(changes, wk.WorkspaceChanges)
        if not changes.files:
            raise ClientException("nothing changed yet", status_code=409)
        try:
            message = await draft_commit_message(provider, s.model or provider.default_model,
                                                 s.title, changes.diff)
        except ModelError as err:
            raise ClientException(err.message, status_code=502) from None
        return CommitMessage(message=message)
