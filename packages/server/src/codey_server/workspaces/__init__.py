"""Git workspaces: a worktree per session, the review of its whole change, and shipping it.

    decide.py    the pure decisions: a git operation's item, its end, the worktree's state
    fold.py      ``worktree_updated`` into the session (its workdir once ready)
    service.py   ``Workspaces(engine, actions)``: makes a session's worktree before its first
                 turn, counts its change after each turn, runs the user's commit / merge /
                 push / removal on the worker
    routes.py    ``/api/sessions/{id}/changes`` and ``/api/sessions/{id}/worktree/*``

The git operations are the worker's own (``workspace_*`` actions), run on the user's word,
never a model's command: the sandbox keeps ``.git`` read-only for the model.
"""
