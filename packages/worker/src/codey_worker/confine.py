"""Path confinement: every path an action names must resolve inside its workdir.

Both sides are compared after ``os.path.realpath``, so ``..`` segments, absolute paths and
symlinks (also dangling ones, also in a not-yet-existing target's parents) are judged by where
they really lead, not by how they are spelled. The containment test is
``os.path.commonpath``, never a string prefix, so ``/w/ws-evil`` is not inside ``/w/ws``.

What this cannot stop: a process that swaps a directory for a symlink between the check and the
use (a TOCTOU race). Commands the worker runs could do that, but they can already write anywhere
their user can, so the check is about what the *server* may name, not a sandbox.

Protected paths: the worker's own directory (``$CODEY_HOME``, holding its private key,
credential and config) usually lies inside an allowed root — the default root is the home
directory. :func:`protect` registers such a directory once, at worker start; from then on
:func:`resolve_inside` and :func:`check_root` refuse (``protected_path``) any real target equal
to it or below it. A workdir that merely *contains* it (the home directory) stays usable.

Raises :class:`ActionRefused` — the one refusal error every executor uses; the connection layer
turns it into an ``ActionErrored`` frame with the same ``code`` and ``message``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from codey_worker.errors import WorkerError


class ActionRefused(WorkerError):
    """The worker will not carry out an action.

    ``code`` is machine-readable (``"path_outside_workdir"``, ``"outside_allowed_roots"``,
    ``"protected_path"``, ``"denied_command"``, ``"bad_request"``, ``"not_found"``,
    ``"is_directory"``, ``"not_a_directory"``, ...); ``message`` says, for a human and for the
    model, what was refused.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"ActionRefused({self.code!r}, {self.message!r})"


def _check_text(value: str, what: str) -> None:
    if "\x00" in value:
        raise ActionRefused("bad_request", f"{what} contains a NUL byte")


def _is_within(path: str, root: str) -> bool:
    """True when the (already real) ``path`` is ``root`` or below it."""
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # e.g. one relative, one absolute: never inside
        return False


#: real paths no action may name (see the module docstring). Set once at worker start by
#: :func:`protect`; a tuple, so a check reads one consistent value without a lock.
_protected: tuple[str, ...] = ()


def protect(path: str | Path) -> None:
    """Refuse, from now on, every action path and workdir at or below ``path`` (made real).

    Call it once at worker start for ``$CODEY_HOME``. Idempotent.
    """
    global _protected
    real = os.path.realpath(os.fspath(path))
    if real not in _protected:
        _protected = (*_protected, real)


#: real directories ``read_file`` may read below although they are outside the workdir (and
#: perhaps inside a protected path): the user's own skills, ``$CODEY_HOME/skills``, whose
#: paths the model is given. Nothing else may name them.
_readable: tuple[str, ...] = ()


def allow_reading(path: str | Path) -> None:
    """Let ``read_file`` read files at or below ``path`` (made real) from any workdir."""
    global _readable
    real = os.path.realpath(os.fspath(path))
    if real not in _readable:
        _readable = (*_readable, real)


def readable_outside(path: str) -> Path | None:
    """The real target of an absolute ``path`` when it lies below a directory registered with
    :func:`allow_reading` (after resolving symlinks: a link out of it is not followed out),
    else None."""
    if not _readable or not os.path.isabs(path) or "\0" in path:
        return None
    target = os.path.realpath(path)
    if any(_subpath(target, root) for root in _readable):  # below it, not the folder itself
        return Path(target)
    return None


def readable_root(path: str) -> str | None:
    """The folder registered with :func:`allow_reading` that the absolute ``path`` names
    (by its text: the file API then resolves it beneath that folder), else None."""
    if not os.path.isabs(path) or "\0" in path:
        return None
    text = os.path.normpath(path)
    return next((root for root in _readable if _subpath(text, root)), None)


def protected_paths() -> tuple[str, ...]:
    """The real paths registered with :func:`protect`."""
    return _protected


def set_protected_paths(paths: Iterable[str | Path]) -> None:
    """Replace the protected paths (made real) — for tests that restore what was there."""
    global _protected
    _protected = tuple(dict.fromkeys(os.path.realpath(os.fspath(p)) for p in paths))


def _subpath(path: str, root: str) -> str | None:
    """What follows ``root`` in ``path`` ("" for ``root`` itself), or None when ``path`` is not
    at or below it. A plain string test: both must already be real paths."""
    if path == root:
        return ""
    prefix = root if root.endswith("/") else root + "/"
    return path[len(prefix):] if path.startswith(prefix) else None


def within(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """``path`` is ``root`` or below it: a plain string test, both must be real paths."""
    return _subpath(os.fspath(path), os.fspath(root)) is not None


def _protecting(target: str) -> str | None:
    """The protected path the real ``target`` is at or below, if any."""
    return next((root for root in _protected if _subpath(target, root) is not None), None)


def is_protected(target: str | Path) -> bool:
    """True when the (real) ``target`` is a protected path or lies below one."""
    return _protecting(os.fspath(target)) is not None


def check_protected(target: str | Path, shown: str | None = None) -> None:
    """Raise ``ActionRefused("protected_path")`` when the real ``target`` is a protected path
    or lies below one. ``shown`` is how the caller spelled it, for the message."""
    text = os.fspath(target)
    root = _protecting(text)
    if root is not None:
        raise ActionRefused(
            "protected_path",
            f"{shown if shown is not None else text} resolves to {text}, inside the worker's "
            f"own directory {root}, which no action may read, write or run in",
        )


def real_workdir(workdir: str | Path) -> Path:
    """The realpath of ``workdir``; refuses an empty or relative workdir.

    The workdir itself does not have to exist (``attach_session`` creates it).
    """
    text = os.fspath(workdir)
    _check_text(text, "workdir")
    if not text or not os.path.isabs(text):
        raise ActionRefused("bad_request", f"workdir must be an absolute path, got {text!r}")
    return Path(os.path.realpath(text))


def _plain_path(root: str, path: str) -> str | None:
    """``root/path`` when that is already its real path, else None (resolve it the long way).

    ``root`` must be real. Then ``root/path`` is real when ``path`` is relative, has no ``..``
    and none of its components is a symlink: one ``lstat`` per component of ``path``, where
    ``os.path.realpath`` would ``lstat`` every component of ``root`` too (a 1 KiB read spent
    most of its time there). Anything unusual — an absolute path, ``..``, a symlink, a
    component that is missing or cannot be examined — answers None.
    """
    if path.startswith("/"):
        return None
    current = root
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            return None
        current = f"{current}/{part}" if current != "/" else f"/{part}"
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return None
        except OSError:
            return None
    return current


def resolve_inside(workdir: str | Path, path: str, *, real: bool = False) -> Path:
    """Return the real path of ``path`` (relative to ``workdir``, or absolute) inside ``workdir``.

    ``""`` and ``"."`` mean the workdir itself. The target need not exist: symlinks are resolved
    as far as the path exists and the rest is taken literally, so a new file under a symlinked
    directory is judged by where that directory really is. ``real=True`` says ``workdir`` is
    already a real path (from :func:`real_workdir` or the policy), so it is not resolved again.

    Raises ``ActionRefused("path_outside_workdir")`` when the real target is outside the real
    workdir, ``ActionRefused("protected_path")`` when it is at or below a protected path
    (:func:`protect`), and ``ActionRefused("bad_request")`` for a relative workdir or a NUL byte.
    """
    root = os.fspath(workdir) if real else str(real_workdir(workdir))
    _check_text(path, "path")
    plain = _plain_path(root, path)
    if plain is not None:
        check_protected(plain, repr(path))
        return Path(plain)
    joined = os.path.join(root, path) if path else root  # an absolute ``path`` replaces root
    target = os.path.realpath(joined)
    if not _is_within(target, root):
        raise ActionRefused(
            "path_outside_workdir",
            f"{path!r} resolves to {target}, which is outside the workdir {root}",
        )
    check_protected(target, repr(path))
    return Path(target)


@dataclass(frozen=True)
class Root:
    """An allowed root as it was when pinned: its real path and that directory's identity.

    The fast path below a root trusts the root's spelling only while it still names the same
    directory (same ``st_dev``/``st_ino``, checked with one ``lstat``); a root swapped for a
    symlink, or replaced, sends every check the long way, against the pinned real path.
    """

    path: str
    ident: tuple[int, int] | None  # None: it did not exist when pinned

    @classmethod
    def pin(cls, root: str | Path) -> Root:
        real = os.path.realpath(os.fspath(root))
        try:
            info = os.stat(real)
        except OSError:
            return cls(real, None)
        return cls(real, (info.st_dev, info.st_ino))

    def unchanged(self) -> bool:
        if self.ident is None:
            return False
        try:
            info = os.lstat(self.path)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self.ident


def check_root(path: str | Path, allowed_roots: Iterable[str | Path | Root]) -> Path:
    """Return the real path of ``path`` if it lies inside one of ``allowed_roots`` (also real).

    Roots given as paths are pinned (:meth:`Root.pin`) on each call; the policy pins its roots
    once, so a root repointed later cannot widen what is allowed.
    Raises ``ActionRefused("outside_allowed_roots")`` otherwise (also when there are no roots),
    ``ActionRefused("protected_path")`` for a path at or below a protected path (a root that
    merely contains one is fine), and ``ActionRefused("bad_request")`` for a relative path.
    """
    text = os.fspath(path)
    _check_text(text, "workdir")
    if not text or not os.path.isabs(text):
        raise ActionRefused("bad_request", f"workdir must be an absolute path, got {text!r}")
    roots = [r if isinstance(r, Root) else Root.pin(r) for r in allowed_roots]
    for root in roots:
        # the usual case, a plain directory below an unchanged root: no realpath needed
        rest = _subpath(text, root.path)
        if rest is not None and root.unchanged():
            plain = _plain_path(root.path, rest)
            if plain is not None:
                check_protected(plain)
                return Path(plain)
    target = os.path.realpath(text)
    if any(_is_within(target, r.path) for r in roots):
        check_protected(target, text)
        return Path(target)
    shown = ", ".join(r.path for r in roots) if roots else "(none configured)"
    raise ActionRefused(
        "outside_allowed_roots",
        f"{text} resolves to {target}, outside this worker's allowed roots: {shown}",
    )


def relative_display(workdir: Path, target: Path) -> str:
    """``target`` relative to the (real) ``workdir``, "/" separated; ``"."`` for the workdir."""
    root, path = os.fspath(workdir), os.fspath(target)
    rest = _subpath(path, root)
    if rest is not None:  # inside, as every confined path is: no relpath needed
        return rest or "."
    return Path(os.path.relpath(path, root)).as_posix()


__all__ = [
    "ActionRefused", "Root", "allow_reading", "check_protected", "check_root", "is_protected",
    "protect", "protected_paths", "readable_outside", "readable_root", "real_workdir",
    "relative_display", "resolve_inside", "set_protected_paths", "within",
]  # fmt: skip
