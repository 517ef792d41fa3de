"""Who may call a route is marked on the route and read by the access layer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar import Litestar, get, post
from litestar.routes import ASGIRoute, HTTPRoute, WebSocketRoute
from litestar.testing import TestClient

from codey_server.app import create_app
from codey_server.http.access import (
    PUBLIC,
    UNPAIRED_WORKER,
    BrowserAccess,
    access_middleware,
    route_access,
)
from codey_server.settings import Settings

ORIGIN = "http://127.0.0.1:8765"


@get("/api/unmarked", sync_to_thread=False)
def unmarked() -> str:
    return "unmarked"


@get("/api/public", sync_to_thread=False, opt=PUBLIC)
def public() -> str:
    return "public"


@post("/api/worker", sync_to_thread=False, opt=UNPAIRED_WORKER)
def worker() -> str:
    return "worker"


@pytest.fixture
def access(tmp_path: Path) -> BrowserAccess:
    return BrowserAccess(Settings(data_dir=tmp_path, port=8765))


@pytest.fixture
def client(access: BrowserAccess) -> Iterator[TestClient[Litestar]]:
    app = Litestar([unmarked, public, worker], middleware=[access_middleware(access)],
                   debug=False, logging_config=None)
    with TestClient(app, base_url=ORIGIN) as c:
        yield c


def test_a_route_not_marked_needs_a_login(client: TestClient[Litestar],
                                          access: BrowserAccess) -> None:
    assert client.get("/api/unmarked").status_code == 401
    bearer = {"Authorization": f"Bearer {access.token}"}
    assert client.get("/api/unmarked", headers=bearer).text == "unmarked"


def test_a_route_marked_public_needs_none(client: TestClient[Litestar]) -> None:
    r = client.get("/api/public")
    assert r.status_code == 200 and r.text == "public"


def test_an_unpaired_worker_route_needs_no_login_but_refuses_a_foreign_origin(
        client: TestClient[Litestar]) -> None:
    assert client.post("/api/worker").status_code == 201
    assert client.post("/api/worker", headers={"Origin": ORIGIN}).status_code == 201
    assert client.post("/api/worker", headers={"Origin": "http://evil.example"}
                       ).status_code == 403


def test_the_host_check_comes_before_any_mark(client: TestClient[Litestar]) -> None:
    assert client.get("/api/public", headers={"Host": "evil.example"}).status_code == 403


def test_route_access_fails_closed() -> None:
    assert route_access({"type": "http", "method": "GET"}) == "browser"  # no route handler
    assert route_access({"type": "http", "method": "GET", "route_handler": unmarked}) == "browser"
    assert route_access({"type": "http", "method": "GET", "route_handler": public}) == "public"
    assert route_access({"type": "http", "method": "POST",
                         "route_handler": worker}) == "unpaired_worker"
    # Litestar's own OPTIONS answer (the allowed methods) needs no login
    assert route_access({"type": "http", "method": "OPTIONS",
                         "route_handler": unmarked}) == "public"


def test_the_servers_routes_that_need_no_login_are_exactly_these(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path))
    marks: dict[str, set[str]] = {"public": set(), "unpaired_worker": set()}
    for route in app.routes:
        handlers = (route.route_handlers if isinstance(route, HTTPRoute)
                    else [route.route_handler] if isinstance(route, WebSocketRoute | ASGIRoute)
                    else [])
        for handler in handlers:
            methods = getattr(handler, "http_methods", {"WS"}) - {"OPTIONS"}
            needs = route_access({"type": "http", "method": "GET", "route_handler": handler})
            if needs != "browser":
                marks[needs] |= {f"{m} {route.path}" for m in methods}
    assert marks["unpaired_worker"] == {
        "POST /api/pairing/requests", "GET /api/pairing/requests/{request_id:str}/wait",
        "WS /ws/worker"}
    public_api = {m for m in marks["public"] if " /api/" in m}
    # Telegram's webhook proves itself with its secret header (channels/telegram.py)
    assert public_api == {"GET /api/health", "GET /api/auth/callback",
                          "POST /api/telegram/webhook"}
    # the rest that is public: the static client, its icon, the OpenAPI document and the
    # worker's wheels for the install line
    # /mcp checks its own tokens (codey_server.mcp.server), not the browser's login
    assert "WS /mcp" in marks["public"]
    rest = {m.split(" ", 1)[1] for m in marks["public"] - public_api - {"WS /mcp"}}
    assert {"/", "/{file_path:path}", "/favicon.ico", "/schema/openapi.json",
            "/dl/index.json", "/dl/{key:str}/{name:str}"} <= rest
    # a trigger's webhook proves itself with its unguessable URL and its signature
    # (codey_server.triggers.routes)
    assert "/hooks/t/{hook_id:str}" in rest
    assert all(p in ("/", "/{file_path:path}", "/favicon.ico", "/hooks/t/{hook_id:str}")
               or p.startswith("/schema") or p.startswith("/dl/") for p in rest), rest
