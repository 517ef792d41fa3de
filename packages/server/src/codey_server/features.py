"""The features, put together: every browser command's decision and the whole fold.

Each feature package declares what it decides and folds (its ``decide.py`` and ``fold.py``);
this is the one list of them. Adding a feature is a package plus one line here (and its routes
in :mod:`codey_server.app`). The engine gets :data:`RULES`; tests fold and decide with
:func:`apply` and :func:`decide`.
"""

from __future__ import annotations

from codey_server.board import decide as board_decide
from codey_server.board import fold as board_fold
from codey_server.channels import fold as channels_fold
from codey_server.core import decide as core_decide
from codey_server.core import fold as core_fold
from codey_server.core.rules import Feature, Rules
from codey_server.providers import decide as providers_decide
from codey_server.providers import fold as providers_fold
from codey_server.schedules import decide as schedules_decide
from codey_server.schedules import fold as schedules_fold
from codey_server.terminals import fold as terminals_fold
from codey_server.upgrades import decide as upgrades_decide
from codey_server.upgrades import fold as upgrades_fold
from codey_server.workers import decide as workers_decide
from codey_server.workers import fold as workers_fold
from codey_server.workspaces import fold as workspaces_fold

__all__ = ["FEATURES", "RULES", "apply", "apply_all", "decide"]

FEATURES = (
    Feature("core", commands=core_decide.COMMANDS, fold=core_fold.FOLD),
    Feature("workers", commands=workers_decide.COMMANDS, fold=workers_fold.FOLD),
    Feature("workspaces", fold=workspaces_fold.FOLD),
    # after the core: a task follows its session's status once the session has it
    Feature("board", commands=board_decide.COMMANDS, fold=board_fold.FOLD),
    Feature("schedules", commands=schedules_decide.COMMANDS, fold=schedules_fold.FOLD),
    Feature("terminals", fold=terminals_fold.FOLD),
    Feature("channels", fold=channels_fold.FOLD),
    Feature("providers", commands=providers_decide.COMMANDS, fold=providers_fold.FOLD),
    Feature("upgrades", commands=upgrades_decide.COMMANDS, fold=upgrades_fold.FOLD),
)

RULES = Rules(FEATURES)
decide = RULES.decide
apply = RULES.apply
apply_all = RULES.apply_all
