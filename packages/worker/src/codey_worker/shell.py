"""``run_command``: run an argv in a session workdir, stream its output, cap it, stop it — the
``run_command`` action of the model's ``shell`` tool (a process that outlives its call, the
``exec`` tool's, is :mod:`codey_worker.processes`).

Order of a run (:func:`run_command`)::

    checks (argv, local policy, workdir in allowed roots, cwd inside workdir)   -> ActionRefused
    sandbox: unless ``action.sandbox`` is "full-access", argv is wrapped by the OS sandbox
           (:mod:`codey_worker.sandbox`: bwrap on Linux, sandbox-exec on macOS); a worker
           without one refuses (``sandbox_unavailable``) rather than run it bare
    spawn: argv as is (never a shell string), own session/process group,
           stdin /dev/null, env from an allowlist with *KEY*/*TOKEN*/*SECRET* removed and
           git's hardening added (:func:`build_env`)
    stream: stdout/stderr read in chunks, passed to ``on_output(stream, text)`` coalesced
            (a call per <= 16 KiB or per ~50 ms), until ``output_cap`` bytes have been streamed
    end:    exit | timeout | cancel.  Timeout and cancel send SIGTERM to the process group,
            wait ``grace_s`` (5 s), then SIGKILL the group.
    result: CommandResult with at most ``output_cap`` bytes of output per stream (head and tail,
            with a "… [N bytes truncated] …" marker in between), exit code or signal.

Choices a caller must know:

* A program that cannot be found is *not* an error: the result has ``exit_code=127`` (``126``
  when it cannot be executed) and the reason in ``stderr``, like a shell — the model sees a
  failed command and can try another.
* Cancelling: pass a :class:`CommandRegistry` and call ``registry.cancel(action_id)``;
  ``run_command`` then stops the group (TERM, grace, KILL) and *returns* a result with
  ``cancelled=True`` and the output so far. Cancelling the asyncio task running
  ``run_command`` also stops the group before ``CancelledError`` propagates, so no process is
  ever left behind by a cancelled task (there the group gets SIGKILL at once: a cancelled task
  is the worker shutting down, with no time for a grace period).
* After the main process exits, processes it left in its group that still hold stdout/stderr
  open get ``drain_s`` (1 s) to finish and are then killed; background processes that
  redirected their output elsewhere are left alone.
* Output memory is bounded by about ``2 * min(output_cap, FRAME_BUDGET)`` whatever the
  process writes: only the head and a rolling tail are kept, and never more than one frame
  could carry back. Streaming goes on up to ``output_cap`` all the same.
* An exception raised by ``on_output`` is logged and stops further streaming for that command;
  the command itself keeps running and still returns its result.

Inside the bwrap sandbox (Linux):

* SIGTERM goes to the sandbox's own session (the command and what it started), not to bwrap,
  whose death would SIGKILL everything at once; after the grace, SIGKILL reaches bwrap and
  the sandbox's PID 1, and the kernel kills the rest of its PID namespace.
* When the command exits, so does bwrap, and everything it left behind is killed with the
  namespace — even processes that redirected their output: ``run_command`` returns once the
  sandbox is gone.
* A command killed by signal N is reported with ``signal=N`` (bwrap exits 128+N, as a shell
  does; an ``exit 137`` inside looks the same).
* A program that is missing (or not executable) is found before the sandbox starts, so it
  still gives 127 (126).
* A failure whose output looks like a sandbox denial (read-only file system, permission
  denied outside the writable roots, no network) sets ``sandbox_denied`` and
  ``sandbox_hint`` (:func:`codey_worker.sandbox.sandbox_denial`).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
import re
import shutil
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codey_protocol.worker import GIT_COMMAND_HARDENING, CommandResult, RunCommand, runs_in
from codey_worker.confine import ActionRefused, resolve_inside
from codey_worker.frames import FRAME_BUDGET
from codey_worker.home import codey_home
from codey_worker.policy import LocalPolicy, check_protected_args
from codey_worker.sandbox import Sandbox, SandboxSpec, sandbox_denial
from codey_worker.warm import WarmBox, WarmBoxes, WarmError, WarmRun, supervisor_env

__all__ = [
    "CHUNK_MAX",
    "ENV_ALLOWLIST",
    "FLUSH_INTERVAL_S",
    "KILL_GRACE_S",
    "CommandRegistry",
    "OutputCallback",
    "build_env",
    "harden_git_env",
    "merge_git_env",
    "run_command",
    "truncation_marker",
]

log = logging.getLogger(__name__)

OutputCallback = Callable[[str, str], Awaitable[None]]
"""``await on_output(stream, text)`` with ``stream`` in ``{"stdout", "stderr"}``."""

KILL_GRACE_S = 5.0
DRAIN_S = 1.0
CHUNK_MAX = 16 * 1024  # bytes of output per on_output call, at most
FLUSH_INTERVAL_S = 0.05
_READ_SIZE = 64 * 1024
_POLL_S = 0.05

ENV_ALLOWLIST = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TZ", "TMPDIR", "PWD"}
)
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET")

# git's own way of passing settings in the environment (``git -c`` for every git a command
# starts): GIT_CONFIG_COUNT=N, then GIT_CONFIG_KEY_<n> and GIT_CONFIG_VALUE_<n> for n < N,
# the number written as git writes it (no leading zero, or git never reads the name).
_GIT_CONFIG_KEY_NAME = re.compile(r"GIT_CONFIG_KEY_(?:0|[1-9][0-9]*)")
_GIT_CONFIG_NAME = re.compile(r"GIT_CONFIG_(?:COUNT|(?:KEY|VALUE)_[0-9]+)")
# a config key as git accepts one: section[.subsection].name — the section and the name
# letters, digits and '-' (the name starting with a letter), the subsection any text but a
# newline
_CONFIG_KEY = re.compile(r"[A-Za-z0-9-]+(?:\.[^\n]*)?\.[A-Za-z][A-Za-z0-9-]*")
_HARDENED_KEYS = frozenset(key.lower() for key, _ in GIT_COMMAND_HARDENING)


def truncation_marker(dropped: int) -> str:
    """The text put where ``dropped`` bytes of output were cut out."""
    return f"\n… [{dropped} bytes truncated] …\n"


def _is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in _SECRET_MARKERS)


def build_env(
    extra: Mapping[str, str],
    base: Mapping[str, str] | None = None,
    cwd: str | None = None,
    *,
    harden_git: bool = True,
) -> dict[str, str]:
    """The environment of a command: allowlisted names from ``base`` (default ``os.environ``),
    then ``extra`` (the action's ``env``), then every name containing KEY, TOKEN or SECRET (any
    case) removed — also those ``extra`` asked for, but git's ``GIT_CONFIG_KEY_<n>`` from
    ``extra`` (below). ``PWD`` is set to ``cwd`` when given and ``PATH`` defaults to
    ``os.defpath``. With ``harden_git`` (the default; only the user's own web terminal goes
    without) git's :data:`~codey_protocol.worker.GIT_COMMAND_HARDENING` is added to the settings the
    environment gives git, after ``extra``'s own (:func:`harden_git_env`).
    """
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if k in ENV_ALLOWLIST or k.startswith("LC_")}
    env.update(extra)
    if cwd is not None:
        env["PWD"] = cwd
    env.setdefault("PATH", os.defpath)
    # The filter is there for secrets: the worker's own (its environment may hold an API key
    # or a token, which a command must never see) and, by name, any an action passes on.
    # GIT_CONFIG_KEY_<n> is not one: its value is the *name* of a git setting
    # (core.hooksPath), and git fails on any git command when one of the n is missing, so the
    # marker KEY in it must not drop it. Letting it through opens nothing:
    # * only the action's own names are let through: the worker's environment reaches a
    #   command through the allowlist alone, which has no GIT_* name (a GIT_CONFIG_KEY_0 the
    #   worker inherited, say a header with a token set by the user's shell, stays out);
    # * its value must read as a config key (harden_git_env drops a pair whose key does not),
    #   so it cannot carry free text; a setting's value travels in GIT_CONFIG_VALUE_<n>,
    #   whose name never had a marker in it: nothing passes now that could not before;
    # * the name must be exactly git's (upper case, the number as git writes it), so
    #   GIT_CONFIG_KEY_0_TOKEN or git_config_key_0 are still dropped;
    # * what a setting can make git do (run core.fsmonitor, diff.external, ...) is guarded
    #   elsewhere: the hardening comes after the action's settings and wins, and
    #   LocalPolicy.check_env refuses other keys while the owner denies commands.
    env = {k: v for k, v in env.items()
           if (not _is_secret_name(k) or (k in extra and _GIT_CONFIG_KEY_NAME.fullmatch(k)))
           and "\x00" not in k + v}
    return harden_git_env(env) if harden_git else _with_git_config(env, _git_config(env))


def _git_config(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The settings ``env`` gives git (GIT_CONFIG_COUNT and its pairs), in order.

    Only complete pairs with a well-formed key are kept: git refuses to run at all with a
    pair missing or a key it cannot parse, and a bad one left in would break every git of the
    command (and keep its hardening from applying)."""
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        return []
    pairs = []
    for n in range(min(max(count, 0), len(env))):  # a pair is two names: never more than env
        key, value = env.get(f"GIT_CONFIG_KEY_{n}"), env.get(f"GIT_CONFIG_VALUE_{n}")
        if key is not None and value is not None and _CONFIG_KEY.fullmatch(key):
            pairs.append((key, value))
    return pairs


def _with_git_config(env: Mapping[str, str], pairs: list[tuple[str, str]]) -> dict[str, str]:
    """``env`` with its git settings replaced by ``pairs`` (none: no GIT_CONFIG_* at all)."""
    out = {k: v for k, v in env.items() if not _GIT_CONFIG_NAME.fullmatch(k)}
    if pairs:
        out["GIT_CONFIG_COUNT"] = str(len(pairs))
        for n, (key, value) in enumerate(pairs):
            out[f"GIT_CONFIG_KEY_{n}"] = key
            out[f"GIT_CONFIG_VALUE_{n}"] = value
    return out


def harden_git_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with :data:`~codey_protocol.worker.GIT_COMMAND_HARDENING` after the git settings it
    already gives (kept, in order: merged, never replaced). For git the last value of a key
    wins, so the hardening holds whatever came before; an earlier setting of one of its keys
    is dropped as it would change nothing (the server sends the same ones for ``git``)."""
    kept = [(k, v) for k, v in _git_config(env) if k.lower() not in _HARDENED_KEYS]
    return _with_git_config(env, [*kept, *GIT_COMMAND_HARDENING])


def merge_git_env(env: Mapping[str, str], then: Mapping[str, str]) -> dict[str, str]:
    """``env`` updated with ``then``, except for git's settings, which add up: ``env``'s, then
    ``then``'s (which win where both set a key). For an owner's ``env`` in their config (an MCP
    server's, an ACP agent's), written after what the worker gives every command."""
    merged = {**env, **then}
    return _with_git_config(merged, [*_git_config(env), *_git_config(then)])


class CommandRegistry:
    """The commands running now, by ``action_id``, so a ``Cancel`` action can reach them.

    One per worker connection (or per worker). Pass it to :func:`run_command`; it registers the
    command for the duration of the call.
    """

    def __init__(self) -> None:
        self._cancel_events: dict[str, asyncio.Event] = {}

    def running(self) -> list[str]:
        """Action ids of the commands running now (for ``Hello`` and ``Heartbeat``)."""
        return list(self._cancel_events)

    def cancel(self, action_id: str) -> bool:
        """Ask the command ``action_id`` to stop; False when no such command is running.

        Returns at once; the command's ``run_command`` returns (``cancelled=True``) once its
        process group is gone, at most ``grace_s`` plus a moment later.
        """
        event = self._cancel_events.get(action_id)
        if event is None:
            return False
        event.set()
        return True

    def cancel_all(self) -> int:
        """Cancel every running command (worker shutdown); returns how many were asked."""
        for event in self._cancel_events.values():
            event.set()
        return len(self._cancel_events)

    def _register(self, action_id: str) -> asyncio.Event:
        if action_id in self._cancel_events:
            raise ActionRefused("bad_request", f"action {action_id} is already running")
        event = asyncio.Event()
        self._cancel_events[action_id] = event
        return event

    def _unregister(self, action_id: str) -> None:
        self._cancel_events.pop(action_id, None)


# ---------------------------------------------------------------------------------------------
# output capture: head + rolling tail, bounded memory


def _cut_incomplete_end(data: bytes) -> bytes:
    """``data`` without a UTF-8 sequence cut short at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead
            continue
        if byte >= 0xC0:
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data[:-back] if need > back else data
        return data
    return data


def _cut_incomplete_start(data: bytes) -> bytes:
    """``data`` without the continuation bytes of a UTF-8 sequence begun before it."""
    skip = 0
    while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
        skip += 1
    return data[skip:]


class _HeadBudget:
    """Bytes of head shared by stdout and stderr, first come first served."""

    def __init__(self, size: int) -> None:
        self.left = size

    def take(self, n: int) -> int:
        got = min(n, self.left)
        self.left -= got
        return got


class _Capture:
    """What a command wrote to one stream: the first bytes (from a shared head budget) and a
    rolling window of the last ``tail_cap`` bytes."""

    def __init__(self, head_budget: _HeadBudget, tail_cap: int) -> None:
        self._budget = head_budget
        self._tail_cap = tail_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        take = self._budget.take(len(data))
        if take:
            self.head += data[:take]
            data = data[take:]
        if not data or self._tail_cap <= 0:
            return
        if len(data) >= self._tail_cap:
            self.tail = bytearray(data[-self._tail_cap :])
        else:
            self.tail += data
            excess = len(self.tail) - self._tail_cap
            if excess > 0:
                del self.tail[:excess]

    def render(self, tail_allowance: int) -> tuple[str, bool]:
        """The kept text with at most ``tail_allowance`` tail bytes; and whether it was cut."""
        tail = bytes(self.tail[len(self.tail) - tail_allowance :]) if tail_allowance > 0 else b""
        dropped = self.total - len(self.head) - len(tail)
        if dropped <= 0:
            return (bytes(self.head) + tail).decode("utf-8", errors="replace"), False
        head = _cut_incomplete_end(bytes(self.head))
        tail_clean = _cut_incomplete_start(tail)
        dropped += len(self.head) - len(head) + len(tail) - len(tail_clean)
        text = (
            head.decode("utf-8", errors="replace")
            + truncation_marker(dropped)
            + tail_clean.decode("utf-8", errors="replace")
        )
        return text, True


def _share_tail(captures: list[_Capture], budget: int) -> list[int]:
    """Split ``budget`` tail bytes between captures fairly (water-filling)."""
    wants = [min(c.total - len(c.head), len(c.tail)) for c in captures]
    shares = [0] * len(captures)
    order = sorted(range(len(captures)), key=lambda i: wants[i])
    left = max(budget, 0)
    for rank, i in enumerate(order):
        fair = left // (len(order) - rank)
        shares[i] = min(wants[i], fair)
        left -= shares[i]
    return shares


# ---------------------------------------------------------------------------------------------
# streaming: coalesced on_output calls, capped


class _StreamBudget:
    def __init__(self, size: int) -> None:
        self.left = size


class _Streamer:
    """Coalesces one stream's bytes into ``on_output`` calls of at most ``CHUNK_MAX`` bytes."""

    def __init__(self, name: str, on_output: OutputCallback, budget: _StreamBudget) -> None:
        self.name = name
        self._on_output = on_output
        self._budget = budget
        self._pending = bytearray()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lock = asyncio.Lock()
        self._cut = False
        self._broken = False

    async def feed(self, data: bytes) -> None:
        if self._cut or self._broken:
            return
        if len(data) > self._budget.left:
            data = _cut_incomplete_end(data[: self._budget.left])
            self._cut = True
        self._budget.left -= len(data)
        self._pending += data
        if len(self._pending) >= CHUNK_MAX:
            # Shielded: a chunk taken out of _pending must reach on_output even if the reader
            # is cancelled meanwhile; the final flush waits for it on the lock.
            await asyncio.shield(self.flush(whole_chunks_only=True))

    async def flush(self, whole_chunks_only: bool = False, final: bool = False) -> None:
        async with self._lock:
            while self._pending and not self._broken:
                if whole_chunks_only and len(self._pending) < CHUNK_MAX:
                    break
                piece = bytes(self._pending[:CHUNK_MAX])
                del self._pending[:CHUNK_MAX]
                await self._emit(self._decoder.decode(piece))
            if final and not self._broken:
                tail = self._decoder.decode(b"", final=True)
                if self._cut:
                    tail += "\n… [output over the cap; streaming stopped, see the result] …\n"
                await self._emit(tail)

    async def _emit(self, text: str) -> None:
        if not text:
            return
        try:
            await self._on_output(self.name, text)
        except Exception:
            log.exception("on_output failed; no more output will be streamed for this command")
            self._broken = True


async def _pump(reader: asyncio.StreamReader, capture: _Capture, streamer: _Streamer) -> None:
    while True:
        data = await reader.read(_READ_SIZE)
        if not data:
            return
        capture.add(data)
        await streamer.feed(data)


class _Output:
    """A command's two streams, read to their end: kept (head and tail, within one frame)
    and streamed to ``on_output`` (coalesced, up to ``output_cap``)."""

    def __init__(self, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader,
                 output_cap: int, on_output: OutputCallback) -> None:
        # The result must fit one frame: keeping more than that of a big cap would only be
        # cut later (a 100 MB cap kept 100 MB of head in memory for a 1 MiB result).
        self.keep = min(output_cap, FRAME_BUDGET)
        head_budget = _HeadBudget(self.keep // 2)
        tail_cap = self.keep - self.keep // 2
        self.captures = [_Capture(head_budget, tail_cap), _Capture(head_budget, tail_cap)]
        stream_budget = _StreamBudget(output_cap)
        self.streamers = [_Streamer("stdout", on_output, stream_budget),
                          _Streamer("stderr", on_output, stream_budget)]
        self.pumps = [asyncio.create_task(_pump(stdout, self.captures[0], self.streamers[0])),
                      asyncio.create_task(_pump(stderr, self.captures[1], self.streamers[1]))]
        self.flusher = asyncio.create_task(_flush_loop(self.streamers))

    async def finish(self) -> tuple[str, str, bool]:
        """Flush what is pending; (stdout, stderr, cut) as the result keeps them."""
        for streamer in self.streamers:
            await streamer.flush(final=True)
        captures = self.captures
        shares = _share_tail(captures, self.keep - sum(len(c.head) for c in captures))
        stdout, cut_out = captures[0].render(shares[0])
        stderr, cut_err = captures[1].render(shares[1])
        return stdout, stderr, cut_out or cut_err


async def _flush_loop(streamers: list[_Streamer]) -> None:
    while True:
        await asyncio.sleep(FLUSH_INTERVAL_S)
        for streamer in streamers:
            await asyncio.shield(streamer.flush())  # see _Streamer.feed


# ---------------------------------------------------------------------------------------------
# process groups


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` is running (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc/self"):
        return True
    # killpg also succeeds for zombies nobody has reaped yet; only a live member matters.
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def _wait_exit(proc: asyncio.subprocess.Process) -> int:
    """Wait for the main process to exit (not for its pipes to close, unlike ``proc.wait()``,
    which also waits for every process that inherited stdout/stderr)."""
    waiter = asyncio.ensure_future(proc.wait())
    try:
        while not waiter.done() and proc.returncode is None:
            await asyncio.wait({waiter}, timeout=_POLL_S)
    finally:
        waiter.cancel()
    rc = proc.returncode
    assert rc is not None
    return rc


def _close_transport(proc: asyncio.subprocess.Process) -> None:
    """Release the pipes even when a process outside our reach still holds them open.

    asyncio offers no public way to do this; without it the transport outlives the event loop
    and complains when garbage-collected.
    """
    transport = getattr(proc, "_transport", None)
    if transport is not None and not transport.is_closing():
        transport.close()


async def _terminate_group(pgid: int, grace_s: float, box: _Box | None = None) -> None:
    """SIGTERM the group, wait up to ``grace_s`` for it to be gone, then SIGKILL it.

    Sandboxed (``box``), SIGTERM goes to the sandbox's session instead (bwrap itself would
    die of it and take everything down with SIGKILL, no grace); SIGKILL to both.
    """
    inner = box.child_pid() if box is not None else None
    target = inner if inner is not None and _pid_alive(inner) else None
    if target is None or not _try_killpg(target, signal.SIGTERM):
        target = pgid  # not started yet (or gone): bwrap's death stops it all
        _killpg(target, signal.SIGTERM)
    _killpg(target, signal.SIGCONT)  # a stopped process cannot act on TERM
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return
        await asyncio.sleep(_POLL_S)
    _killpg(pgid, signal.SIGKILL)
    if box is not None:
        box.kill()


def _try_killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has finished running)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2 :].split()
    return bool(fields) and fields[0] not in (b"Z", b"X")


_CHILD_PID = re.compile(rb'"child-pid":\s*(\d+)')
_NET_NAMESPACE = re.compile(rb'"net-namespace":\s*(\d+)')


@dataclass
class _Box:
    """A sandboxed run: its spec, and (bwrap) the pipe on which bwrap tells the host pid of
    the sandbox's PID 1 (``--json-status-fd``)."""

    spec: SandboxSpec
    bwrap: bool = False
    status_r: int | None = None
    _status: bytearray = field(default_factory=bytearray)
    _child: int | None = None

    def child_pid(self) -> int | None:
        """The sandbox's PID 1 as the host sees it; None before bwrap has made it."""
        if self._child is None and self.status_r is not None:
            while True:
                try:
                    data = os.read(self.status_r, 4096)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    data = b""
                if not data:
                    self.close()
                    break
                self._status += data
            match = _CHILD_PID.search(self._status)
            if match:
                self._child = int(match.group(1))
        return self._child

    def net_namespace(self) -> int | None:
        """The inode of the sandbox's network namespace, as bwrap reported it (None: not
        reported yet, or no namespace of its own)."""
        if self.child_pid() is None:
            return None
        match = _NET_NAMESPACE.search(self._status)
        return int(match.group(1)) if match else None

    def kill(self) -> None:
        """SIGKILL the sandbox's PID 1: the kernel then kills its whole PID namespace."""
        child = self.child_pid()
        if child is not None and _pid_alive(child):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)

    async def wait_gone(self, timeout: float) -> None:
        """Wait until the sandbox's PID 1 has exited (so has everything in its namespace);
        SIGKILL it if ``timeout`` passes first."""
        child = self.child_pid()
        if child is None or not _pid_alive(child):
            return
        try:
            # a pidfd turns readable when the process has exited: no polling, no sleep
            pidfd = os.pidfd_open(child)
        except (AttributeError, OSError):
            pidfd = None
        if pidfd is None:
            deadline = time.monotonic() + timeout
            while _pid_alive(child) and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            if _pid_alive(child):
                self.kill()
            return
        loop = asyncio.get_running_loop()
        gone: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not gone.done():
                gone.set_result(None)

        loop.add_reader(pidfd, readable)
        try:
            try:
                await asyncio.wait_for(asyncio.shield(gone), timeout)
            except TimeoutError:
                self.kill()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(gone, timeout)
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)

    def close(self) -> None:
        if self.status_r is not None:
            with contextlib.suppress(OSError):
                os.close(self.status_r)
            self.status_r = None


# ---------------------------------------------------------------------------------------------
# run_command


def _check_action(action: RunCommand) -> None:
    if not action.argv or not action.argv[0]:
        raise ActionRefused("bad_request", "argv is empty")
    if any("\x00" in arg for arg in action.argv):
        raise ActionRefused("bad_request", "argv contains a NUL byte")
    if not action.timeout_s > 0:
        raise ActionRefused("bad_request", f"timeout_s must be positive, got {action.timeout_s}")
    if action.output_cap < 0:
        raise ActionRefused("bad_request", f"output_cap must be >= 0, got {action.output_cap}")


async def run_command(
    action: RunCommand,
    on_output: OutputCallback,
    policy: LocalPolicy,
    *,
    registry: CommandRegistry | None = None,
    grace_s: float = KILL_GRACE_S,
    drain_s: float = DRAIN_S,
    sandbox: Sandbox | None = None,
) -> CommandResult:
    """Run ``action.argv`` in ``action.cwd`` (inside ``action.workdir``); see the module doc.

    ``sandbox``: the worker's; None — this machine's (detected once), with the default
    settings and ``$CODEY_HOME``. Unused for ``full-access``.

    Raises :class:`ActionRefused` before anything runs: ``bad_request`` (empty argv, NUL byte,
    non-positive timeout), ``denied_command`` (also for an ``env`` that could get round
    the denied commands: :meth:`LocalPolicy.check_env`), ``outside_allowed_roots``,
    ``path_outside_workdir``, ``protected_path``, ``not_found`` (workdir or cwd missing),
    ``not_a_directory``, ``sandbox_unavailable`` (no working sandbox on this machine, and the
    action is not ``full-access``).
    Everything after the spawn — non-zero exit, timeout, cancel, signal — is in the result.
    """
    _check_action(action)
    argv = list(action.argv)
    policy.check_command(argv)
    policy.check_env(action.env)
    workdir = policy.check_workdir(action.workdir)
    if not workdir.is_dir():
        raise ActionRefused("not_found", f"workdir {workdir} does not exist")
    cwd = resolve_inside(workdir, action.cwd or ".", real=True)
    if not cwd.exists():
        raise ActionRefused("not_found", f"cwd {action.cwd!r} does not exist")
    if not cwd.is_dir():
        raise ActionRefused("not_a_directory", f"cwd {action.cwd!r} is not a directory")
    if sandbox is None:
        sandbox = Sandbox.detected(codey_home())
    check_protected_args(argv, cwd, sandbox.home)
    env = build_env(action.env, cwd=str(cwd))
    box: _Box | None = None
    # ``none`` (recorded before the sandbox, re-sent) runs as it was decided: without one
    mode = runs_in(action.sandbox)
    if mode != "full-access":
        sandbox.require()
        missing = _program_problem(argv[0], cwd, env)
        if missing is not None:
            return missing
        spec = sandbox.spec(mode=mode, network=action.network, workdir=workdir,
                            cwd=cwd, tmp=sandbox.tmp_for(mode, action.session_id))
        box = _Box(spec, bwrap=sandbox.support.kind == "bwrap")
        env = sandbox.env(env, spec)

    cancel_event = registry._register(action.action_id) if registry else asyncio.Event()
    try:
        if box is None:
            return await _run(argv, str(cwd), env, action, on_output, cancel_event, grace_s,
                              drain_s)
        assert sandbox is not None
        boxes = sandbox.boxes if mode == "workspace-write" else None
        if boxes is not None and action.session_id:
            warm = await _run_warm(boxes, sandbox, box.spec, argv, str(cwd), env, action,
                                   on_output, cancel_event, grace_s, drain_s)
            if warm is not None:
                return _mark_denial(warm, box.spec, sandbox)
        try:
            fds: tuple[int, ...] = ()
            if box.bwrap:
                box.status_r, status_w = os.pipe()
                os.set_blocking(box.status_r, False)
                fds = (status_w,)  # _run closes it once bwrap has its copy
                argv = sandbox.wrap(argv, box.spec, status_fd=status_w)
            else:
                argv = sandbox.wrap(argv, box.spec)
            result = await _run(argv, str(cwd), env, action, on_output, cancel_event, grace_s,
                                drain_s, box, fds)
        finally:
            box.close()
        return _mark_denial(result, box.spec, sandbox)
    finally:
        if registry is not None:
            registry._unregister(action.action_id)


async def _run_warm(boxes: WarmBoxes, sandbox: Sandbox, spec: SandboxSpec, argv: list[str],
                    cwd: str, env: dict[str, str], action: RunCommand,
                    on_output: OutputCallback, cancel_event: asyncio.Event, grace_s: float,
                    drain_s: float) -> CommandResult | None:
    """:func:`_run` in the session's warm box (:mod:`codey_worker.warm`); None when the box
    cannot be had (the caller then starts a bwrap of the command's own)."""
    started_at = time.monotonic()
    try:
        box = await boxes.get(action.session_id, sandbox.warm_prefix(spec),
                              supervisor_env(env.get("PATH")), spec.workdir)
    except WarmError as exc:
        log.warning("no warm sandbox for %s, starting one for the command: %s",
                    action.session_id, exc)
        return None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        run = box.run(argv, cwd, env, out_w, err_w)
    except WarmError:
        os.close(out_r)
        os.close(err_r)
        return None
    finally:
        os.close(out_w)  # the box has its copies: EOF comes when the command's tree is gone
        os.close(err_w)
    loop = asyncio.get_running_loop()
    readers: list[asyncio.StreamReader] = []
    transports: list[asyncio.BaseTransport] = []
    for fd in (out_r, err_r):
        reader = asyncio.StreamReader(limit=_READ_SIZE * 4)
        protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await loop.connect_read_pipe(lambda p=protocol: p,  # type: ignore[misc]
                                                    os.fdopen(fd, "rb", 0))
        readers.append(reader)
        transports.append(transport)
    output = _Output(readers[0], readers[1], action.output_cap, on_output)
    pumps = output.pumps
    cancel_wait: asyncio.Future[Any] = asyncio.create_task(cancel_event.wait())
    exited: asyncio.Future[Any] = asyncio.ensure_future(run.exited)
    timed_out = cancelled = finished = False
    code: int | None = None
    sig: int | None = None
    lost = ""
    try:
        done, _ = await asyncio.wait({exited, cancel_wait}, timeout=action.timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if exited not in done:
            cancelled = cancel_wait in done
            timed_out = not cancelled
            await _stop_warm(box, run, grace_s)
        try:
            code, sig = await exited
        except WarmError as exc:
            lost = f"\ncodey-worker: the sandbox ended under the command: {exc}\n"
            sig = signal.SIGKILL
        # the command and all it left are gone: the pipes end now (or very soon)
        _, pending = await asyncio.wait(pumps, timeout=drain_s)
        for task in pending:
            task.cancel()
        finished = True
    finally:
        # cancelled task (the worker stops) or an unexpected error: nothing stays behind
        if not finished and run.started.done() and not run.started.cancelled() and \
                run.started.exception() is None:
            box.kill(run.started.result()[1])
        helpers: list[asyncio.Future[Any]] = [*pumps, output.flusher, cancel_wait, exited]
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        for pipe in transports:
            pipe.close()
    if lost:
        output.captures[1].add(lost.encode())
    stdout, stderr, cut = await output.finish()
    return CommandResult(
        exit_code=code, signal=sig, stdout=stdout, stderr=stderr, truncated=cut,
        timed_out=timed_out, cancelled=cancelled,
        duration_ms=int((time.monotonic() - started_at) * 1000))


async def _stop_warm(box: WarmBox, run: WarmRun, grace_s: float) -> None:
    """TERM (and CONT) to the command's process group, then after ``grace_s`` a kill of all
    it started — as :func:`_terminate_group` does for a process of the worker's own."""
    try:
        pid, reaper = await asyncio.wait_for(asyncio.shield(run.started), grace_s)
    except (TimeoutError, WarmError):
        return  # never started, or the box is gone (and everything in it)
    box.signal(pid, signal.SIGTERM)
    box.signal(pid, signal.SIGCONT)  # a stopped process cannot act on TERM
    try:
        await asyncio.wait_for(asyncio.shield(run.exited), grace_s)
    except (TimeoutError, WarmError):
        box.kill(reaper)


def _program_problem(program: str, cwd: Path, env: Mapping[str, str]) -> CommandResult | None:
    """A result for a program that cannot be run (127 missing, 126 not executable), found
    before a sandbox is started for it; None when it looks runnable."""
    if "/" in program:
        path: str | None = str(cwd / program)
    else:
        path = shutil.which(program, path=env.get("PATH", os.defpath))
        if path is None:
            # shutil.which skips what is not executable; a shell says 126 for it, not 127
            for folder in env.get("PATH", os.defpath).split(os.pathsep):
                candidate = os.path.join(cwd, folder or ".", program)
                if os.path.isfile(candidate):
                    path = candidate
                    break
    if path is None or not os.path.exists(path):
        return CommandResult(exit_code=127,
                             stderr=f"codey-worker: command not found: {program}\n")
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        reason = "Is a directory" if os.path.isdir(path) else "Permission denied"
        return CommandResult(exit_code=126,
                             stderr=f"codey-worker: cannot execute {program}: {reason}\n")
    return None


def _mark_denial(result: CommandResult, spec: SandboxSpec, sandbox: Sandbox) -> CommandResult:
    """``result`` with ``sandbox_denied``/``sandbox_hint`` set when its failure looks like
    the sandbox's doing."""
    if result.exit_code == 0 or result.timed_out or result.cancelled:
        return result
    writable = [*spec.writable_roots(), Path("/tmp")]
    if sandbox.support.kind == "seatbelt" and spec.tmp is not None:
        writable.append(spec.tmp)
    hint = sandbox_denial(result.stderr + "\n" + result.stdout, network=spec.network,
                          writable=writable, hidden=spec.hidden_paths())
    if hint is None:
        return result
    result.sandbox_denied = True
    result.sandbox_hint = hint
    return result


async def _run(
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    action: RunCommand,
    on_output: OutputCallback,
    cancel_event: asyncio.Event,
    grace_s: float,
    drain_s: float,
    box: _Box | None = None,
    pass_fds: tuple[int, ...] = (),
) -> CommandResult:
    started = time.monotonic()

    def elapsed_ms() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,  # own process group: signals reach the whole tree
            pass_fds=pass_fds,
        )
    except FileNotFoundError:
        return CommandResult(
            exit_code=127,
            stderr=f"codey-worker: command not found: {argv[0]}\n",
            duration_ms=elapsed_ms(),
        )
    except OSError as exc:  # permission denied, exec format error, ...
        return CommandResult(
            exit_code=126,
            stderr=f"codey-worker: cannot execute {argv[0]}: {exc.strerror or exc}\n",
            duration_ms=elapsed_ms(),
        )
    finally:
        for fd in pass_fds:  # the child has its copy (bwrap's status pipe)
            os.close(fd)

    pgid = proc.pid
    assert proc.stdout is not None and proc.stderr is not None
    output = _Output(proc.stdout, proc.stderr, action.output_cap, on_output)
    pumps = output.pumps
    exited = asyncio.create_task(_wait_exit(proc))
    cancel_wait = asyncio.create_task(cancel_event.wait())
    timed_out = cancelled = False
    finished = False
    try:
        done, _ = await asyncio.wait(
            {exited, cancel_wait}, timeout=action.timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if exited not in done:
            cancelled = cancel_wait in done
            timed_out = not cancelled
            await _terminate_group(pgid, grace_s, box)
        await exited
        _, pending = await asyncio.wait(pumps, timeout=drain_s)
        if pending:
            # Leftovers of the finished command still hold its stdout/stderr open.
            _killpg(pgid, signal.SIGKILL)
            if box is not None:
                box.kill()
            _, pending = await asyncio.wait(pumps, timeout=drain_s)
            for task in pending:  # a process that left the group; stop reading it
                task.cancel()
        if box is not None:
            # bwrap has exited and its PID 1 is being killed; what ran beside the command
            # dies with it. Return once that is done, not a moment before.
            await box.wait_gone(drain_s)
        finished = True
    finally:
        if not finished:
            # Cancelled task or unexpected error: never leave the process tree behind.
            _killpg(pgid, signal.SIGKILL)
            if box is not None:
                box.kill()
        helpers: list[asyncio.Task[Any]] = [*pumps, output.flusher, cancel_wait, exited]
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        _close_transport(proc)

    stdout, stderr, cut = await output.finish()
    rc = proc.returncode
    if box is not None and box.bwrap and rc is not None and 128 < rc <= 128 + 64:
        rc = 128 - rc  # bwrap's 128+N for "killed by signal N"
    return CommandResult(
        exit_code=rc if rc is not None and rc >= 0 else None,
        signal=-rc if rc is not None and rc < 0 else None,
        stdout=stdout,
        stderr=stderr,
        truncated=cut,
        timed_out=timed_out,
        cancelled=cancelled,
        duration_ms=elapsed_ms(),
    )
