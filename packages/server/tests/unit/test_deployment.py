"""The deployment is chosen once, from the settings: one server alone gets SQLite, the data
dir's files, no leases and nothing routed; ``database_url`` makes a replica of a cluster,
whose parts are all the cluster's. Building either does no I/O. And ``services.py`` takes the
deployment's parts without asking which it is."""

from __future__ import annotations

import ast
from pathlib import Path

from codey_server import services
from codey_server.blobs.store import BlobStore, PgBlobStore
from codey_server.core.engine import Engine
from codey_server.core.presence import Presence
from codey_server.deployment import Replica, SingleServer, deployment_for
from codey_server.eventlog import MemoryEventLog, SqliteEventLog
from codey_server.features import RULES
from codey_server.http.access_store import FileAccessStore, PgAccessStore
from codey_server.settings import Settings
from codey_server.workers.pair_store import MemoryPairStore, PgPairStore


class _Sockets:
    on_terminal = None

    async def send_to(self, worker_id: str, msg: object) -> bool:
        return False


def test_one_server_alone_has_its_files_no_leases_and_routes_nothing(tmp_path: Path) -> None:
    deployment = deployment_for(Settings(data_dir=tmp_path))
    assert isinstance(deployment, SingleServer)
    assert (deployment.replica, deployment.replicated) == ("", False)
    assert isinstance(deployment.event_log, SqliteEventLog)
    assert isinstance(deployment.stores.access, FileAccessStore)
    assert isinstance(deployment.stores.pair_requests, MemoryPairStore)
    assert type(deployment.stores.blobs) is BlobStore
    assert deployment.leases is None and deployment.refresh_guard is None
    engine = Engine(MemoryEventLog(), RULES)
    assert deployment.gate("retention", engine) is None
    assert deployment.delivery(engine, Presence(engine)).routes is None
    sockets = _Sockets()
    assert deployment.terminal_link(sockets, Presence(engine)) is sockets  # type: ignore[arg-type]


def test_a_database_url_makes_a_replica_whose_parts_are_the_clusters(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url="postgresql://nobody@127.0.0.1:9/x",
                        replica_id="r7")
    deployment = deployment_for(settings)  # nothing is connected yet
    assert isinstance(deployment, Replica)
    assert (deployment.replica, deployment.replicated) == ("r7", True)
    assert not isinstance(deployment.event_log, SqliteEventLog)
    assert isinstance(deployment.stores.access, PgAccessStore)
    assert isinstance(deployment.stores.pair_requests, PgPairStore)
    assert isinstance(deployment.stores.blobs, PgBlobStore)
    assert deployment.leases is not None and deployment.refresh_guard is not None
    engine = Engine(MemoryEventLog(), RULES)
    assert deployment.gate("retention", engine) is not None
    assert deployment.delivery(engine, Presence(engine, "r7")).routes is deployment.routes
    sockets = _Sockets()
    assert deployment.terminal_link(sockets, Presence(engine)) is not sockets  # type: ignore[arg-type]


def test_services_never_asks_which_deployment_it_has() -> None:
    tree = ast.parse(Path(services.__file__).read_text())
    asked = [ast.unparse(node.test) for node in ast.walk(tree)
             if isinstance(node, ast.If | ast.IfExp | ast.While)]
    words = ("deployment", "database", "cluster", "leases", "replica", "shared", "routes")
    assert not [a for a in asked if any(w in a for w in words)], asked


def test_no_feature_plugin_asks_which_deployment_it_has() -> None:
    """The parts' builders (``<feature>/plugin.py``) take the deployment's parts too, without
    asking which it is."""
    words = ("deployment", "database", "cluster", "leases", "replica", "shared", "routes")
    plugins = sorted(Path(services.__file__).parent.glob("*/plugin.py"))
    assert len(plugins) >= 12
    for module in plugins:
        tree = ast.parse(module.read_text())
        asked = [ast.unparse(node.test) for node in ast.walk(tree)
                 if isinstance(node, ast.If | ast.IfExp | ast.While)]
        assert not [a for a in asked if any(w in a for w in words)], (module, asked)
