"""Features as plugins (issue 35, item 5): ``features.PLUGINS`` is the one list, and the
engine's rules, the app's routes, the parts handed to handlers and the services' order all come
from it. A feature package is found by its ``plugin.py``; the import contracts name each one;
a part that asks for something nothing built before it provides fails when the services are
built; and the parts start and stop in the order the server has always used."""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

import pytest

from codey_protocol import events as ev
from codey_server import features, services
from codey_server.agent import fold as agent_fold
from codey_server.core import fold as core_fold
from codey_server.features import PLUGINS, RULES
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.services import PluginError, Services
from codey_server.settings import Settings

SERVER = Path(services.__file__).parent
PYPROJECT = SERVER.parents[3] / "pyproject.toml"


def _feature_packages() -> set[str]:
    return {p.parent.name for p in SERVER.glob("*/plugin.py")} - {"http"}


def test_every_feature_package_exports_one_plugin_and_the_list_holds_each_once() -> None:
    names = [p.name for p in PLUGINS]
    assert len(names) == len(set(names))
    assert set(names) == _feature_packages() | {"core"}
    for name in _feature_packages():
        module = __import__(f"codey_server.{name}.plugin", fromlist=["PLUGIN"])
        assert module.PLUGIN in PLUGINS and module.PLUGIN.name == name


def test_the_import_contracts_name_every_feature() -> None:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    independent = next(layer for layer in layers if "|" in layer and "agent" in layer)
    # add a new feature's package to this layer of pyproject.toml (its features never
    # import each other)
    assert {n.strip() for n in independent.split("|")} == _feature_packages()
    forbidden = next(c for c in contracts
                     if c["name"] == "only the deployment builds the replicas' machinery")
    assert {f"codey_server.{n}" for n in _feature_packages()} <= set(forbidden["source_modules"])


def test_the_rules_are_the_plugins_features_in_the_lists_order() -> None:
    assert [f.name for f in RULES.features] == [p.name for p in PLUGINS]
    assert RULES.folded() == frozenset().union(*(p.feature.fold for p in PLUGINS))
    # the core folds a session's life, the agent what happens in its turns: no event twice
    assert not set(core_fold.FOLD) & set(agent_fold.FOLD)
    assert ev.SessionCreated in core_fold.FOLD and ev.SessionItemAppended in agent_fold.FOLD
    assert ev.ProcessEnded not in core_fold.FOLD and ev.ApprovalResolved not in core_fold.FOLD
    # a task follows its session's status: the board folds it after the core
    folding_status = [p.name for p in PLUGINS if ev.SessionStatusChanged in p.feature.fold]
    assert folding_status == ["core", "board"]


def test_the_app_has_each_plugins_routes_and_the_static_client_last(tmp_path: Path) -> None:
    from codey_server.app import create_app

    app = create_app(Settings(data_dir=tmp_path))
    paths = [r.path for r in app.routes]
    # the static files answer every other path: added after every feature's routes
    assert paths.index("/") > max(i for i, p in enumerate(paths) if p.startswith(("/api", "/ws")))
    one_each = {"core": "/api/sessions", "browsers": "/ws/client", "workers": "/ws/worker",
                "providers": "/api/providers", "agent": "/api/config",
                "workspaces": "/api/sessions/{session_id:str}/changes",
                "terminals": "/api/terminals", "blobs": "/api/blobs", "mcp": "/mcp",
                "schedules": "/api/schedules", "board": "/api/tasks", "metrics": "/metrics",
                "channels": "/api/telegram", "push": "/api/push", "upgrades": "/api/about",
                "triggers": "/api/triggers",
                "checkpoints": "/api/sessions/{session_id:str}/checkpoints",

                "moves": "/api/sessions/{session_id:str}/move"}
    assert set(one_each) == {p.name for p in PLUGINS}
    assert set(one_each.values()) <= set(paths)


def test_handlers_get_every_part_by_name(tmp_path: Path) -> None:
    built = Services(Settings(data_dir=tmp_path))
    parts = {part.name for plugin in PLUGINS for part in plugin.parts}
    assert set(built.provided) == parts | {"settings", "engine", "actions", "blobs", "access"}
    assert built.provided["agent"] is built.agent is built.parts["agent"]


def test_the_parts_start_and_stop_in_the_order_the_server_always_used(tmp_path: Path) -> None:
    """The steps ``start()`` and ``stop()`` run between their own (the deployment, access,
    the engine, retention, the delivery), and the side effects of building: the engine's
    listeners in order, and what a logout closes."""
    built = Services(Settings(data_dir=tmp_path))

    def names(steps: list[object]) -> list[str]:
        return [getattr(s, "func", s).__qualname__ for s in steps]  # type: ignore[attr-defined]

    assert names(built._starts) == ["WorkerRegistry.start", "_start_pairing",
                                    "AuthService.start", "AgentService.start",
                                    "GoalRunner.start", "Workspaces.start", "PushService.start"]
    assert names(built._intake_starts) == ["Scheduler.start", "TelegramChannel.start"]
    assert names(built._intake_stops) == ["ClientHub.begin_shutdown", "CodeyMcp.stop",
                                          "Scheduler.stop", "TelegramChannel.stop"]
    assert names(built._stops) == ["AgentService.stop", "GoalRunner.stop",
                                   "Workspaces.stop", "PushService.stop", "Checkpoints.stop"]
    assert names(built._closes) == ["AuthService.stop"]
    assert [getattr(f, "__qualname__", "") for f in built.engine.listeners] == [
        "ProcessTails.on_event", "Presence._on_event", "Delivery._on_event",
        "WorkerRegistry._on_event", "AgentService._on_event", "GoalRunner._on_event",
        "Workspaces._on_event", "ServerMetrics._on_event", "Checkpoints._on_event"]
    assert names(built.access.on_logout) == ["ClientHub.close_session",
                                             "TerminalService.close_views_of"]


def test_a_server_built_from_the_plugins_starts_and_stops(tmp_path: Path) -> None:
    async def run() -> tuple[bool, bool]:
        built = Services(Settings(data_dir=tmp_path))
        await built.start()
        started = built.scheduler._task is not None  # an intake part, started last
        await built.stop()
        return started, built.scheduler._task is None

    assert asyncio.run(run()) == (True, True)


def test_a_part_asking_for_what_nothing_built_before_fails_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def needs_the_agent(agent: object) -> object:
        return agent

    early = FeaturePlugin("early", parts=(Part("early", needs_the_agent),))
    monkeypatch.setattr(services, "PLUGINS", (PLUGINS[0], early, *PLUGINS[1:]))
    with pytest.raises(PluginError, match="'early' needs agent"):
        Services(Settings(data_dir=tmp_path))

    late = FeaturePlugin("late", parts=(Part("late", needs_the_agent),))
    monkeypatch.setattr(services, "PLUGINS", (*PLUGINS, late))
    assert Services(Settings(data_dir=tmp_path)).late is not None

    taken = FeaturePlugin("again", parts=(Part("engine", needs_the_agent),))
    monkeypatch.setattr(services, "PLUGINS", (*PLUGINS, taken))
    with pytest.raises(PluginError, match="taken"):
        Services(Settings(data_dir=tmp_path))


def test_the_list_is_the_features_module_s() -> None:
    assert features.CORE is PLUGINS[0]
    assert all(isinstance(p, FeaturePlugin) for p in PLUGINS)
