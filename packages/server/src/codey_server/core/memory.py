"""The project memory of a session: kept per repository, found by folder as before (pure).

Memory used to be kept per machine and folder (``worker_id:workdir``), so a session in a new
worktree of a repository started with "Nothing remembered", and the notes of one repository
were split between its folders (issue 33, item 7). A session's memory is now its
repository's — the folder of its main checkout: the worktree's ``repo_root``, or the one the
worker found the workdir in (``Environment.repo_root``, at each context load) — with the
folders it used to be kept for as the fallback: the folder picked for the worktree, and the
workdir. No stored event changes meaning: a ``memory_updated`` still holds one folder's
memory; a repository's is the one of its main checkout's folder.

* :func:`memory_places` — the session's folders, the one its memory is kept for first;
* :func:`memory_text` — what the session remembers: the first place's text, then the lines
  of the others' it lacks (a folder's notes written before memory was per repository are
  still found, beside the repository's);
* :func:`memory_written` — the events of a new text: kept for the first place, and the other
  places' notes, shown with it and so part of it now, emptied (a line deleted in the new text
  does not come back from there).

``web/memory.js`` is the same in the browser; a test runs both on the same sessions.
"""

from __future__ import annotations

from codey_protocol import events as ev
from codey_protocol.state import SessionInfo, State, memory_key

__all__ = ["memory_places", "memory_text", "memory_written"]


def memory_places(s: SessionInfo) -> list[str]:
    """The folders whose memory is the session's, each once: the repository's (its main
    checkout's folder) when known, then the folder picked for its worktree, then its
    workdir."""
    w = s.worktree
    env = s.context.environment if s.context is not None else None
    places = [w.repo_root if w is not None else None, env.repo_root if env else None,
              w.repo if w is not None else None, s.workdir]
    return list(dict.fromkeys(p for p in places if p))


def _texts(state: State, s: SessionInfo) -> list[tuple[str, str]]:
    out = []
    for place in memory_places(s):
        memory = state.memories.get(memory_key(s.worker_id, place))
        out.append((place, memory.text if memory is not None else ""))
    return out


def memory_text(state: State, s: SessionInfo) -> str:
    """What the session remembers (see the module docstring)."""
    text = ""
    seen: set[str] = set()
    for _, more in _texts(state, s):
        lines = [line for line in more.splitlines() if line.strip()]
        if not text.strip():
            text = more if lines else text
        else:
            extra = [line for line in lines if line.strip() not in seen]
            if extra:
                text = text.rstrip("\n") + "\n" + "\n".join(extra)
        seen |= {line.strip() for line in lines}
    return text


def memory_written(state: State, s: SessionInfo, text: str) -> list[ev.MemoryUpdated]:
    """The events of the session's memory becoming ``text``: kept for its first place; the
    other places that held notes (shown with it, so part of ``text`` now) emptied."""
    places = _texts(state, s)
    out = [ev.MemoryUpdated(worker_id=s.worker_id, workdir=places[0][0], text=text)]
    out += [ev.MemoryUpdated(worker_id=s.worker_id, workdir=place, text="")
            for place, held in places[1:] if held.strip()]
    return out
