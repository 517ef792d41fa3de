"""Codey's own turn, as a state machine without I/O: model call → tool calls → approval gate →
worker → back to the model, until the model answers without tools.

The turn is a value, :class:`CodeyTurn` (:mod:`.state`: immutable, its next step named by an
enum, never a stored callback), and :class:`CodeyMachine` its handlers, which hold only the
providers' lookup. One pure function moves it on
(:func:`~codey_server.agent.machine.step`)::

    turn, step = machine.step(CodeyMachine(providers), turn, state, input, ctx)

The driver (:mod:`~codey_server.agent.driver`) feeds it inputs and carries out its effects.
Everything it knows comes from the folded session, so after a restart a new turn
(``resume=True``) picks up exactly where the old one stopped: streams left open are closed as
partial, unfinished tool calls are settled first (a pending action is run again with its
action id, a pending approval or question is waited for, a sub-agent is found again by its
call), then the model is called. A call for the worker is judged only once its machine said
hello to this server (:data:`~.calls.MACHINE_AWAY`): the state's capabilities of it are
otherwise those of the machine as it was before the restart.

One pass of the loop, each arrow a step (or several, when a step waits for an input):

``Start`` → [load the workdir's context] → status running → **settle** the open tool calls
(the parallel ones — ``delegate`` — started together first; the others in order, one at a
time: refused, asked, carried out on the server, or run on the worker) → stop if a plan
waits for approval → inject queued prompts → stop (idle) if the model has nothing to answer,
or (``waiting_user``) at the iteration cap → write prompts' attachments into the workdir →
[reload the context if it changed; compact (asked for, near the window)] → build the body
from the session's history (``BuildBody`` → ``BodyBuilt``) → **call the model** (its deltas
streamed into items, coalesced; its tool calls appended with the first one's action when
nothing asks) → settle again.

Failures are results: a bad tool call, a refused or failed action, a rejection, a worker
timeout all go back to the model as text. A model API error — after the retries of a cut
stream, a compaction (``context_length``) and the fallback provider where they apply —
becomes an error item, and the session stays usable.

The modules: :mod:`.state` (the value), :mod:`.loop` (the loop, the context, attachments,
and the table of steps), :mod:`.calls` (tool calls and the gate), :mod:`.worker` (a call's
action on the worker), :mod:`.model` (the model call and its answer), :mod:`.compact`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from codey_server.agent.machine import (
    ACT_TIMER,
    ActionOutcomeInput,
    ActionProgressed,
    Answered,
    BlobLoaded,
    BlobStored,
    BodyBuilt,
    ChildDone,
    ContextChanged,
    Input,
    ModelDone,
    ModelFailed,
    ModelParts,
    Reviewed,
    SessionAttached,
    Start,
    Stepper,
    WebDone,
    WorkerHello,
    WorkerPresence,
)
from codey_server.agent.route import ProviderInfo
from codey_server.agent.turn import calls, hooks, loop, model, worker
from codey_server.agent.turn.state import CONTEXT_TIMEOUT_S, CodeyTurn, Then, codey_turn

__all__ = ["CONTEXT_TIMEOUT_S", "CodeyMachine", "CodeyTurn", "codey_turn"]

K = Stepper[CodeyTurn]


def _everyone(worker_id: str) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class CodeyMachine:
    """Codey's turn's handlers (:class:`~codey_server.agent.machine.Machine`). It holds the
    providers as configured when asked, by name, and whether a worker said hello to this
    server since it started (lookups, read like the state: no I/O)."""

    providers: Callable[[str], ProviderInfo | None]
    #: True once the worker said hello to this server (or to a replica it is connected to):
    #: until then its capabilities in the state are those of its last hello before the
    #: server's start, and a call is not judged by them (it waits: ``WaitHello``). The
    #: default, for a machine on its own: every worker has
    greeted: Callable[[str], bool] = field(default=_everyone)
    #: the networks ``web_fetch`` may reach although they are private (``web.fetch_allow``):
    #: a URL naming another private address is refused before the user is asked
    fetch_allow: tuple[str, ...] = ()
    #: the hosts ``web_fetch`` reaches without asking (Settings → Tools)
    fetch_domains: tuple[str, ...] = ()

    def handle(self, k: K, input: Input) -> None:
        if isinstance(input, ModelParts):
            model.parts(k, input)
        elif isinstance(input, ActionProgressed):
            worker.progressed(k, input)
        elif isinstance(input, BodyBuilt):
            model.body_built(k, input)
        elif isinstance(input, ModelDone):
            model.done(k)
        elif isinstance(input, ModelFailed):
            model.failed(k, input)
        elif isinstance(input, Start):
            loop.start(k)
        elif isinstance(input, SessionAttached):
            calls.attached(k, input)
        elif isinstance(input, WorkerPresence):
            worker.presence(k, input)
        elif isinstance(input, WorkerHello):
            calls.hello(k, input)
        elif isinstance(input, Answered):
            calls.answered(k, input)
        elif isinstance(input, ChildDone):
            calls.child_done(k, input)
        elif isinstance(input, BlobLoaded):
            loop.blob_loaded(k, input)
        elif isinstance(input, BlobStored):
            worker.blob_stored(k, input)
        elif isinstance(input, ContextChanged):
            loop.context_changed(k)
        elif isinstance(input, Reviewed):
            calls.reviewed(k, input)
        elif isinstance(input, WebDone):
            calls.web_done(k, input)

    def proceed(self, k: K, then: Enum) -> None:
        assert isinstance(then, Then)
        loop.run(k, then)

    def action_over(self, k: K, i: ActionOutcomeInput) -> None:
        t = k.turn
        if t.context is not None and t.context.action_id == i.action_id:
            loop.context_loaded(k, i)
        elif t.attaching is not None and t.attaching.action_id == i.action_id:
            loop.attachment_written(k, i)
        elif t.running is not None and t.running.action_id == i.action_id:
            worker.action_over(k, i)
        elif t.previewing is not None and t.previewing.action_id == i.action_id:
            calls.previewed(k, i)
        elif t.hooking is not None and t.hooking.action_id == i.action_id:
            hooks.hooks_over(k, i)
        else:
            hooks.noted(k, i)  # (hooks nothing waited for: Notification)

    def approval_over(self, k: K, approval_id: str) -> None:
        calls.approval_over(k, approval_id)

    def on_timer(self, k: K, key: str) -> None:
        if key.startswith(ACT_TIMER):
            calls.review_at_t2(k, key)
        elif key == model.RETRY:
            model.retry(k)
