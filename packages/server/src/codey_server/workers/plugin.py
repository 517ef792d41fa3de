"""The workers as a plugin: their sockets, pairing and keys (``/ws/worker``,
``/api/workers``, ``/api/pairing``, ``/dl/``), their commands and events; the worker
registry and pairing."""

from __future__ import annotations

from typing import Protocol

from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.core.hosting import Hosting
from codey_server.core.tails import ProcessTails
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.workers import decide, fold
from codey_server.workers.downloads import downloads_router
from codey_server.workers.keys import WorkerKeys
from codey_server.workers.pair_store import PairStore
from codey_server.workers.pairing import Pairing
from codey_server.workers.pairing_routes import PairingController
from codey_server.workers.routes import WorkersController, worker_socket
from codey_server.workers.sockets import WorkerRegistry

__all__ = ["PLUGIN"]


class _Stores(Protocol):
    @property
    def worker_keys(self) -> WorkerKeys: ...

    @property
    def pair_requests(self) -> PairStore: ...


def _keys(stores: _Stores) -> WorkerKeys:
    return stores.worker_keys


def _registry(engine: Engine, keys: WorkerKeys, actions: Delivery, deployment: Hosting,
              tails: ProcessTails) -> WorkerRegistry:
    return WorkerRegistry(engine, keys, actions, replica=deployment.replica, tails=tails)


def _pairing(engine: Engine, keys: WorkerKeys, stores: _Stores) -> Pairing:
    return Pairing(engine, keys, store=stores.pair_requests)


async def _start_pairing(pairing: Pairing, deployment: Hosting) -> None:
    # on a log other replicas share, the pending requests may be theirs
    await pairing.start(shared=deployment.replicated)


PLUGIN = FeaturePlugin(
    "workers",
    routes=(PairingController, WorkersController, worker_socket, downloads_router),
    commands=decide.COMMANDS,
    fold=fold.FOLD,
    # the registry starts before pairing (its start marks the sockets from before a restart)
    parts=(Part("keys", _keys),
           Part("workers", _registry, start=WorkerRegistry.start),
           Part("pairing", _pairing, start=_start_pairing)),
)
