"""The instructions every model call of a session starts with: Codey's own, then what
applies to the session's workdir (environment, AGENTS.md files, skills), then the project's
memory. Rebuilt for each call from the folded state, like the conversation."""

from __future__ import annotations

from codey_protocol.state import SessionInfo, State, memory_key

__all__ = ["INSTRUCTIONS", "build_instructions", "memory_of"]

INSTRUCTIONS = """You are Codey, a coding agent working in a developer's project on their machine.
Use the tools to inspect and change the project: `shell` runs an argv list in the session's
workdir, `apply_patch` edits files, `read_file`/`list_dir`/`write_file` work on files, and
`update_plan` shares your plan. Paths are relative to the workdir. Some calls wait for the
user's approval; a rejection comes back as a result, with the user's reason when given.
Keep going until the task is done, then answer briefly with what you did."""


def _environment(session: SessionInfo) -> str:
    ctx = session.context
    env = ctx.environment if ctx is not None else None
    lines = [f"- Workdir: {session.workdir}"]
    if env is not None:
        if env.os:
            lines.append(f"- OS: {env.os} {env.os_version}".rstrip())
        if env.shell:
            lines.append(f"- Shell: {env.shell}")
        if env.git_branch:
            state = "uncommitted changes" if env.git_dirty else "clean"
            lines.append(f"- Git: branch {env.git_branch} ({state})")
        if env.date:
            lines.append(f"- Date: {env.date[:10]}" + (f" ({env.timezone})"
                                                        if env.timezone else ""))
    return "## Environment\n" + "\n".join(lines)


PLAN_MODE = """## Plan mode
Do not change anything yet. Look at the project with the read-only tools (`read_file`,
`list_dir`, and `shell` for read-only commands such as `ls`, `cat`, `git status`, `rg`), then
propose a plan with `update_plan` and stop. The user reviews the plan, may edit it, and
approves it; you carry it out after that."""


def memory_of(state: State, session: SessionInfo) -> str:
    """The project memory of the session's worker and workdir."""
    memory = state.memories.get(memory_key(session.worker_id, session.workdir))
    return memory.text if memory is not None else ""


def build_instructions(session: SessionInfo, memory: str = "") -> str:
    parts = [INSTRUCTIONS, _environment(session)]
    if session.plan_mode:
        parts.append(PLAN_MODE)
    ctx = session.context
    if ctx is not None and ctx.instructions:
        files = [f"### {f.path}\n{f.text.strip()}" + ("\n… (cut: the file is longer)"
                                                       if f.truncated else "")
                 for f in ctx.instructions]
        parts.append("## Project instructions\nThese AGENTS.md files apply to the workdir, "
                     "outermost first; where they disagree, the later (closer) one wins.\n\n"
                     + "\n\n".join(files))
    if ctx is not None and ctx.skills:
        skills = "\n".join(f"- {s.name}: {s.description} ({s.path})" for s in ctx.skills)
        parts.append("## Skills\nWhen a task matches a skill, read its SKILL.md with "
                     "`read_file` (and the files it names) before you start.\n" + skills)
    if memory.strip():
        parts.append("## Project memory\nNotes kept from earlier sessions in this project:\n"
                     + memory.strip())
    return "\n\n".join(parts)
