"""The OS sandbox around the commands (and MCP servers) the worker runs.

Three parts:

* **pure** — :func:`bwrap_args` (Linux, bubblewrap) and :func:`seatbelt_profile` /
  :func:`seatbelt_args` (macOS, ``sandbox-exec``) turn a :class:`SandboxSpec` into the argv
  prefix that wraps a command. They start no process; they only look at which paths exist
  (``.git`` a directory or a file, a hidden path a folder or a file).
* **detection** — :func:`detect` finds ``bwrap`` and checks that ``bwrap --ro-bind / / …
  true`` with every namespace the worker asks for really works here (or ``sandbox-exec`` on
  macOS); the answer is cached for the process.
* **runtime** — :class:`Sandbox`: the detected support, the owner's settings
  (``worker-config.json`` → ``sandbox``) and ``$CODEY_HOME``; it makes each session's private
  temp dir and wraps an argv, or raises ``ActionRefused("sandbox_unavailable")`` when this
  machine has no working sandbox (a command is never run bare for lack of one).

Linux layout, in mount order (later mounts cover earlier ones)::

    --ro-bind / /                      everything read-only
    --dev /dev, --proc /proc           a minimal /dev; a procfs of the new PID namespace, so
                                       the worker's /proc/<pid>/environ is not there to read
    /tmp                               workspace-write: the session's private dir
                                       ($CODEY_HOME/sandbox/tmp/<session>), TMPDIR=/tmp;
                                       read-only: an empty tmpfs, gone with the command
    --bind <root> <root>               workspace-write: the workdir and the owner's
                                       writable_paths
    --ro-bind <p> <p>                  (the worker's own git) what it reads under /tmp
    --ro-bind <p> <p>                  inside each writable root: .git (a folder, or a file
                                       and the gitdir/commondir it points to) and .codey
    --bind <p> <p>                     (the worker's own git) what the operation writes: a
                                       .git, a work tree, a new worktree's folder
    --tmpfs <p> --remount-ro <p>       hidden folders (codey_worker.hidden: $CODEY_HOME,
                                       ~/.ssh, ...): empty; (a push) the ssh agent's socket
                                       bound in before the folder turns read-only
    --ro-bind /dev/null <p>            hidden files (~/.netrc, a socket); with the network
                                       off, every Unix socket under /run
    --unshare-pid --unshare-ipc        own PID and IPC namespaces; --unshare-net unless the
    --new-session --die-with-parent    network is on; a new session (no TIOCSTI on the
                                       worker's terminal); the sandbox dies with the worker
    --unshare-user --disable-userns    when bwrap supports it: no nested user namespaces

Processes: bwrap's outer process is the command's process in the worker's eyes; inside, its
PID 1 reaps and reports the command's exit. When the command exits, bwrap exits, PID 1 gets
SIGKILL (``--die-with-parent``) and the kernel kills whatever else ran in the namespace, so a
command's background processes never outlive it. A command killed by signal N exits 128+N
(bwrap, like a shell, cannot say otherwise).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from codey_protocol.worker import SandboxInfo, SandboxMode
from codey_worker.confine import ActionRefused, protected_paths, within
from codey_worker.files import Boundary
from codey_worker.hidden import ALWAYS_HIDDEN, DEFAULT_HIDDEN_PATHS, SocketScan, expand_all
from codey_worker.warm import WarmBoxes

__all__ = [
    "DEFAULT_HIDDEN_PATHS",
    "Sandbox",
    "SandboxMode",
    "SandboxSettings",
    "SandboxSpec",
    "SandboxSupport",
    "bwrap_args",
    "detect",
    "protected_subpaths",
    "sandbox_denial",
    "seatbelt_args",
    "seatbelt_profile",
]

#: inside a writable root, re-bound read-only: a command must not plant hooks or config that
#: the worker's own git operations (run outside the sandbox) would then obey
PROTECTED_NAMES = (".git", ".codey")

_PROBE_TIMEOUT_S = 10.0


# ---------------------------------------------------------------------------------------------
# what is asked and what is there


@dataclass(frozen=True)
class SandboxSettings:
    """The owner's choices (``worker-config.json`` → ``sandbox``), paths as written (``~`` and
    ``$VAR`` are expanded when used)."""

    hidden_paths: tuple[str, ...] = DEFAULT_HIDDEN_PATHS
    writable_paths: tuple[str, ...] = ()

    def hidden(self) -> list[Path]:
        """The owner's hidden paths and :data:`~codey_worker.hidden.ALWAYS_HIDDEN`, expanded."""
        return expand_all((*self.hidden_paths, *ALWAYS_HIDDEN))

    def writable(self) -> list[Path]:
        return expand_all(self.writable_paths)


@dataclass(frozen=True)
class SandboxSupport:
    """What this machine can enforce, as :func:`detect` found it."""

    kind: Literal["bwrap", "seatbelt", "none"]
    path: str = ""  # the bwrap or sandbox-exec executable
    version: str = ""
    reason: str = ""  # why none
    #: bwrap takes ``--unshare-user --disable-userns`` here (0.8+, and the kernel allows it)
    disable_userns: bool = False

    @property
    def available(self) -> bool:
        return self.kind != "none"

    def info(self) -> SandboxInfo:
        return SandboxInfo(kind=self.kind, version=self.version, reason=self.reason)

    def describe(self) -> str:
        """One line for the worker's terminal."""
        if self.kind == "bwrap":
            return f"bubblewrap {self.version}".strip()
        if self.kind == "seatbelt":
            return "seatbelt (sandbox-exec)"
        return (f"none ({self.reason}); commands are refused unless a session runs them "
                "with full access")


@dataclass(frozen=True)
class SandboxSpec:
    """One sandboxed run: every path absolute and resolved (the caller checked them)."""

    mode: SandboxMode  # never "full-access": that runs without a wrapper
    network: bool
    workdir: Path
    cwd: Path
    #: the private /tmp (workspace-write commands: the session's dir); None: a throwaway one
    tmp: Path | None
    home: Path  # $CODEY_HOME, always hidden
    hidden: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()  # the owner's extra writable roots (workspace-write)
    #: Unix socket files to cover (the network is off: a socket reaches past it)
    sockets: tuple[Path, ...] = ()
    #: what the worker's own git reads (a worktree's main ``.git``): shown read-only even
    #: where the private /tmp would cover it
    readable: tuple[Path, ...] = ()
    #: what the worker's own git writes (a ``.git``, a new worktree): writable whatever the
    #: mode, and not re-bound read-only as a protected path would be
    own_writes: tuple[Path, ...] = ()
    #: bound in after the hidden paths are covered (a push's ssh agent socket)
    exposed: tuple[Path, ...] = ()

    def writable_roots(self) -> list[Path]:
        if self.mode != "workspace-write":
            return []
        roots = [self.workdir]
        roots += [p for p in self.writable if p.exists() and p not in roots]
        return roots

    def hidden_paths(self) -> list[Path]:
        return list(dict.fromkeys((self.home, *self.hidden)))



def _gitdir_of(dotgit: Path) -> Path | None:
    """The directory a ``.git`` *file* points to (``gitdir: …``, a worktree or submodule)."""
    try:
        text = dotgit.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = Path(line[len("gitdir:"):].strip())
            if not target.is_absolute():
                target = dotgit.parent / target
            return Path(os.path.realpath(target))
    return None


def protected_subpaths(root: Path) -> list[Path]:
    """What stays read-only inside the writable ``root``: its ``.git`` and ``.codey`` when
    they exist; for a ``.git`` file (a worktree), also the gitdir it names and that
    repository's common dir (``commondir``: the main ``.git``, its config and hooks). Paths
    are resolved: a symlinked ``.git`` gives its target (the link itself, a plain entry of
    the workdir, could still be replaced)."""
    found: list[Path] = []
    for name in PROTECTED_NAMES:
        path = root / name
        if not os.path.exists(path):  # a dangling link protects nothing
            continue
        found.append(Path(os.path.realpath(path)))
        if name == ".git" and path.is_file():
            gitdir = _gitdir_of(path)
            if gitdir is not None and gitdir.is_dir():
                found.append(gitdir)
                common = _commondir_of(gitdir)
                if common is not None:
                    found.append(common)
    return found


def _commondir_of(gitdir: Path) -> Path | None:
    """The repository's common dir a worktree's gitdir names (``commondir``), if any."""
    try:
        text = (gitdir / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    target = Path(text) if os.path.isabs(text) else gitdir / text
    resolved = Path(os.path.realpath(target))
    return resolved if resolved.is_dir() else None


def _protected(spec: SandboxSpec) -> list[Path]:
    """The protected subpaths that lie inside a writable root (elsewhere all is read-only)."""
    roots = spec.writable_roots()
    found: list[Path] = []
    for root in roots:
        for sub in protected_subpaths(root):
            if sub not in found and any(within(sub, r) for r in roots):
                found.append(sub)
    return found


# ---------------------------------------------------------------------------------------------
# Linux: bubblewrap


def bwrap_args(spec: SandboxSpec, support: SandboxSupport,
               status_fd: int | None = None) -> list[str]:
    """The bwrap argv that runs a command under ``spec``; append the command's argv.

    ``status_fd``: bwrap writes ``{"child-pid": N}`` (its PID 1, as the host sees it) and
    then the exit code there (``--json-status-fd``).
    """
    args = [support.path or "bwrap", "--new-session", "--die-with-parent",
            "--unshare-pid", "--unshare-ipc"]
    if support.disable_userns:
        args += ["--unshare-user", "--disable-userns"]
    if not spec.network:
        args.append("--unshare-net")
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if spec.tmp is not None:
        args += ["--bind", str(spec.tmp), "/tmp"]
    else:
        args += ["--tmpfs", "/tmp"]
    tmp = Path("/tmp")
    roots = spec.writable_roots()
    shown = list(roots)  # what of the host's /tmp is there (the rest is covered already)
    for keep in _installs_under(tmp):
        # the Python this worker runs from and what it imports (a venv, an editable checkout),
        # read-only and before the writable roots (a root inside stays writable): under the
        # private /tmp they would vanish, and with them the tools they hold
        args += ["--ro-bind", str(keep), str(keep)]
        shown.append(keep)
    for root in roots:
        args += ["--bind", str(root), str(root)]
    if spec.mode != "workspace-write" and within(spec.workdir, tmp):
        args += ["--ro-bind", str(spec.workdir), str(spec.workdir)]
        shown.append(spec.workdir)

    def visible(path: Path) -> bool:
        return not within(path, tmp) or any(within(path, r) for r in shown)

    for path in spec.readable:
        if not visible(path) and os.path.isdir(path):
            args += ["--ro-bind", str(path), str(path)]
            shown.append(path)
    for sub in _protected(spec):
        if visible(sub):
            args += ["--ro-bind", str(sub), str(sub)]
    for path in spec.own_writes:
        if os.path.isdir(path):
            args += ["--bind", str(path), str(path)]
            shown.append(path)
    exposed = [p for p in spec.exposed if os.path.exists(p)]
    for path in spec.hidden_paths():
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue  # nothing there, nothing to hide
        if not visible(path):
            continue
        if stat.S_ISDIR(mode):
            # what is exposed inside is bound before the empty folder turns read-only
            inside = [p for p in exposed if within(p, path)]
            args += ["--tmpfs", str(path)]
            for keep in inside:
                args += ["--bind", str(keep), str(keep)]
                exposed.remove(keep)
            args += ["--remount-ro", str(path)]
        else:
            args += ["--ro-bind", "/dev/null", str(path)]
    for keep in exposed:
        args += ["--bind", str(keep), str(keep)]
    for sock in spec.sockets:
        # a socket the session made in its own folders stays its own
        if visible(sock) and not any(within(sock, r) for r in roots):
            args += ["--ro-bind", "/dev/null", str(sock)]
    args += ["--chdir", str(spec.cwd), "--"]
    return args


def bwrap_failure(returncode: int | None, stderr: str) -> str | None:
    """bwrap's own line when a wrapped command's exit was bwrap failing to set the sandbox
    up, else None. bwrap exits 1 then and says why on stderr with its name; a command whose
    exit 1 means something (rg's "nothing matched") cannot tell the two apart otherwise."""
    if returncode:
        for line in stderr.splitlines():
            if line.startswith("bwrap: "):
                return line
    return None


@functools.cache  # once per process: every sandboxed command asks
def _installs_under(tmp: Path) -> tuple[Path, ...]:
    """The worker's own Python installation, venv and import paths, where they live under
    ``tmp`` (each once: none inside another)."""
    candidates = sorted({Path(p).resolve() for p in (sys.prefix, sys.base_prefix, *sys.path)
                         if p and os.path.isdir(p)}, key=lambda p: len(p.parts))
    found: list[Path] = []
    for path in candidates:
        if within(path, tmp) and path != tmp and not any(within(path, f) for f in found):
            found.append(path)
    return tuple(found)


def _run_probe(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if done.returncode == 0:
        return True, ""
    text = done.stderr.decode("utf-8", errors="replace").strip()
    return False, (text.splitlines()[-1] if text else f"exit code {done.returncode}")


def _detect_bwrap() -> SandboxSupport:
    path = shutil.which("bwrap")
    if path is None:
        return SandboxSupport(kind="none", reason="bwrap (bubblewrap) is not installed")
    version = ""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True,
                             timeout=_PROBE_TIMEOUT_S, check=False).stdout
        version = out.strip().rsplit(" ", 1)[-1]
    except (OSError, subprocess.TimeoutExpired):
        pass
    true = shutil.which("true") or "/bin/true"
    base = [path, "--new-session", "--die-with-parent", "--unshare-pid", "--unshare-ipc",
            "--unshare-net", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp"]
    ok, why = _run_probe([*base[:1], "--unshare-user", "--disable-userns", *base[1:],
                          "--", true])
    if ok:
        return SandboxSupport(kind="bwrap", path=path, version=version, disable_userns=True)
    ok, why = _run_probe([*base, "--", true])
    if ok:
        return SandboxSupport(kind="bwrap", path=path, version=version)
    return SandboxSupport(kind="none", version=version,
                          reason=f"bwrap cannot make a sandbox here: {why}")


def _detect_seatbelt() -> SandboxSupport:
    path = "/usr/bin/sandbox-exec"
    if not os.path.exists(path):
        return SandboxSupport(kind="none", reason="sandbox-exec is missing")
    ok, why = _run_probe([path, "-p", "(version 1)(allow default)", "/usr/bin/true"])
    if not ok:
        return SandboxSupport(kind="none", reason=f"sandbox-exec does not work here: {why}")
    return SandboxSupport(kind="seatbelt", path=path)


@functools.cache
def detect() -> SandboxSupport:
    """The sandbox this machine offers, checked by running it once; cached for the process
    (``detect.cache_clear()`` to look again)."""
    platform: str = sys.platform  # (a plain str: mypy would call the other OSes unreachable)
    if platform.startswith("linux"):
        return _detect_bwrap()
    if platform == "darwin":
        return _detect_seatbelt()
    return SandboxSupport(kind="none", reason=f"no sandbox for {platform}")


# ---------------------------------------------------------------------------------------------
# macOS: Seatbelt


def _sb_string(path: Path | str) -> str:
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sb_paths(paths: Iterable[Path]) -> list[str]:
    out = []
    for path in paths:
        kind = "subpath" if not os.path.lexists(path) or path.is_dir() else "literal"
        out.append(f"({kind} {_sb_string(path)})")
    return out


#: services a plain command needs (user lookups, notifications, logging, temp dirs, TLS
#: trust); nothing that reaches the keychain (com.apple.SecurityServer) or other apps
_SB_MACH_SERVICES = (
    "com.apple.system.opendirectoryd.libinfo", "com.apple.system.notification_center",
    "com.apple.system.logger", "com.apple.logd", "com.apple.bsd.dirhelper",
    "com.apple.trustd.agent", "com.apple.system.DirectoryService.libinfo_v1",
)  # fmt: skip


def seatbelt_profile(spec: SandboxSpec) -> str:
    """The Seatbelt (SBPL) profile for ``spec``: deny by default; read everything but the
    hidden paths; write only the writable roots (minus ``.git``/``.codey``) and the private
    temp dir; network only when asked. Rules use ``require-not`` rather than rule order, so
    the text means the same whichever rule Seatbelt checks first."""
    hidden = _sb_paths(spec.hidden_paths())
    tmp = [spec.tmp] if spec.tmp is not None else []
    writable = _sb_paths([*spec.writable_roots(), *tmp, *spec.own_writes])
    protected = _sb_paths([p for p in _protected(spec)
                           if not any(within(p, w) for w in spec.own_writes)])
    lines = [
        "(version 1)",
        "(deny default)",
        "(allow process-exec)",
        "(allow process-fork)",
        "(allow signal (target same-sandbox))",
        "(allow process-info* (target same-sandbox))",
        "(allow sysctl-read)",
        "(allow user-preference-read)",
        "(allow ipc-posix-sem)",
        "(allow ipc-posix-shm-read-data)",
        "(allow pseudo-tty)",
        "(allow file-ioctl (literal \"/dev/tty\") (regex #\"^/dev/ttys[0-9]+$\"))",
        "(allow mach-lookup "
        + " ".join(f"(global-name {_sb_string(s)})" for s in _SB_MACH_SERVICES) + ")",
        "(allow file-write-data (literal \"/dev/null\") (literal \"/dev/zero\")"
        " (literal \"/dev/dtracehelper\") (literal \"/dev/tty\"))",
    ]
    # reads: everything but the hidden paths (the private temp dir may live in $CODEY_HOME)
    if hidden:
        keep = " ".join(_sb_paths(tmp))
        unhidden = f"(require-not (require-any {' '.join(hidden)}))"
        lines.append(f"(allow file-read* (require-any {unhidden} {keep}))" if keep
                     else f"(allow file-read* {unhidden})")
    else:
        lines.append("(allow file-read*)")
    if writable:
        where = f"(require-any {' '.join(writable)})"
        shielded = [*protected, *hidden]
        if shielded:
            # hidden paths stay unwritable, except the private temp dir inside $CODEY_HOME
            not_shielded = f"(require-not (require-any {' '.join(shielded)}))"
            if tmp:
                not_shielded = f"(require-any {not_shielded} {' '.join(_sb_paths(tmp))})"
            lines.append(f"(allow file-write* (require-all {where} {not_shielded}))")
        else:
            lines.append(f"(allow file-write* {where})")
    if spec.network:
        lines += ["(allow network-outbound)", "(allow network-inbound)", "(allow system-socket)",
                  "(allow mach-lookup (global-name \"com.apple.dnssd.service\")"
                  " (global-name \"com.apple.SystemConfiguration.configd\"))"]
    return "\n".join(lines) + "\n"


def seatbelt_args(spec: SandboxSpec, support: SandboxSupport) -> list[str]:
    """``sandbox-exec -p PROFILE``; append the command's argv. (``sandbox-exec`` cannot
    change directory: the caller starts it in ``spec.cwd``.)"""
    return [support.path or "/usr/bin/sandbox-exec", "-p", seatbelt_profile(spec)]


# ---------------------------------------------------------------------------------------------
# was it the sandbox?

_EROFS = "read-only file system"
_DENIED = ("permission denied", "operation not permitted")
_NO_ENTRY = ("no such file or directory", "not found")
_NETWORK = (
    "network is unreachable", "could not resolve host", "temporary failure in name resolution",
    "name or service not known", "nodename nor servname", "connection refused",
    "failed to establish a new connection", "no route to host", "getaddrinfo",
    "could not resolve", "failed to resolve", "enetunreach", "eai_again",
    "network is down", "name resolution",
)  # fmt: skip
_PATH = re.compile(r"(?<![\w.~-])(/[^\s'\"`:,;()\[\]{}<>]+)")
_HINT_MAX = 200


def _clip(line: str) -> str:
    line = line.strip()
    return line if len(line) <= _HINT_MAX else line[: _HINT_MAX - 1] + "…"


def sandbox_denial(output: str, *, network: bool, writable: Sequence[Path],
                   hidden: Sequence[Path] = ()) -> str | None:
    """Why a failed sandboxed command's ``output`` looks like the sandbox stopped it, or None.

    A line saying "Read-only file system"; "Permission denied" / "Operation not permitted" on
    an absolute path outside the ``writable`` roots; a missing file under a ``hidden`` path;
    with the network off, a line saying the network or a name could not be reached.
    """
    for raw in output.splitlines():
        line = raw.lower()
        if _EROFS in line:
            return f"read-only in the sandbox: {_clip(raw)}"
        paths = [Path(os.path.normpath(p)) for p in _PATH.findall(raw)]
        if any(d in line for d in _DENIED) and any(
                not any(within(p, root) for root in writable) for p in paths):
            return f"denied outside the writable folders: {_clip(raw)}"
        if any(n in line for n in _NO_ENTRY) and any(
                within(p, h) for p in paths for h in hidden):
            return f"hidden by the sandbox: {_clip(raw)}"
        if not network and any(n in line for n in _NETWORK):
            return f"the network is off: {_clip(raw)}"
    return None


# ---------------------------------------------------------------------------------------------
# runtime


_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")


def _dir_name(session_id: str) -> str:
    if _SAFE_NAME.fullmatch(session_id):
        return session_id
    return "s-" + hashlib.sha256(session_id.encode()).hexdigest()[:32]


@dataclass
class Sandbox:
    """The worker's sandbox: what ``support`` this machine has, the owner's ``settings``, and
    ``home`` ($CODEY_HOME: hidden from commands; their private temp dirs live in
    ``home/sandbox/tmp/<session>``)."""

    support: SandboxSupport
    home: Path
    settings: SandboxSettings = field(default_factory=SandboxSettings)
    #: the Unix sockets under /run, covered for commands without the network
    socket_scan: SocketScan = field(default_factory=SocketScan, compare=False, repr=False)
    #: run a session's workspace-write commands in a warm box (:mod:`codey_worker.warm`)
    #: rather than a new bwrap each; ``CODEY_SANDBOX_WARM=0`` in the environment turns it off
    warm: bool = field(default_factory=lambda: os.environ.get("CODEY_SANDBOX_WARM") != "0")
    _boxes: WarmBoxes | None = field(default=None, init=False, compare=False, repr=False)

    @classmethod
    def detected(cls, home: Path, settings: SandboxSettings | None = None) -> Sandbox:
        """With this machine's support (:func:`detect`, cached)."""
        return cls(detect(), home, settings or SandboxSettings())

    def info(self) -> SandboxInfo:
        return self.support.info()

    def require(self) -> None:
        """Raise ``sandbox_unavailable`` unless a sandbox works here."""
        if not self.support.available:
            raise ActionRefused(
                "sandbox_unavailable",
                f"this worker has no working sandbox ({self.support.reason}); it runs "
                "commands only for sessions with full access")

    def tmp_root(self) -> Path:
        return Path(os.path.realpath(self.home)) / "sandbox" / "tmp"

    def session_tmp(self, session_id: str) -> Path:
        """The session's private temp dir (made, mode 0700, when missing)."""
        path = self.tmp_root() / _dir_name(session_id)
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    def tmp_for(self, mode: SandboxMode, session_id: str | None) -> Path | None:
        """The private temp dir of a run, made if needed. Under bwrap a ``workspace-write``
        command gets its session's (kept across the session's commands); a ``read-only`` one,
        and an MCP server (``session_id`` None), an empty tmpfs of its own (None). Seatbelt
        cannot mount one, so there every run gets a dir: its session's, or one shared by the
        MCP servers."""
        if self.support.kind == "seatbelt":
            if session_id is None:
                path = self.tmp_root() / ".mcp"
                path.mkdir(parents=True, exist_ok=True, mode=0o700)
                return path
            return self.session_tmp(session_id)
        if mode == "workspace-write" and session_id is not None:
            return self.session_tmp(session_id)
        return None

    @property
    def boxes(self) -> WarmBoxes | None:
        """The warm boxes, where this machine has bwrap and they are on; else None."""
        if not self.warm or self.support.kind != "bwrap":
            return None
        if self._boxes is None:
            self._boxes = WarmBoxes()
        return self._boxes

    def warm_prefix(self, spec: SandboxSpec) -> list[str]:
        """The bwrap argv of ``spec``'s warm box: the command's folder is entered by the box's
        supervisor, so the box is made for the workdir (and is the same for every cwd)."""
        return bwrap_args(dataclasses.replace(spec, cwd=spec.workdir), self.support)

    def close_box(self, session_id: str) -> None:
        """End the session's warm box, if it has one (on the event loop's thread)."""
        if self._boxes is not None:
            self._boxes.drop(session_id)

    def close_boxes(self) -> None:
        """End every warm box (the worker stops)."""
        if self._boxes is not None:
            self._boxes.close()
            self._boxes = None

    def drop_session(self, session_id: str) -> None:
        """Delete the session's private temp dir (it was detached)."""
        shutil.rmtree(self.tmp_root() / _dir_name(session_id), ignore_errors=True)

    def prune(self, max_age_s: float = 7 * 24 * 3600) -> int:
        """Delete the private temp dirs untouched for ``max_age_s`` (sessions never detached:
        the worker was stopped, or the session forgotten); returns how many."""
        root, dropped = self.tmp_root(), 0
        try:
            entries = list(os.scandir(root))
        except OSError:
            return 0
        now = time.time()
        for entry in entries:
            try:
                old = now - entry.stat(follow_symlinks=False).st_mtime > max_age_s
            except OSError:
                continue
            if old and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
                dropped += 1
        return dropped

    @functools.cached_property
    def _paths(self) -> tuple[Path, tuple[Path, ...], tuple[Path, ...]]:
        # expanded once (a dozen realpath calls cost half a millisecond per command)
        # the protected paths ($CODEY_HOME as the worker registered it) are hidden too: the
        # file API refuses them, and a command must not see what a tool may not read
        hidden = dict.fromkeys([*self.settings.hidden(),
                                *(Path(p) for p in protected_paths())])
        return (Path(os.path.realpath(self.home)), tuple(hidden),
                tuple(self.settings.writable()))

    @property
    def boundary(self) -> Boundary:
        """The hidden list as the file API takes it: the same paths the sandbox hides
        (``$CODEY_HOME``, the owner's hidden paths) and the protected paths."""
        home, hidden, _ = self._paths
        return Boundary.of([home, *hidden, *protected_paths()])

    def spec(self, *, mode: SandboxMode, network: bool, workdir: Path, cwd: Path,
             tmp: Path | None, readable: tuple[Path, ...] = (),
             own_writes: tuple[Path, ...] = (), unhide: Iterable[str] = (),
             exposed: tuple[Path, ...] = ()) -> SandboxSpec:
        """The spec of one run; the settings' paths are expanded on first use (``~`` and
        ``$VAR`` as the worker saw them then) and kept. Raises ``protected_path`` for a
        ``cwd`` inside a hidden path (the command could not even start there).

        The worker's own git adds ``readable``, ``own_writes`` and ``exposed`` (see
        :class:`SandboxSpec`) and, for a push, ``unhide``: hidden paths (as the hidden list
        spells them, ``~/.ssh``) shown after all; never ``$CODEY_HOME``."""
        home, hidden, writable = self._paths
        if unhide:
            shown = set(expand_all(unhide))
            hidden = tuple(h for h in hidden if h not in shown)
        sockets = () if network or self.support.kind != "bwrap" else self.socket_scan.sockets()
        spec = SandboxSpec(mode=mode, network=network, workdir=workdir, cwd=cwd, tmp=tmp,
                           home=home, hidden=hidden, writable=writable, sockets=sockets,
                           readable=readable, own_writes=own_writes, exposed=exposed)
        for path in spec.hidden_paths():
            if within(cwd, path) and os.path.lexists(path):
                raise ActionRefused("protected_path",
                                    f"{cwd} is hidden from sandboxed commands ({path} is in "
                                    "the sandbox's hidden paths)")
        return spec

    def wrap(self, argv: Sequence[str], spec: SandboxSpec,
             status_fd: int | None = None) -> list[str]:
        """``argv`` run inside the sandbox; raises ``sandbox_unavailable`` without one."""
        self.require()
        if self.support.kind == "seatbelt":
            return [*seatbelt_args(spec, self.support), *argv]
        return [*bwrap_args(spec, self.support, status_fd), *argv]

    def env(self, env: dict[str, str], spec: SandboxSpec) -> dict[str, str]:
        """The command's environment inside the sandbox: TMPDIR is the private temp dir, and
        Python writes no bytecode caches unless ``env`` says otherwise.

        Why no ``__pycache__``: a test run in a worktree left ``*.pyc`` files there, untracked
        and not ignored; a commit of everything took them, and every parallel worktree of
        the repository then conflicted on them (issue 33). They only make the next start of
        the same code faster."""
        tmpdir = "/tmp" if self.support.kind == "bwrap" or spec.tmp is None else str(spec.tmp)
        return {"PYTHONDONTWRITEBYTECODE": "1", **env, "TMPDIR": tmpdir}
