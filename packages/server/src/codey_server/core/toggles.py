"""What a change of a session's sandbox mode or network toggle means for the processes it
already runs (``exec``).

A process keeps the sandbox it was started in: bubblewrap's namespaces and mounts are set
when it starts, and nothing reaches into a running one to narrow them. So the toggles alone
would leave a dev server started with the network on still on the network after the user
turned it off. The rule:

- A change that **takes access away** (a narrower mode; the network off) stops every running
  process that holds what was taken away — with the old settings, or more (an escalated one
  runs outside the sandbox) — before the change is recorded: ``process_stop_requested``
  (``by: settings``) for each, which the agent service carries to the worker as every stop
  (``exec_kill``), and a ``processes_stopped`` notice naming them.
- A change that **only gives access** (a wider mode; the network on) stops nothing: a
  process started without it keeps running without it, and a ``processes_kept`` notice says
  so and that a restart gets it the new settings.

A process is judged by what it was started with (``SessionProcess.sandbox``/``network``);
one recorded before those were kept is taken to hold the session's settings of the moment.

The browser asks before a change that stops processes, with the same rule in
``web/toggles.js``; ``tests/unit/test_toggles.py`` holds the two to the same answers.

Everything here is pure: :func:`effects` is the rule, :func:`sandbox_changed` the
``set_sandbox`` decision's body, :func:`stops_at_start` the check for a process whose start
raced a narrowing.
"""

from __future__ import annotations

from dataclasses import dataclass

from codey_protocol import events as ev
from codey_protocol.state import PendingAction, SessionInfo, SessionProcess
from codey_protocol.worker import ExecStart, SandboxMode
from codey_server.core.rules import Context

__all__ = ["Access", "Effects", "access", "change_words", "effects", "process_names",
           "sandbox_changed", "short_of", "stops_at_start", "taken_from"]

#: how much each mode may write: nothing, the workdir, everything the user may
_WRITES: dict[str, int] = {"read-only": 0, "workspace-write": 1, "full-access": 2}
_MODE_WORDS = {"read-only": "read-only", "workspace-write": "workspace-write",
               "full-access": "full access (no sandbox)"}
#: what a wider mode gives a process that is restarted
_GAINS = {1: "write access to the workdir", 2: "full access"}
#: processes a notice names; the rest are counted
_NAMED = 3
_NAME_MAX = 40


@dataclass(frozen=True, slots=True)
class Access:
    """What a sandbox mode and network toggle let a command do, comparable dimension by
    dimension: how much it may write, and whether it reaches the machine's network."""

    writes: int
    network: bool


def access(mode: SandboxMode, network: bool) -> Access:
    # outside the sandbox there is no network namespace: full access has the network
    # whatever the toggle says (the browser greys the toggle out there)
    return Access(_WRITES[mode], network or mode == "full-access")


def taken_from(held: Access, before: Access, after: Access) -> bool:
    """Whether the change ``before`` → ``after`` takes away something ``held`` has."""
    return ((after.writes < before.writes and held.writes > after.writes)
            or (before.network and not after.network and held.network))


def short_of(held: Access, before: Access, after: Access) -> bool:
    """Whether the change ``before`` → ``after`` gives something ``held`` lacks."""
    return ((after.writes > before.writes and held.writes < after.writes)
            or (after.network and not before.network and not held.network))


def _held(p: SessionProcess, before: Access) -> Access:
    if p.sandbox is None:  # started before it was recorded: as the session was
        return before
    return access(p.sandbox, bool(p.network))


def change_words(before_mode: SandboxMode, before_network: bool, after_mode: SandboxMode,
                 after_network: bool) -> str:
    """The change, in words: ``Network turned off``, ``Sandbox set to read-only, network
    turned on``."""
    parts = []
    if before_mode != after_mode:
        parts.append(f"sandbox set to {_MODE_WORDS[after_mode]}")
    was, now = access(before_mode, before_network), access(after_mode, after_network)
    if was.network != now.network:
        parts.append("network turned on" if now.network else "network turned off")
    text = ", ".join(parts) or "sandbox settings changed"
    return text[0].upper() + text[1:]


def _name(p: SessionProcess) -> str:
    """Its command on one line, cut after a word to at most _NAME_MAX characters."""
    name = " ".join(" ".join(p.argv).split())
    if len(name) <= _NAME_MAX:
        return name
    cut = ""
    for word in name.split(" "):
        longer = f"{cut} {word}" if cut else word
        if len(longer) > _NAME_MAX - 2:
            break
        cut = longer
    return (cut or name[:_NAME_MAX - 2]) + " …"


def process_names(processes: list[SessionProcess]) -> str:
    """The processes' commands for a sentence: three, then how many more."""
    names = [_name(p) for p in processes[:_NAMED]]
    more = len(processes) - _NAMED
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _gains(before: Access, after: Access) -> str:
    gains = []
    if after.writes > before.writes:
        gains.append(_GAINS[after.writes])
    if after.network and not before.network and after.writes < 2:
        gains.append("the network")
    return " and ".join(gains)


@dataclass(frozen=True, slots=True)
class Effects:
    """What a change does to the session's running processes: those it ``stop``s, those that
    ``keep`` narrower settings than it gives, and the change in ``words``."""

    stop: list[SessionProcess]
    keep: list[SessionProcess]
    words: str


def effects(session: SessionInfo, sandbox: SandboxMode, network: bool) -> Effects:
    """The rule above, for ``session`` changing to ``sandbox`` / ``network``."""
    before, after = access(session.sandbox, session.network), access(sandbox, network)
    running = [p for p in session.processes if p.status == "running"]
    stop = [p for p in running if taken_from(_held(p, before), before, after)]
    keep = [p for p in running
            if p not in stop and short_of(_held(p, before), before, after)]
    return Effects(stop, keep, change_words(session.sandbox, session.network, sandbox,
                                            network))


def sandbox_changed(session: SessionInfo, sandbox: SandboxMode, network: bool,
                    ctx: Context) -> list[ev.Event]:
    """The session's sandbox becomes ``sandbox`` / ``network``: the stops and notices the
    rule above asks for, then ``session_sandbox_changed``. The caller has checked the session
    may change (it exists, is not closed, the settings differ)."""
    before, after = access(session.sandbox, session.network), access(sandbox, network)
    found = effects(session, sandbox, network)
    stop, keep, what = found.stop, found.keep, found.words
    out: list[ev.Event] = [ev.ProcessStopRequested(process_id=p.process_id, by="settings")
                           for p in stop]
    if stop:
        one = len(stop) == 1
        out.append(ev.SessionItemAppended(item=ev.Notice(
            id=ctx.new_id("itm"), ts=ctx.now(), code="processes_stopped",
            text=f"{what}: stopping {len(stop)} running process{'' if one else 'es'} "
                 f"({process_names(stop)}) — {'it' if one else 'they'} ran with the old "
                 "settings.")))
    if keep:
        one = len(keep) == 1
        out.append(ev.SessionItemAppended(item=ev.Notice(
            id=ctx.new_id("itm"), ts=ctx.now(), code="processes_kept",
            text=f"{what}: {len(keep)} running process{'' if one else 'es'} "
                 f"keep{'s its' if one else ' their'} old settings ({process_names(keep)}); "
                 f"restart {'it' if one else 'them'} to get {_gains(before, after)}.")))
    out.append(ev.SessionSandboxChanged(sandbox=sandbox, network=network))
    return out


def stops_at_start(pending: PendingAction, session: SessionInfo) -> bool:
    """Whether the process ``pending`` (an ``exec_start``) just started must stop at once:
    the user narrowed the session's settings after it was requested, taking away what it was
    started with — as a process already running then would have been stopped."""
    action = pending.action
    # (settings not kept: requested before an upgrade, so whether they changed is unknown)
    if not isinstance(action, ExecStart) or pending.sandbox is None:
        return False
    before = access(pending.sandbox, bool(pending.network))
    return taken_from(access(action.sandbox, action.network), before,
                      access(session.sandbox, session.network))
