"""The task board as a plugin: ``/api/tasks``, its commands, and its fold (a task follows its
session's status: listed after the core, which folds that status first)."""

from __future__ import annotations

from codey_server.board import decide, fold
from codey_server.board.routes import TasksController
from codey_server.http.plugin import FeaturePlugin

__all__ = ["PLUGIN"]

PLUGIN = FeaturePlugin("board", routes=(TasksController,), commands=decide.COMMANDS,
                       fold=fold.FOLD)
