"""Report files changed under attached workdirs as ``WorkspaceChanged`` events.

One ``watchfiles.awatch`` task per attached session. Changes are debounced (~300 ms: a burst
of writes becomes one event), paths are relative to the workdir ("/" separated, sorted), and
anything under ``.git``, ``node_modules``, ``__pycache__`` or ``.venv`` is ignored, and so is the
worker's own protected directory (:func:`codey_worker.confine.protect`; its records database
changes with every action, and its file names are not the server's business). Watching is
best effort: a workdir that cannot be watched is logged and left alone, never an action error.

A session reports only its own changes: those seen while one of its actions runs, or within
:data:`ATTRIBUTION_SLACK_S` after its last one ended (the dispatcher calls :meth:`acting` and
:meth:`acted` around each action that may change files). Several sessions often share a
folder: another session's files, or the user's own edits between turns, are not this one's
"changed files". Two sessions acting in one folder at the same moment see each other's
changes (a watcher cannot tell who wrote a file). An AGENTS.md someone else edits mid-turn is
read at the next turn's start.

At most :data:`MAX_WATCHES` watches run at once (the sessions that acted last keep theirs):
outside its actions a session's watch reports nothing anyway, so a session whose watch was
stopped gets it back at its next action that may change files, as at its attach (best
effort: what that action writes before the watch is up is not seen). A worker up for weeks
kept a watch for every session it ever attached, two threads and five descriptors each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from codey_protocol import codec
from codey_protocol.worker import WorkspaceChanged
from codey_worker.confine import is_protected

if TYPE_CHECKING:
    from watchfiles import Change

__all__ = ["IGNORED_DIRS", "WorkspaceWatcher", "relevant"]

log = logging.getLogger(__name__)

IGNORED_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv"})
DEBOUNCE_MS = 300
MAX_PATHS = 500  # paths per event; a huge checkout or build is summarised by its first ones
#: changes reported this long after a session's last action ended are still its own: a burst
#: is reported DEBOUNCE_MS after it settles, later on a busy machine
ATTRIBUTION_SLACK_S = 2.0

#: watches running at once (issue 36)
MAX_WATCHES = 32

#: suffix of the temporary files patch.py and fs.py write before renaming into place
TEMP_SUFFIX = ".codey-tmp"

Send = Callable[[bytes], Awaitable[None]]


def _import_watchfiles() -> None:
    import anyio._backends._asyncio  # noqa: F401  (what awatch's first call imports)
    import watchfiles  # noqa: F401


def relevant(workdir: Path, path: str) -> str | None:
    """``path`` relative to ``workdir`` ("/" separated), or None when it is to be ignored."""
    try:
        rel = Path(os.path.relpath(path, workdir))
    except ValueError:
        return None
    parts = rel.parts
    if not parts or parts[0] == ".." or any(p in IGNORED_DIRS for p in parts):
        return None
    if parts[-1].endswith(TEMP_SUFFIX):  # our own atomic writes, renamed a moment later
        return None
    if is_protected(path):
        return None
    return rel.as_posix()


class WorkspaceWatcher:
    """Watches attached workdirs; ``send`` gets encoded ``WorkspaceChanged`` frames."""

    def __init__(self, send: Send, debounce_ms: int = DEBOUNCE_MS,
                 slack_s: float = ATTRIBUTION_SLACK_S, max_watches: int = MAX_WATCHES) -> None:
        self._send = send
        self._debounce_ms = debounce_ms
        self._slack_s = slack_s
        self._max_watches = max_watches
        self._workdirs: dict[str, Path] = {}  # session id → its workdir: the attached ones
        #: the watches running, the session that acted last at the end
        self._tasks: dict[str, tuple[Path, asyncio.Task[None], asyncio.Event]] = {}
        self._stopping: set[asyncio.Task[None]] = set()  # told to stop, not yet ended
        #: session id → set once its watch has its inotify watches (or gave up)
        self._ready: dict[str, asyncio.Event] = {}
        self._acting: dict[str, int] = {}  # session id → its actions running now
        self._acted: dict[str, float] = {}  # session id → when its last action ended

    def acting(self, session_id: str) -> None:
        """An action of ``session_id`` that may change files starts: what changes is its
        (and its watch runs, again if it was stopped)."""
        self._acting[session_id] = self._acting.get(session_id, 0) + 1
        workdir = self._workdirs.get(session_id)
        current = self._tasks.pop(session_id, None)
        if current is not None:  # it runs (or it ended on its own: not again per action)
            self._tasks[session_id] = current  # used last now
        elif workdir is not None:  # stopped for the others'
            self._start(session_id, workdir)

    def acted(self, session_id: str) -> None:
        """That action ended (call once per :meth:`acting`)."""
        left = self._acting.get(session_id, 0) - 1
        if left > 0:
            self._acting[session_id] = left
        else:
            self._acting.pop(session_id, None)
        self._acted[session_id] = time.monotonic()

    def _own(self, session_id: str) -> bool:
        """Changes seen now are the session's own."""
        if self._acting.get(session_id):
            return True
        ended = self._acted.get(session_id)
        return ended is not None and time.monotonic() - ended <= self._slack_s

    @property
    def sessions(self) -> list[str]:
        """Session ids being watched, their watch running or not."""
        return list(self._workdirs)

    @property
    def running(self) -> list[str]:
        """Session ids whose watch runs now, the one that acted last at the end."""
        return [sid for sid, (_, task, _) in self._tasks.items() if not task.done()]

    def watch(self, session_id: str, workdir: Path) -> None:
        """Start watching ``workdir`` for ``session_id`` (again: a no-op for the same dir)."""
        self._workdirs[session_id] = workdir
        self._start(session_id, workdir)

    def _start(self, session_id: str, workdir: Path) -> None:
        current = self._tasks.pop(session_id, None)  # and in again, last
        if current is not None and current[0] == workdir and not current[1].done():
            self._tasks[session_id] = current
            return
        if current is not None:
            self._stop(current)
        stop = asyncio.Event()
        ready = self._ready[session_id] = asyncio.Event()
        task = asyncio.create_task(self._run(session_id, workdir, stop, ready),
                                   name=f"watch-{session_id}")
        self._tasks[session_id] = (workdir, task, stop)
        # the watches of the sessions that acted longest ago stop (not one acting now)
        for sid in list(self._tasks)[:-1]:
            if len(self._tasks) <= self._max_watches:
                break
            if not self._acting.get(sid):
                self._stop(self._tasks.pop(sid))

    def _stop(self, watch: tuple[Path, asyncio.Task[None], asyncio.Event]) -> None:
        _, task, stop = watch
        stop.set()
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def until_ready(self, session_id: str, timeout: float = 2.0) -> None:
        """Wait (at most ``timeout``) until ``session_id``'s watch sees changes: the watch
        starts in a task that first imports watchfiles in a thread, and on a loaded machine
        a session's first write, right after its attach, came before it and was never
        listed as changed."""
        ready = self._ready.get(session_id)
        if ready is None or ready.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ready.wait(), timeout)

    async def _run(self, session_id: str, workdir: Path, stop: asyncio.Event,
                   ready: asyncio.Event) -> None:
        try:
            await self._watch(session_id, workdir, stop, ready)
        finally:
            ready.set()  # nobody waits on a watch that ended

    async def _watch(self, session_id: str, workdir: Path, stop: asyncio.Event,
                     ready: asyncio.Event) -> None:
        # imported on the first attach, not at the worker's start (an idle worker stays
        # small), and in a thread: watchfiles and the anyio backend it runs on took the
        # loop ~20-40 ms, which the session's first command (attached at the same moment)
        # waited for
        await asyncio.to_thread(_import_watchfiles)
        from watchfiles import awatch

        def keep(change: Change, path: str) -> bool:
            return relevant(workdir, path) is not None

        # awatch makes its inotify watches (RustNotify) before its first await: a callback
        # scheduled now runs after they are in place
        asyncio.get_running_loop().call_soon(ready.set)
        try:
            async for changes in awatch(workdir, watch_filter=keep, debounce=self._debounce_ms,
                                        step=50, stop_event=stop, recursive=True):
                if not self._own(session_id):
                    continue  # another session's, or the user's between turns
                # files only: a directory made for them is not a "changed file"
                paths = sorted({p for _, path in changes
                                if (p := relevant(workdir, path)) and not os.path.isdir(path)})
                if not paths:
                    continue
                frame = WorkspaceChanged(session_id=session_id, paths=paths[:MAX_PATHS])
                try:
                    await self._send(codec.encode(frame))
                except Exception:  # a dropped connection must not end the watch
                    log.debug("could not report workspace changes", exc_info=True)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("stopped watching %s", workdir, exc_info=True)

    def unwatch(self, session_id: str) -> bool:
        """Stop watching for ``session_id``; False if it was not watched."""
        was = self._workdirs.pop(session_id, None) is not None
        self._ready.pop(session_id, None)
        current = self._tasks.pop(session_id, None)
        self._acted.pop(session_id, None)
        if current is not None:
            self._stop(current)
        return was

    async def close(self) -> None:
        """Stop every watch."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        self._workdirs.clear()
        self._ready.clear()
        for watch in tasks:
            self._stop(watch)
        for task in list(self._stopping):
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 2)
