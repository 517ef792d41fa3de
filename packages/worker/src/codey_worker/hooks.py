"""Hooks in Claude Code's format, read and run on this machine for the server's ``run_hooks``
action (issue 39).

Where they come from, in this order:

* the project: ``<workdir>/.claude/settings.json`` and ``<workdir>/.codey/settings.json``.
  They come with the repository, so they are *untrusted*: a file runs only when the server
  sends its sha256 in the action's ``trusted`` list (the user trusted that exact content).
  The file is read again for every run, so a file changed after it was trusted — by the
  model, by a ``git pull`` — does not run until it is trusted again;
* the worker's home: ``$CODEY_HOME/settings.json`` and ``~/.claude/settings.json``. The user
  wrote them: they run without asking.

Files are read through the confined file API (a project settings file that is a symlink, to
a key say, is skipped with a reason rather than read and reported). The schema is Claude
Code's: ``{"hooks": {"<Event>": [{"matcher": "...", "hooks": [{"type": "command", "command":
"...", "timeout": 60}]}]}}``. A matcher is a regular expression on the tool's name (empty or
``*``: every tool), matched against Codey's name and Claude Code's names for it
(:data:`CLAUDE_NAMES`), so ``Bash`` matches ``shell`` and ``exec``.

Every hook runs as a command of the session (:func:`codey_worker.shell.run_command`): in its
sandbox, in its workdir, with the environment a command gets, under its timeout (default
60 s). Its JSON input is on its stdin; its answer is read by :func:`interpret`: exit code 0
(stdout may be JSON), 2 (block, stderr is the reason), anything else (a problem shown to the
user, nothing blocked).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from codey_protocol.worker import (
    HOOK_EVENTS,
    CommandResult,
    HookCommand,
    HookDecision,
    HookFile,
    HookRun,
    HooksRan,
    RunCommand,
    RunHooks,
)
from codey_worker.confine import ActionRefused
from codey_worker.context import _read
from codey_worker.files import Boundary, Tree

__all__ = ["CLAUDE_NAMES", "PROJECT_FILES", "hook_input", "interpret", "matches",
           "parse_settings", "read_hook_files", "run_hooks"]

#: the project's settings files, relative to the workdir
PROJECT_FILES = (".claude/settings.json", ".codey/settings.json")
#: the biggest settings file read
MAX_SETTINGS_BYTES = 256 * 1024
#: the most of a hook's stdout and stderr kept in its run (and its event)
OUTPUT_CAP = 4096
#: the longest a hook may ask to run for
MAX_TIMEOUT_S = 600.0
DEFAULT_TIMEOUT_S = 60.0

#: Claude Code's tool names for each of Codey's (a matcher may use either)
CLAUDE_NAMES: Mapping[str, tuple[str, ...]] = {
    "shell": ("Bash",),
    "exec": ("Bash",),
    "write_stdin": ("Bash",),
    "edit": ("Edit", "MultiEdit"),
    "apply_patch": ("Edit", "MultiEdit", "Write"),
    "write_file": ("Write",),
    "read_file": ("Read",),
    "view_image": ("Read",),
    "grep": ("Grep",),
    "glob": ("Glob",),
    "list_dir": ("LS",),
    "update_plan": ("TodoWrite",),
    "delegate": ("Task",),
}

#: the events whose exit code 2 blocks something (the others only show stderr)
_BLOCKING = frozenset({"PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop",
                       "SubagentStop", "PermissionRequest"})
#: the events whose matcher is read (on a tool's name, or a notification's type, a
#: compaction's trigger, a session's source or end reason); Claude Code ignores the others'
_MATCHED = frozenset({"PreToolUse", "PostToolUse", "PermissionRequest", "Notification",
                      "PreCompact", "SessionStart", "SessionEnd"})
#: the events whose plain stdout (not JSON) is context for the model
_STDOUT_IS_CONTEXT = frozenset({"UserPromptSubmit", "SessionStart"})


def claude_name(tool: str) -> str:
    """The name a hook written for Claude Code expects in ``tool_name``: Claude Code's first
    name for the tool, or Codey's own (MCP tools are ``mcp__<server>__<tool>`` in both)."""
    names = CLAUDE_NAMES.get(tool)
    return names[0] if names else tool


def matches(matcher: str, tool: str) -> bool:
    """Whether ``matcher`` (a regular expression, whole-name) matches the tool ``tool`` by
    Codey's name or one of Claude Code's. Empty and ``*`` match everything; a matcher that is
    not a valid expression matches only its own text exactly."""
    if matcher in ("", "*"):
        return True
    names = (tool, *CLAUDE_NAMES.get(tool, ()))
    try:
        pattern = re.compile(matcher)
    except re.error:
        return matcher in names
    return any(pattern.fullmatch(name) for name in names)


def parse_settings(text: str) -> list[HookCommand]:
    """The command hooks of a settings file's text. Raises ``ValueError`` for text that is not
    a JSON object or whose ``hooks`` is not laid out as Claude Code's; unknown events and hook
    types other than ``command`` are skipped (they are other tools' business)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    hooks = data.get("hooks")
    if hooks is None:
        return []
    if not isinstance(hooks, dict):
        raise ValueError('"hooks" is not an object')
    out: list[HookCommand] = []
    for event, groups in hooks.items():
        if event not in HOOK_EVENTS:
            continue
        if not isinstance(groups, list):
            raise ValueError(f'"hooks.{event}" is not a list')
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("hooks", []), list):
                raise ValueError(f'"hooks.{event}" has an entry that is not '
                                 '{"matcher", "hooks": [...]}')
            matcher = group.get("matcher", "")
            if not isinstance(matcher, str):
                raise ValueError(f'"hooks.{event}": a matcher is not a string')
            for hook in group.get("hooks", []):
                if not isinstance(hook, dict) or hook.get("type", "command") != "command":
                    continue
                command = hook.get("command")
                if not isinstance(command, str) or not command.strip():
                    raise ValueError(f'"hooks.{event}": a command hook has no command')
                timeout = hook.get("timeout", DEFAULT_TIMEOUT_S)
                if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                        or not timeout > 0:
                    raise ValueError(f'"hooks.{event}": timeout must be a positive number')
                out.append(HookCommand(event=event, matcher=matcher, command_line=command,
                                       timeout_s=min(float(timeout), MAX_TIMEOUT_S)))
    return out


def _hook_file(root: Path, rel: str, scope: str, boundary: Boundary,
               in_home: bool) -> HookFile | None:
    """The settings file ``rel`` of ``root`` with its hooks; None if there is none, or it has
    no hooks."""
    path = str(root / rel)
    try:
        with Tree.open(root, boundary, inside_hidden=in_home) as tree:
            found = _read(tree, rel, MAX_SETTINGS_BYTES)
    except ActionRefused as exc:
        if exc.code == "not_found":
            return None
        return HookFile(path=path, scope=scope, error=exc.message)  # type: ignore[arg-type]
    except (OSError, ValueError) as exc:
        return HookFile(path=path, scope=scope, error=str(exc))  # type: ignore[arg-type]
    if found is None:
        return None
    text, truncated = found
    digest = hashlib.sha256(text.encode()).hexdigest()
    if truncated:
        return HookFile(path=path, scope=scope, sha256=digest,  # type: ignore[arg-type]
                        error=f"bigger than {MAX_SETTINGS_BYTES // 1024} KiB")
    try:
        commands = parse_settings(text)
    except ValueError as exc:
        return HookFile(path=path, scope=scope, sha256=digest,  # type: ignore[arg-type]
                        error=str(exc))
    if not commands:
        return None
    return HookFile(path=path, scope=scope, sha256=digest,  # type: ignore[arg-type]
                    hooks=commands)


def read_hook_files(workdir: Path, home: Path, user_home: Path | None = None,
                    boundary: Boundary | None = None) -> list[HookFile]:
    """The settings files with hooks that apply to ``workdir``: the project's, then those
    of ``home`` ($CODEY_HOME) and ``user_home`` (``~``, for ``~/.claude``). A file that
    cannot be read, or is malformed, is listed with its ``error`` and no hooks."""
    boundary = boundary if boundary is not None else Boundary.default()
    user_home = user_home if user_home is not None else Path.home()
    places = [(workdir, rel, "project", False) for rel in PROJECT_FILES]
    # both are in the hidden list (``~/.claude`` holds Claude Code's credentials): the worker
    # reads them itself, for its user; the model's tools and commands still cannot
    places += [(home, "settings.json", "user", True),
               (user_home / ".claude", "settings.json", "user", True)]
    out: list[HookFile] = []
    for root, rel, scope, in_home in places:
        found = _hook_file(root, rel, scope, boundary, in_home)
        if found is not None:
            out.append(found)
    return out


def hook_input(action: RunHooks, workdir: Path) -> dict[str, Any]:
    """The JSON a hook reads on its stdin: the common fields Claude Code sends
    (``session_id``, ``transcript_path`` — empty: Codey keeps no transcript file —, ``cwd``,
    ``hook_event_name``), ``tool_name`` in Claude Code's spelling (Codey's own in
    ``codey_tool_name``) when the event is about a tool, then the event's own fields from the
    server (``tool_input``, ``tool_response``, ``prompt``, ...)."""
    try:
        fields = json.loads(action.payload)
    except json.JSONDecodeError:
        fields = {}
    if not isinstance(fields, dict):
        fields = {}
    data: dict[str, Any] = {"session_id": action.session_id, "transcript_path": "",
                            "cwd": str(workdir), "hook_event_name": action.event}
    if action.event in ("PreToolUse", "PostToolUse", "PermissionRequest") and action.match:
        data["tool_name"] = claude_name(action.match)
        data["codey_tool_name"] = action.match
    data.update({k: v for k, v in fields.items() if k not in data})
    return data


def _cap(text: str) -> str:
    return text if len(text) <= OUTPUT_CAP else text[:OUTPUT_CAP] + "\n[… cut]"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def interpret(event: str, path: str, hook: HookCommand, result: CommandResult,
              duration_ms: int) -> HookRun:
    """What a hook's run means (see the module's docstring), as a :class:`HookRun`."""
    run = HookRun(path=path, command=hook.command_line, exit_code=result.exit_code,
                  duration_ms=duration_ms, stdout=_cap(result.stdout),
                  stderr=_cap(result.stderr), timed_out=result.timed_out)
    if result.timed_out:
        run.problem = f"timed out after {hook.timeout_s:g} s"
        return run
    if result.exit_code == 2:
        if event in _BLOCKING:
            run.decision = "deny" if event in ("PreToolUse", "PermissionRequest") else "block"
            run.reason = _cap(result.stderr.strip()) or "blocked by a hook (exit code 2)"
        return run
    if result.exit_code != 0:
        run.problem = ("killed by a signal" if result.exit_code is None
                       else f"exit code {result.exit_code}")
        return run
    out = result.stdout.strip()
    if not out.startswith("{"):
        if out and event in _STDOUT_IS_CONTEXT:
            run.additional_context = _cap(out)
        return run
    try:
        answer = json.loads(out)
    except json.JSONDecodeError:
        run.problem = "its output starts like JSON but is not JSON: ignored"
        return run
    if not isinstance(answer, dict):
        run.problem = "its JSON output is not an object: ignored"
        return run
    _read_answer(event, answer, run)
    return run


def _read_answer(event: str, answer: dict[str, Any], run: HookRun) -> None:
    """Fill ``run`` from a hook's JSON answer (Claude Code's fields)."""
    if answer.get("continue") is False:
        run.stop = True
        run.stop_reason = _cap(_text(answer.get("stopReason")))
    run.system_message = _cap(_text(answer.get("systemMessage")))
    decision: HookDecision = ""
    reason = _text(answer.get("reason"))
    legacy = answer.get("decision")
    if legacy == "block":
        decision = "deny" if event == "PreToolUse" else "block"
    elif legacy == "approve" and event == "PreToolUse":
        decision = "allow"
    specific = answer.get("hookSpecificOutput")
    if isinstance(specific, dict):
        permission = specific.get("permissionDecision")
        if event == "PreToolUse" and permission in ("allow", "deny", "ask"):
            decision = permission
            reason = _text(specific.get("permissionDecisionReason")) or reason
        if event == "PermissionRequest" and isinstance(specific.get("decision"), dict):
            said = specific["decision"]
            if said.get("behavior") in ("allow", "deny"):
                decision = said["behavior"]
                reason = _text(said.get("message")) or reason
            if isinstance(said.get("updatedInput"), dict):
                run.updated_input = said["updatedInput"]
        if isinstance(specific.get("updatedInput"), dict) and event == "PreToolUse":
            run.updated_input = specific["updatedInput"]
        run.additional_context = _cap(_text(specific.get("additionalContext")))
    run.decision = decision
    run.reason = _cap(reason)


#: runs one command of the session (the worker's :func:`codey_worker.shell.run_command`, with
#: its policy and sandbox)
RunOne = Callable[[RunCommand], Awaitable[CommandResult]]


def _command(action: RunHooks, hook: HookCommand, workdir: Path,
             data: dict[str, Any], index: int) -> RunCommand:
    # The input goes through the environment and a pipe made by the hook's own shell: a
    # command of the session has no stdin (run_command gives it /dev/null).
    script = f'printf "%s" "$CODEY_HOOK_INPUT" | {{\n{hook.command_line}\n}}'
    return RunCommand(
        action_id=f"{action.action_id}.{index}", session_id=action.session_id,
        argv=["/bin/sh", "-c", script], workdir=str(workdir), timeout_s=hook.timeout_s,
        env={"CODEY_HOOK_INPUT": json.dumps(data), "CLAUDE_PROJECT_DIR": str(workdir),
             "CODEY_PROJECT_DIR": str(workdir)},
        output_cap=64 * 1024, sandbox=action.sandbox, network=action.network)


async def run_hooks(action: RunHooks, workdir: Path, home: Path, run_one: RunOne,
                    user_home: Path | None = None,
                    boundary: Boundary | None = None) -> HooksRan:
    """Run the hooks of ``action.event`` that match ``action.match``, from the files that
    apply to ``workdir`` (a real, allowed directory), all at once (as Claude Code does);
    the runs come back in the files' order."""
    loop = asyncio.get_running_loop()
    files = await loop.run_in_executor(None, read_hook_files, workdir, home, user_home,
                                       boundary)
    trusted = set(action.trusted)
    chosen: list[tuple[HookFile, HookCommand]] = []
    untrusted: list[HookFile] = []
    for file in files:
        mine = [h for h in file.hooks if h.event == action.event and (
            action.event not in _MATCHED or matches(h.matcher, action.match))]
        if not mine:
            continue
        if file.scope == "project" and file.sha256 not in trusted:
            untrusted.append(file)
            continue
        chosen.extend((file, h) for h in mine)
    data = hook_input(action, workdir)

    async def one(index: int, file: HookFile, hook: HookCommand) -> HookRun:
        started = time.monotonic()
        try:
            result = await run_one(_command(action, hook, workdir, data, index))
        except ActionRefused as exc:
            return HookRun(path=file.path, command=hook.command_line,
                           problem=f"not run ({exc.code}): {exc.message}")
        return interpret(action.event, file.path, hook, result,
                         int((time.monotonic() - started) * 1000))

    runs = await asyncio.gather(*(one(i, f, h) for i, (f, h) in enumerate(chosen)))
    return HooksRan(runs=list(runs), files=files, untrusted=untrusted)


def digest_of(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes, as :class:`HookFile` carries it (for tests and tools)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
