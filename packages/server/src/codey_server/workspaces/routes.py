"""``/api/sessions/{id}/changes`` and ``/api/sessions/{id}/worktree/*``: a session's whole
change against its base, and the user's commit, merge, push and removal of its worktree.

Each operation is the worker's own git action, shown in the session as an item; a refusal
(``dirty``, ``unmerged``, ``gh_missing``, …) is a 409 whose ``extra.code`` says which.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from litestar import get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from codey_protocol import client as cl
from codey_protocol import worker as wk
from codey_server.core.engine import Engine
from codey_server.http.errors import errors
from codey_server.http.fields import NonBlank
from codey_server.http.resource import Resource
from codey_server.workspaces.service import Workspaces

__all__ = ["WorktreeController"]


class CommitBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    message: Annotated[NonBlank, msgspec.Meta(max_length=10_000)]
    #: the files to commit, as the change names them (a rename's old path too); nothing
    #: else goes in. Omitted: everything in the worktree
    paths: Annotated[list[Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]],
                     msgspec.Meta(max_length=20_000)] | None = None


class MergeBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    mode: Literal["ff", "rebase"] = "rebase"


class PushBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    open_pr: bool = False
    title: Annotated[str, msgspec.Meta(max_length=300)] = ""
    body: Annotated[str, msgspec.Meta(max_length=20_000)] = ""


class RemoveBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    #: remove it even with uncommitted changes or commits its base does not have
    force: bool = False
    delete_branch: bool = False


class Resolving(msgspec.Struct, kw_only=True):
    """The base merged into the branch: the files left in conflict, and whether the agent was
    asked to resolve them (a follow-up prompt)."""

    conflicts: list[str]
    prompted: bool


def resolve_prompt(base: str, conflicts: list[str]) -> str:
    """The follow-up that hands a conflict to the agent."""
    files = "\n".join(f"- {path}" for path in conflicts)
    return (f"Merging {base} into this branch left conflicts in these files:\n{files}\n\n"
            "Resolve the conflicts with " + base + ": edit each file so that it keeps what both "
            "sides meant, and remove every conflict marker (<<<<<<<, =======, >>>>>>>). Do not "
            "run git commands; I will commit the result and merge it.")


class WorktreeController(Resource):
    path = "/api/sessions"
    tags = ["workspaces"]

    @get("/{session_id:str}/changes", responses=errors(404, 409))
    async def changes(self, session_id: FromPath[str],
                      workspaces: NamedDependency[Workspaces]) -> wk.WorkspaceChanges:
        """Everything the session's worktree changed against its base: committed and not,
        per file with +/− counts, and the unified diff (from the merge base)."""
        return await workspaces.changes(session_id)

    @post("/{session_id:str}/worktree/commit", status_code=200, responses=errors(404, 409))
    async def commit(self, session_id: FromPath[str], data: JSONBody[CommitBody],
                     workspaces: NamedDependency[Workspaces]) -> wk.WorkspaceCommitted:
        """Commit the chosen files of the worktree (all of them without ``paths``); it
        concludes a merge the agent resolved."""
        outcome = await workspaces.commit(session_id, data.message, data.paths)
        assert isinstance(outcome, wk.WorkspaceCommitted)
        return outcome

    @post("/{session_id:str}/worktree/merge", status_code=200, responses=errors(404, 409))
    async def merge(self, session_id: FromPath[str], data: JSONBody[MergeBody],
                    workspaces: NamedDependency[Workspaces]) -> wk.WorkspaceMerged:
        """Merge the branch into its base: a fast-forward, or a rebase then one. A conflict
        leaves nothing half-done and names the files (``merged: false``)."""
        outcome = await workspaces.merge(session_id, data.mode)
        assert isinstance(outcome, wk.WorkspaceMerged)
        return outcome

    @post("/{session_id:str}/worktree/resolve", status_code=200, responses=errors(404, 409))
    async def resolve(self, session_id: FromPath[str], engine: NamedDependency[Engine],
                      workspaces: NamedDependency[Workspaces]) -> Resolving:
        """Give a conflict with the base to the agent: the base is merged into the branch,
        its conflicts left in the files, and the agent asked to resolve them."""
        outcome = await workspaces.update(session_id)
        assert isinstance(outcome, wk.WorkspaceMerged)
        s = engine.state.sessions[session_id]
        if not outcome.conflicts:
            return Resolving(conflicts=[], prompted=False)
        base = s.worktree.base if s.worktree is not None else "the base"
        await engine.execute(cl.SendPrompt(session_id=session_id,
                                           text=resolve_prompt(base, outcome.conflicts)))
        return Resolving(conflicts=outcome.conflicts, prompted=True)

    @post("/{session_id:str}/worktree/push", status_code=200, responses=errors(404, 409))
    async def push(self, session_id: FromPath[str], data: JSONBody[PushBody],
                   workspaces: NamedDependency[Workspaces]) -> wk.WorkspacePushed:
        """Push the branch; with ``open_pr``, open a pull request with ``gh`` on the worker's
        machine (409 ``gh_missing`` / ``gh_not_logged_in`` when it cannot)."""
        outcome = await workspaces.push(session_id, open_pr=data.open_pr, title=data.title,
                                        body=data.body)
        assert isinstance(outcome, wk.WorkspacePushed)
        return outcome

    @post("/{session_id:str}/worktree/recreate", status_code=200, responses=errors(404, 409))
    async def recreate(self, session_id: FromPath[str],
                       workspaces: NamedDependency[Workspaces]) -> wk.WorkspaceReady:
        """Make a removed worktree again at its place, from its branch (409 ``conflict``
        while it is not removed or its branch is gone, ``branch_gone`` when the machine finds
        the branch gone); the session's turns run there again once it is ready."""
        outcome = await workspaces.recreate(session_id)
        assert outcome is not None  # (made again: never "no repository" without an error)
        return outcome

    @post("/{session_id:str}/worktree/remove", status_code=200, responses=errors(404, 409))
    async def remove(self, session_id: FromPath[str], data: JSONBody[RemoveBody],
                     workspaces: NamedDependency[Workspaces]) -> wk.WorkspaceRemoved:
        """Remove the worktree (its branch stays unless ``delete_branch``). A dirty or
        unmerged one is refused (409 ``dirty`` / ``unmerged``) unless ``force``."""
        outcome = await workspaces.remove(session_id, force=data.force,
                                          delete_branch=data.delete_branch)
        assert isinstance(outcome, wk.WorkspaceRemoved)
        return outcome
