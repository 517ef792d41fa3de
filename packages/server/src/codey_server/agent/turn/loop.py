"""Codey's turn: the loop — its start, the workdir's context, settling the open calls, the
prompts queued meanwhile, the iteration cap, the files sent with prompts, and the end — and
the table of the steps a ``Proceed`` goes on with (:func:`run`)."""

from __future__ import annotations

import base64

import msgspec

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.events import IMAGE_MIMES
from codey_protocol.state import SessionContext
from codey_server.agent.conversation import attachment_path, model_call_needed
from codey_server.agent.machine import (
    ActionDone,
    ActionErrored,
    ActionOutcomeInput,
    BlobLoaded,
    LoadBlob,
    RunAction,
    Stepper,
    evolve,
)
from codey_server.agent.turn import calls, compact, hooks, model
from codey_server.agent.turn.state import (
    CONTEXT_TIMEOUT_S,
    After,
    Attaching,
    CodeyTurn,
    Loading,
    Then,
)
from codey_server.core.costs import BUDGET_REACHED, budget_reached

__all__ = ["go", "run", "start"]

K = Stepper[CodeyTurn]


def run(k: K, then: Then) -> None:
    """Take the step ``then`` now."""
    if then is Then.SETTLE:
        calls.settle(k)
    elif then is Then.CONTEXT_THEN_LOOP:
        load_context(k, Then.LOOP)
    elif then is Then.LOOP:
        _loop(k)
    elif then is Then.BEFORE_CALL:
        _before_call(k)
    elif then is Then.AFTER_IDLE:
        _after_idle(k)
    elif then is Then.MODEL_STEP:
        model.model_step(k)
    elif then is Then.SEND_NEW_BODY:
        model.build(k, "send")
    elif then is Then.COMPACT_FOR_LENGTH:
        compact.compact(k, "context_exceeded", After.SEND_OR_FAIL, error=k.turn.error)
    elif then is Then.COMPACTED:
        compact.compacted(k)


def go(k: K, then: Then) -> None:
    """Take the step ``then`` once this step's events are folded (at once if there are
    none): whatever reads the session's items after a change of ours goes through here."""
    if not k.wait(then):
        run(k, then)


# the loop ----------------------------------------------------------------------------------

def start(k: K) -> None:
    config = k.turn.config
    if config.compact_only:
        if model.begin_call(k):
            compact.compact(k, "manual", After.ALONE)
        return
    if config.resume:
        for item in k.session.items:
            if isinstance(item, (ev.AssistantMessage, ev.Reasoning)) and item.streaming:
                k.turn = evolve(k.turn, force_call=True)
                k.emit(ev.SessionItemUpdated(item_id=item.id, streaming=False, partial=True))
    go(k, Then.CONTEXT_THEN_LOOP)


def _loop(k: K) -> None:
    k.status("running")
    calls.settle(k)


def after_settle(k: K) -> None:
    s = k.session
    if s.plan_mode and s.plan_status == "proposed":
        k.status("waiting_user", "the plan waits for your approval")
        k.end()
        return
    queued = [i for i in s.items if isinstance(i, ev.UserMessage) and i.queued]
    k.emit(*[ev.SessionItemUpdated(item_id=i.id, queued=False) for i in queued])
    go(k, Then.BEFORE_CALL)


def _before_call(k: K) -> None:
    t = k.turn
    if t.gone is not None:
        _stop_gone(k, t.gone)
        return
    if not (t.force_call or model_call_needed(k.session)):
        if hooks.before_stop(k):
            return  # the Stop hooks may keep the turn going
        k.status("idle")
        go(k, Then.AFTER_IDLE)
        return
    if hooks.before_model(k):
        return  # SessionStart / UserPromptSubmit hooks first
    reached = budget_reached(k.state, k.session, k.now)
    if reached is not None:
        # between two model calls: the last answer and its tool calls are settled, nothing
        # is half-done; raising the budget (``raise_budget``) starts the turn again here
        k.turn = evolve(t, force_call=False)
        k.emit(reached)
        k.status("waiting_user", BUDGET_REACHED)
        k.end()
        return
    cap = k.session.turn_cap or t.config.limits.turn_iteration_cap
    if t.iterations >= cap:
        k.turn = evolve(t, force_call=False)
        k.emit(ev.SessionItemAppended(item=ev.AssistantMessage(
            id=k.new_id("itm"), ts=k.now,
            text=f"I have taken {cap} steps in this turn without finishing. Should I go "
                 "on? Send a message to continue, or tell me what to change.")))
        k.status("waiting_user", "iteration cap reached")
        k.end()
        return
    k.turn = evolve(t, force_call=False, iterations=t.iterations + 1)
    _write_attachments(k)


def _after_idle(k: K) -> None:
    # a prompt that arrived while the turn was ending starts the next one here
    s = k.session
    last = s.items[-1] if s.items else None
    prompted = isinstance(last, ev.UserMessage) or any(
        isinstance(i, ev.UserMessage) and i.queued for i in s.items)
    if prompted:
        # a new turn, as if started afresh: the one that ended may have changed the workdir's
        # context (made the folder a repository, written AGENTS.md); the model step reloads
        # a stale context before its call, as after any change of it
        k.turn = evolve(k.turn, context_stale=True)
    if prompted or model_call_needed(s):
        _loop(k)
    else:
        k.end()


# the workdir's context ---------------------------------------------------------------------

def load_context(k: K, then: Then) -> None:
    """Load what applies to the workdir (AGENTS.md, skills, environment) from the worker,
    then ``then``. A worker that is away or cannot do it leaves the last known context in
    place: the turn does not wait for it."""
    s = k.session
    k.turn = evolve(k.turn, context_stale=False)
    worker = k.state.workers.get(s.worker_id)
    if worker is None or "load_context" not in worker.capabilities.executors:
        run(k, then)
        return
    action = wk.LoadContext(action_id=k.new_id("act"), session_id=s.session_id,
                            workdir=s.workdir)
    k.turn = evolve(k.turn, context=Loading(action.action_id, then))
    k.effect(RunAction(s.worker_id, action, CONTEXT_TIMEOUT_S, workdir=s.workdir,
                       attach_timeout=CONTEXT_TIMEOUT_S, if_present=True))


def context_loaded(k: K, i: ActionOutcomeInput) -> None:
    loading = k.turn.context
    assert loading is not None
    k.turn = evolve(k.turn, context=None)
    if isinstance(i, ActionErrored) and i.code == "worktree_gone":
        _stop_gone(k, i.message)  # nothing runs in a folder that is not there
        return
    if isinstance(i, ActionDone) and isinstance(i.outcome, wk.ProjectContext):
        found = i.outcome
        event = ev.SessionContextUpdated(instructions=found.instructions, skills=found.skills,
                                         environment=found.environment,
                                         warnings=found.warnings)
        if not _same_context(k.session.context, event):
            k.emit(event)
        if found.hooks != k.session.hook_files:
            k.emit(ev.HooksFound(files=found.hooks))
    go(k, loading.then)


def _stop_gone(k: K, message: str) -> None:
    """End the turn: the session's folder, a worktree, was removed (the worker said so,
    ``worktree_gone``). Its worktree is recorded as removed, so no turn starts there
    again until it is made again from its branch or the session is forked into a new
    one; a prompt not answered yet waits for that."""
    s = k.session
    if s.worktree is not None and s.worktree.status != "removed":
        k.emit(ev.WorktreeUpdated(status="removed", error=message))
    k.status("error", message)
    k.end()


def context_changed(k: K) -> None:
    k.turn = evolve(k.turn, context_stale=True)


def _same_context(old: SessionContext | None, new: ev.SessionContextUpdated) -> bool:
    """Equal for the instructions: the time of day may move, the date may not."""
    if old is None:
        return False
    same_env: bool = msgspec.structs.replace(old.environment, date=old.environment.date[:10]) \
        == msgspec.structs.replace(new.environment, date=new.environment.date[:10])
    return same_env and (old.instructions, old.skills, old.warnings) == (
        new.instructions, new.skills, new.warnings)


# attachments -------------------------------------------------------------------------------

def _write_attachments(k: K) -> None:
    """Put the files sent with prompts (not images: the model sees those) into the workdir
    before the model reads the message that names them; then call the model."""
    messages = tuple((i.id, files) for i in k.session.items
                     if isinstance(i, ev.UserMessage) and not i.queued
                     and not i.attachments_written
                     and (files := tuple(a for a in i.attachments
                                         if a.mime not in IMAGE_MIMES)))
    if not messages:
        model.model_step(k)
        return
    _next_attachment(k, Attaching(messages))


def _next_attachment(k: K, job: Attaching) -> None:
    messages, index = job.messages, job.index
    while messages:
        item_id, files = messages[0]
        if index < len(files):
            k.turn = evolve(k.turn, attaching=evolve(job, messages=messages, index=index))
            k.effect(LoadBlob(files[index].hash))
            return
        k.emit(ev.SessionItemUpdated(item_id=item_id, attachments_written=True))
        messages, index = messages[1:], 0
    k.turn = evolve(k.turn, attaching=None)
    go(k, Then.MODEL_STEP)


def _attachment(job: Attaching) -> ev.Attachment:
    return job.messages[0][1][job.index]


def blob_loaded(k: K, i: BlobLoaded) -> None:
    job = k.turn.attaching
    if job is None:
        return
    a = _attachment(job)
    if i.data is None:
        k.notice("attachment_missing", f"{a.name} is no longer stored on the server; it "
                                       "was not written.")
        _next_attachment(k, evolve(job, index=job.index + 1))
        return
    try:
        content, encoding = i.data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        content, encoding = base64.b64encode(i.data).decode(), "base64"
    s = k.session
    action = wk.WriteFile(action_id=k.new_id("act"), session_id=s.session_id,
                          workdir=s.workdir, path=attachment_path(a), content=content,
                          encoding=encoding)  # type: ignore[arg-type]
    k.turn = evolve(k.turn, attaching=evolve(job, action_id=action.action_id))
    k.effect(RunAction(s.worker_id, action, k.turn.config.limits.action_timeout_s,
                       workdir=s.workdir, attach_timeout=CONTEXT_TIMEOUT_S))


def attachment_written(k: K, i: ActionOutcomeInput) -> None:
    job = k.turn.attaching
    assert job is not None
    if not isinstance(i, ActionDone):
        err = f"{i.code}: {i.message}" if isinstance(i, ActionErrored) else ""
        k.notice("attachment_failed", f"{_attachment(job).name} could not be written "
                                      f"into the workdir: {err}")
    _next_attachment(k, evolve(job, index=job.index + 1, action_id=None))
