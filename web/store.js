// The browser's state: the same fold as `codey_server.features.apply` (every feature's
// `fold.py`, composed), in JavaScript.
//
// Written by hand, on purpose: what in it is data (constants, defaults, the update rule) is
// generated; the handlers are logic with no declaration to generate them from. Its guard is
// the parity of generated logs (packages/server/tests/unit/test_fold_parity_node.py): a
// handler missing or different here fails it. Why: docs/architecture.md, "web/store.js is
// written by hand".
//
// `apply(state, envelope)` mutates `state` in place and returns it, exactly like the Python
// fold; parity tests fold logs through both and compare the JSON. Every object created here
// has the same keys and defaults as its Python struct (codey_protocol.state), because the
// server's snapshots contain every field and the two must compare equal: the `fillX`
// functions of fold_constants.js, generated from the structs, fill in the defaults.
//
// The server sends every event complete, in the current shape: one stored by an older release
// is upcast there (codey_protocol/upcasting.py: each missing field set to what it meant then)
// and sent with every field. So every event a handler sees is complete, an appended item is
// stored as received, and "has attribute X" in Python is `X in item` here.

import { APPEND_FIELDS, REPLACE_FIELDS, applyUpdate } from "./item_fields.js";
import { Tails } from "./tails.js";
import {
  BUSY_STATUSES, COMPACTION_ENDED, MAX_CHANGED_PATHS, MODEL_CHANGED, PROCESS_OUTPUT_KEPT,
  PROCESSES_ENDED_KEPT, SCHEDULE_RUNS_KEPT, WORKING_STATUSES, fillApproval, fillApprovalReview,
  fillAttention, fillAttentionSetting, fillAuthInfo,
  fillPortForward, fillProjectMemory, fillQuestion, fillRateLimit, fillScheduleInfo,
  fillScheduleRun, fillSessionContext,
  fillSessionInfo, fillSessionProcess, fillState, fillTaskInfo, fillTelegramChat, fillPushDevice,
  fillTerminalInfo, fillUpgradeNotice, fillWorkerInfo, fillGoalInfo,
  fillBudget, fillBudgetStop, fillModelPrice, fillSpend,
  TRIGGER_DELIVERIES_KEPT, fillTriggerDelivery, fillTriggerInfo,
  fillCheckpointMark, fillRewoundBranch,
  HOOK_RUNS_KEPT, fillHookFile, fillHookRunInfo,
} from "./fold_constants.js";

export { MAX_CHANGED_PATHS };

// Which update fields append and which replace, and the rule that applies them
// (`applyUpdate`), are generated from SessionItemUpdated's schema into item_fields.js; the
// rule and the Python side are in codey_protocol/updates.py.
const DELTA_NAMES = Object.keys(APPEND_FIELDS);

/** A fresh `State()`. */
export function emptyState() {
  return fillState({});
}

/** The item with `itemId`, searched from the end where updates nearly always land. */
export function findItem(session, itemId) {
  const items = session.items;
  for (let i = items.length - 1; i >= 0; i--) {
    if (items[i].id === itemId) return items[i];
  }
  return null;
}

function sameList(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

// --- workers and pairing ------------------------------------------------------------------

function pairRequested(state, env, e) {
  state.pair_requests[e.request_id] = {
    request_id: e.request_id, hostname: e.hostname, os: e.os,
    python_version: e.python_version, worker_version: e.worker_version,
    roots: [...e.roots], fingerprint: e.fingerprint, requested_at: env.ts,
    expires_at: e.expires_at,
  };
}

function pairResolved(state, env, e) {
  delete state.pair_requests[e.request_id];
}

function paired(state, env, e) {
  delete state.pair_requests[e.request_id];
  state.workers[e.worker_id] = fillWorkerInfo({
    worker_id: e.worker_id, hostname: e.hostname, os: e.os, python_version: e.python_version,
    worker_version: e.worker_version, roots: [...e.roots], paired_at: env.ts,
    fingerprint: e.fingerprint,
  });
}

function renamed(state, env, e) {
  const w = state.workers[e.worker_id];
  if (w) w.name = e.name;
}

function revoked(state, env, e) {
  const w = state.workers[e.worker_id];
  if (w) {
    w.revoked = true;
    w.connected = false;
    w.last_seen = env.ts;
  }
}

function connected(state, env, e) {
  const w = state.workers[e.worker_id];
  if (!w) return;
  w.connected = true;
  w.hostname = e.hostname;
  w.os = e.os;
  w.worker_version = e.worker_version;
  w.capabilities = e.capabilities;
  w.replica = e.replica;
  w.last_seen = env.ts;
}

function disconnected(state, env, e) {
  const w = state.workers[e.worker_id];
  // a socket that ended on another replica than the one now holding the worker
  const elsewhere = e.replica && w && w.replica && e.replica !== w.replica;
  if (w && !elsewhere) {
    w.connected = false;
    w.last_seen = env.ts;
  }
}

// --- sessions -----------------------------------------------------------------------------

function session(state, env) {
  if (env.session_id == null) return null;
  const s = state.sessions[env.session_id];
  if (s) s.updated_at = env.ts;
  return s || null;
}

function sessionCreated(state, env, e) {
  if (env.session_id == null) return;
  // "none": created before the sandbox existed; it runs sandboxed now (as core/fold.py)
  const before = e.sandbox === "none";
  state.sessions[env.session_id] = fillSessionInfo({
    session_id: env.session_id, title: e.title, worker_id: e.worker_id, workdir: e.workdir,
    provider: e.provider, model: e.model, policy: e.policy, created_at: env.ts,
    updated_at: env.ts, plan_mode: e.plan_mode, parent_id: e.parent_id,
    parent_item: e.parent_item, role: e.role, read_only: e.read_only, turn_cap: e.turn_cap,
    agent: e.agent, sandbox: before ? "workspace-write" : e.sandbox,
    network: before ? false : e.network,
    worktree: e.worktree ? structuredClone(e.worktree) : null,
  });
}

// the fields of `worktree_updated` (each replaces when it is not null)
const WORKTREE_FIELDS = ["status", "path", "base", "base_commit", "repo_root", "files", "added",
  "deleted", "merged", "pr_url", "error", "branch_deleted"];

function worktreeUpdated(state, env, e) {
  const s = env.session_id == null ? null : state.sessions[env.session_id];
  if (!s || !s.worktree) return;
  for (const name of WORKTREE_FIELDS) {
    if (e[name] !== null && e[name] !== undefined) s.worktree[name] = e[name];
  }
  if (e.path) s.workdir = e.path; // the worktree is the session's workdir from now on
  s.updated_at = env.ts;
}

const BUSY = new Set(BUSY_STATUSES);
function statusChanged(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.status = e.status;
    s.status_reason = e.reason;
    if (e.status === "running") s.parked_on = null; // (a parked session's turn goes on)
    // the session's own working time, turn by turn (core/fold.py `_status`)
    if (BUSY.has(e.status)) {
      if (s.busy_since == null) s.busy_since = env.ts;
    } else if (s.busy_since != null) {
      s.busy_seconds += Math.max(0, env.ts - s.busy_since);
      s.busy_since = null;
    }
    if (s.task_id != null) taskFollows(state, s.task_id, s.session_id, e.status, env.ts);
    // running again: no longer stopped at a budget (core/fold.py `_status`)
    if (e.status === "running") s.budget_stop = null;
  }
}

/** board/fold.py's _task_follows: a task follows its latest session. */
const WORKING = new Set(WORKING_STATUSES);
function taskFollows(state, taskId, sessionId, status, ts) {
  const task = state.tasks[taskId];
  if (!task || !task.session_ids.length || task.session_ids.at(-1) !== sessionId) return;
  if (WORKING.has(status) && (task.status === "todo" || task.status === "review")) {
    task.status = "in_progress";
    task.updated_at = ts;
  } else if (status === "idle" && task.status === "in_progress") {
    task.status = "review";
    task.updated_at = ts;
  }
}

function taskCreated(state, env, e) {
  state.tasks[e.task_id] = fillTaskInfo({
    task_id: e.task_id, title: e.title, description: e.description, status: e.status,
    order: e.order, depends_on: [...e.depends_on], created_at: env.ts, updated_at: env.ts,
  });
}

function taskChanged(state, env, e) {
  const task = state.tasks[e.task_id];
  if (!task) return;
  task.updated_at = env.ts;
  if (e.type === "task_updated") {
    task.title = e.title;
    task.description = e.description;
    task.depends_on = [...e.depends_on];
  } else if (e.type === "task_moved") {
    task.status = e.status;
    task.order = e.order;
  } else if (e.type === "task_deleted") {
    delete state.tasks[e.task_id];
  } else {
    task.session_ids.push(e.session_id);
    task.status = "in_progress";
    const s = state.sessions[e.session_id];
    if (s) s.task_id = e.task_id;
  }
}

function titleChanged(state, env, e) {
  const s = session(state, env);
  if (s) s.title = e.title;
}

function policyChanged(state, env, e) {
  const s = session(state, env);
  if (s) s.policy = e.policy;
}

function sandboxChanged(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.sandbox = e.sandbox;
    s.network = e.network;
  }
}

function itemAppended(state, env, e) {
  const s = session(state, env);
  if (!s) return;
  s.items.push(e.item);
  if (e.item.kind === "summary") {
    s.compaction_requested = false;
    s.usage.context_tokens = 0;
  } else if (e.item.kind === "notice" && COMPACTION_ENDED.includes(e.item.code)) {
    s.compaction_requested = false;
  } else if (e.item.kind === "user_message" && s.plan_mode) {
    s.plan_status = "none"; // feedback on the proposed plan: the model revises it
  }
}

function agentCommands(state, env, e) {
  const s = session(state, env);
  if (s) s.agent_commands = e.commands.map((c) => ({ ...c }));
}

function agentMode(state, env, e) {
  const s = session(state, env);
  if (!s) return;
  s.agent_mode = e.current_mode;
  if (e.modes !== null) s.agent_modes = e.modes.map((m) => ({ ...m }));
}

function agentConfig(state, env, e) {
  const s = session(state, env);
  if (s) s.agent_config = structuredClone(e.options);
}

function contextUpdated(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.context = fillSessionContext({
      instructions: [...e.instructions], skills: [...e.skills], environment: e.environment,
      warnings: [...e.warnings], loaded_at: env.ts,
    });
  }
}

function archived(state, env, e) {
  const s = session(state, env);
  if (s) s.archived = e.archived;
}

function deleted(state, env) {
  if (env.session_id != null) delete state.sessions[env.session_id];
}

/** Finished items only: a fork starts idle (core/fold.py's _kept_by_fork). */
function keptByFork(item) {
  if (item.kind === "tool_call") return item.result !== null && item.result !== undefined;
  if (item.kind === "user_message") return !item.queued;
  if (item.kind === "assistant_message" || item.kind === "reasoning") return !item.streaming;
  return true;
}

function forked(state, env, e) {
  const src = state.sessions[e.from_session];
  if (!src || env.session_id == null || env.session_id in state.sessions) return;
  const items = [];
  for (const item of src.items) {
    if (keptByFork(item)) items.push(structuredClone(item));
    if (item.id === e.until_item) break;
  }
  // a fork into a worktree of its own starts in the repository, as a new session does
  const worktree = e.worktree ? structuredClone(e.worktree) : null;
  state.sessions[env.session_id] = fillSessionInfo({
    session_id: env.session_id, title: e.title, worker_id: src.worker_id,
    workdir: worktree ? worktree.repo : src.workdir,
    provider: src.provider, model: src.model, effort: src.effort, policy: src.policy,
    created_at: env.ts,
    updated_at: env.ts, items, forked_from: e.from_session,
    context: src.context ? structuredClone(src.context) : null,
    sandbox: src.sandbox, network: src.network, worktree,
  });
}

function moved(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.worker_id = e.worker_id;
    if (e.workdir) { s.workdir = e.workdir; s.worktree = null; s.updated_at = env.ts; }
  }
}

function questionAsked(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.questions[e.question_id] = fillQuestion({
      question_id: e.question_id, item_id: e.item_id, question: e.question,
      choices: [...e.choices], asked_at: env.ts,
    });
  }
}

function questionAnswered(state, env, e) {
  const s = session(state, env);
  const q = s && s.questions[e.question_id];
  if (!q || q.status !== "pending") return; // the first answer wins
  q.status = e.cancelled ? "cancelled" : "answered";
  q.answer = e.answer;
  q.answered_at = env.ts;
}

function memoryUpdated(state, env, e) {
  state.memories[`${e.worker_id}:${e.workdir}`] = fillProjectMemory({
    worker_id: e.worker_id, workdir: e.workdir, text: e.text, updated_at: env.ts,
  });
}

function terminalCreated(state, env, e) {
  state.terminals[e.terminal_id] = fillTerminalInfo({
    terminal_id: e.terminal_id, worker_id: e.worker_id, workdir: e.workdir,
    session_id: env.session_id, created_at: env.ts, created_by: e.by, updated_at: env.ts,
  });
}

function terminalViewers(state, env, e) {
  const t = state.terminals[e.terminal_id];
  if (!t) return;
  t.viewers = Math.max(0, t.viewers + (e.type === "terminal_attached" ? 1 : -1));
  t.updated_at = env.ts;
}

// a one-time schedule whose time was dealt with never fires again (the server's `plan`)
function scheduleDone(info) {
  return info.spec.at != null && info.last_due >= info.spec.at;
}

function scheduleSaved(state, env, e) {
  let info = state.schedules[e.spec.schedule_id];
  if (info) info.spec = e.spec;
  else {
    info = fillScheduleInfo({ spec: e.spec, created_at: env.ts });
    state.schedules[e.spec.schedule_id] = info;
  }
  info.done = scheduleDone(info);
}

function scheduleFired(state, env, e) {
  const info = state.schedules[e.schedule_id];
  if (!info) return;
  info.last_due = Math.max(info.last_due, e.due_at);
  info.done = scheduleDone(info);
  info.runs.push(fillScheduleRun({ due_at: e.due_at, fired_at: env.ts, outcome: e.outcome,
    session_id: e.session_id, error: e.error, skipped: e.skipped, item_id: e.item_id }));
  if (info.runs.length > SCHEDULE_RUNS_KEPT) {
    info.runs.splice(0, info.runs.length - SCHEDULE_RUNS_KEPT);
  }
}

function triggerSet(state, env, e) {
  const info = state.triggers[e.spec.trigger_id];
  if (info) info.spec = e.spec;
  else state.triggers[e.spec.trigger_id] = fillTriggerInfo({ spec: e.spec, created_at: env.ts });
}

function triggerDelivered(state, env, e) {
  const info = state.triggers[e.trigger_id];
  if (!info) return;
  info.deliveries.push(fillTriggerDelivery({ delivery_id: e.delivery_id, at: env.ts,
    outcome: e.outcome, event: e.event, reason: e.reason, session_id: e.session_id,
    task_id: e.task_id, payload: e.payload, replay_of: e.replay_of, missing: e.missing }));
  if (info.deliveries.length > TRIGGER_DELIVERIES_KEPT) {
    info.deliveries.splice(0, info.deliveries.length - TRIGGER_DELIVERIES_KEPT);
  }
}

function terminalClosed(state, env, e) {
  const t = state.terminals[e.terminal_id];
  if (!t) return;
  t.closed = true;
  t.closed_reason = e.reason;
  t.viewers = 0;
  t.updated_at = env.ts;
}

function compactionRequested(state, env) {
  const s = session(state, env);
  if (s) s.compaction_requested = true;
}

function itemUpdated(state, env, e) {
  const s = session(state, env);
  if (!s) return;
  const item = findItem(s, e.item_id);
  if (!item) return;
  applyUpdate(item, e);
}

/**
 * The fields a `session_item_updated` event carries: its non-empty deltas, then its non-null
 * replacements (e.g. `["output_delta"]` for a chunk of command output).
 */
export function updateFields(e) {
  const carried = [];
  for (const name of DELTA_NAMES) if (e[name]) carried.push(name);
  for (const name of REPLACE_FIELDS) {
    if (e[name] !== null && e[name] !== undefined) carried.push(name);
  }
  return carried;
}

function planUpdated(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.plan = [...e.steps];
    s.plan_explanation = e.explanation;
    if (s.plan_mode) s.plan_status = "proposed";
  }
}

function planApproved(state, env) {
  const s = session(state, env);
  if (s) {
    s.plan_mode = false;
    s.plan_status = "approved";
  }
}

function approvalRequested(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.approvals[e.approval_id] = fillApproval({
      approval_id: e.approval_id, item_id: e.item_id, kind: e.kind, command: e.command,
      patch: e.patch, path: e.path, reason: e.reason, requested_at: env.ts,
    });
  }
}

function approvalResolved(state, env, e) {
  const s = session(state, env);
  if (!s) return;
  const a = s.approvals[e.approval_id];
  if (!a || a.status !== "pending") return; // the first decision wins
  a.status = e.decision;
  a.message = e.message;
  a.decided_at = env.ts;
  if (e.decision === "approved") s.reviewer_denials = 0; // the run of denials is over
  if (e.for_session && e.decision === "approved" && a.command && a.command.length) {
    // approving a command for the session never lets it leave the sandbox
    const prefixes = a.kind === "escalate" ? s.escalated_prefixes : s.approved_prefixes;
    if (!prefixes.some((p) => sameList(p, a.command))) prefixes.push([...a.command]);
  }
}

// the attention ladder and the reviewer (agent/fold.py)
function attentionChanged(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.attention_setting = fillAttentionSetting({
      nudge_after_s: e.nudge_after_s, act_after_s: e.act_after_s,
      on_approval: e.on_approval, on_question: e.on_question,
    });
  }
}

function attentionScheduled(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.attention = fillAttention({
      target_id: e.target_id, target: e.target, nudge_at: e.nudge_at, act_at: e.act_at,
      then: e.then,
    });
  }
}

function attentionNudged(state, env, e) {
  const s = session(state, env);
  if (!s) return;
  if (e.step === "t1") {
    if (s.attention && s.attention.target_id === e.target_id) s.attention.nudged = true;
  } else {
    s.parked_on = e.target_id;
  }
}

function attentionActed(state, env, e) {
  const s = session(state, env);
  if (s && s.attention && s.attention.target_id === e.target_id) s.attention.acted = true;
}

function hooksFound(state, env, e) {
  const s = session(state, env);
  if (s) s.hook_files = e.files.map((f) => fillHookFile({ ...f }));
}

function hooksTrusted(state, env, e) {
  const s = session(state, env);
  if (s && !s.trusted_hooks.includes(e.sha256)) s.trusted_hooks.push(e.sha256);
}

function hookRan(state, env, e) {
  const s = session(state, env);
  if (!s) return;
  s.hook_runs.push(fillHookRunInfo({
    item_id: e.item_id, event: e.event, path: e.path, command_line: e.command_line,
    exit_code: e.exit_code, duration_ms: e.duration_ms, output: e.output,
    timed_out: e.timed_out, decision: e.decision, reason: e.reason, problem: e.problem,
    at: env.ts,
  }));
  if (s.hook_runs.length > HOOK_RUNS_KEPT) s.hook_runs.splice(0, s.hook_runs.length - HOOK_RUNS_KEPT);
}

function approvalReviewed(state, env, e) {
  const s = session(state, env);
  const a = s && s.approvals[e.approval_id];
  if (!a) return;
  a.review = fillApprovalReview({
    decision: e.verdict, risk: e.risk, reason: e.reason, reviewer: e.reviewer,
    approved: e.approved,
  });
  if (e.verdict === "deny") s.reviewer_denials += 1;
  else if (e.verdict === "approve") s.reviewer_denials = 0;
}

// a turn's checkpoint (checkpoints/fold.py): one per turn, a later record replaces it
function checkpointRecorded(state, env, e) {
  const s = session(state, env);
  if (!s) return;
  const mark = fillCheckpointMark({
    turn: e.turn, commit: e.commit, files: e.files, skipped: [...e.skipped], shadow: e.shadow,
    at: env.ts,
  });
  const at = s.checkpoints.findIndex((c) => c.turn === e.turn);
  if (at >= 0) s.checkpoints[at] = mark;
  else s.checkpoints.push(mark);
}

function actionRequested(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.pending_actions[e.action_id] = {
      action_id: e.action_id, item_id: e.item_id, worker_id: e.worker_id, action: e.action,
      sandbox: s.sandbox, network: s.network,
    };
  }
}

function actionFinished(state, env, e) {
  const s = session(state, env);
  if (s) delete s.pending_actions[e.action_id];
}

// --- a session's processes ------------------------------------------------------------------

/** The session's process `processId`, or null. */
export function findProcess(session, processId) {
  for (const p of session.processes) if (p.process_id === processId) return p;
  return null;
}

/** Output read from a process: its newest PROCESS_OUTPUT_KEPT characters are kept, counted in
 * code points as Python counts them (a string of that many UTF-16 units has no more). */
function readOutput(p, delta) {
  if (!delta) return;
  let out = p.output + delta;
  if (out.length > PROCESS_OUTPUT_KEPT) {
    const points = Array.from(out);
    if (points.length > PROCESS_OUTPUT_KEPT) {
      out = points.slice(-PROCESS_OUTPUT_KEPT).join("");
      p.output_cut = true;
    }
  }
  p.output = out;
}

function processStarted(state, env, e) {
  const s = session(state, env);
  if (!s || findProcess(s, e.process_id)) return;
  const p = fillSessionProcess({
    process_id: e.process_id, item_id: e.item_id, worker_id: e.worker_id, argv: [...e.argv],
    cwd: e.cwd, tty: e.tty, started_at: env.ts, sandbox: e.sandbox, network: e.network,
  });
  readOutput(p, e.output);
  s.processes.push(p);
}

function processOutput(state, env, e) {
  const s = session(state, env);
  const p = s && findProcess(s, e.process_id);
  if (p) readOutput(p, e.output_delta);
}

function processStopRequested(state, env, e) {
  const s = session(state, env);
  const p = s && findProcess(s, e.process_id);
  if (p && p.status === "running") {
    p.status = "stopping";
    p.stop_by = e.by;
  }
}

function processEnded(state, env, e) {
  const s = session(state, env);
  const p = s && findProcess(s, e.process_id);
  if (!p || p.status === "ended" || p.status === "gone") return; // the first end wins
  readOutput(p, e.output_delta);
  p.status = e.stopped_by === "gone" ? "gone" : "ended";
  p.exit_code = e.exit_code;
  p.signal = e.signal;
  p.stopped_by = e.stopped_by;
  p.ended_at = env.ts;
  p.ports = []; // it listens on nothing now, and its forwards ended with it
  for (const f of p.forwards) if (f.status === "opening" || f.status === "open") f.status = "closed";
  const ended = [];
  s.processes.forEach((x, i) => { if (x.status === "ended" || x.status === "gone") ended.push(i); });
  if (ended.length > PROCESSES_ENDED_KEPT) s.processes.splice(ended[0], 1);
}

function processListening(state, env, e) {
  const s = session(state, env);
  const p = s && findProcess(s, e.process_id);
  if (p && (p.status === "running" || p.status === "stopping")) p.ports = [...e.ports];
}

function processForwardRequested(state, env, e) {
  const s = session(state, env);
  const p = s && findProcess(s, e.process_id);
  if (!p || (p.status !== "running" && p.status !== "stopping")) return;
  p.forwards = p.forwards.filter((f) => f.port !== e.port); // a failed one is tried again
  p.forwards.push(fillPortForward({ port: e.port }));
}

function processForwarded(state, env, e) {
  const s = session(state, env);
  const p = s && findProcess(s, e.process_id);
  const f = p && p.forwards.find((x) => x.port === e.port);
  if (!f || f.status !== "opening") return; // (the process ended meanwhile: closed stays closed)
  f.status = e.error ? "failed" : "open";
  f.address = e.address;
  f.error = e.error;
}

function workspaceChanged(state, env, e) {
  const s = session(state, env);
  if (!s) return;
  const fresh = [...new Set(e.paths)];
  const seen = new Set(fresh);
  const kept = s.changed_paths.filter((p) => !seen.has(p));
  s.changed_paths = kept.concat(fresh).slice(-MAX_CHANGED_PATHS);
}

function usageRecorded(state, env, e) {
  const s = session(state, env);
  if (s) {
    const u = s.usage;
    u.input_tokens += e.input_tokens;
    u.output_tokens += e.output_tokens;
    u.reasoning_tokens += e.reasoning_tokens;
    u.total_tokens += e.total_tokens;
    u.cached_tokens += e.cached_tokens;
    u.cache_write_tokens += e.cache_write_tokens;
    u.turns += 1;
    u.context_tokens = e.context_tokens ?? e.input_tokens + e.output_tokens;
    if (e.context_window != null) u.context_window = e.context_window;
    if (e.cost_micros == null) u.unpriced_calls += 1;
    else u.cost_micros += e.cost_micros;
    // the day's spend by provider (agent/fold.py `_usage`)
    const provider = e.provider || s.provider || "unknown";
    const key = utcDay(env.ts);
    const day = state.spend[key] || (state.spend[key] = {});
    const spend = day[provider] || (day[provider] = fillSpend({}));
    spend.tokens += e.total_tokens;
    spend.calls += 1;
    if (e.cost_micros == null) spend.unpriced_calls += 1;
    else spend.cost_micros += e.cost_micros;
  }
}

/** The UTC day of `ts` (seconds) as YYYY-MM-DD: core/costs.py `day_of`. */
export function utcDay(ts) {
  return new Date(ts * 1000).toISOString().slice(0, 10);
}

function budgetSet(state, env, e) {
  const limits = { max_tokens: e.max_tokens, max_micros: e.max_micros };
  if (e.scope === "day") {
    state.day_budget = fillBudget(limits);
    return;
  }
  const s = session(state, env);
  if (s) s.budget = e.max_tokens == null && e.max_micros == null ? null : fillBudget(limits);
}

function budgetReached(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.budget_stop = fillBudgetStop({
      scope: e.scope, unit: e.unit, limit: e.limit, spent: e.spent, at: env.ts,
    });
  }
}

function pricesSet(state, env, e) {
  state.prices = {};
  for (const [name, p] of Object.entries(e.prices)) state.prices[name] = fillModelPrice({ ...p });
}

function rateLimit(state, env, e) {
  state.rate_limits[e.provider] = fillRateLimit({
    limit_requests: e.limit_requests, remaining_requests: e.remaining_requests,
    reset_requests: e.reset_requests, limit_tokens: e.limit_tokens,
    remaining_tokens: e.remaining_tokens, reset_tokens: e.reset_tokens, updated_at: env.ts,
  });
}

function modelChanged(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.provider = e.provider;
    s.model = e.model;
    s.effort = e.effort;
    // a mark in the transcript where it changed, as core/fold.py makes it (same id, words)
    s.items.push({
      kind: "notice", id: `itm_model_${env.seq}`, ts: env.ts, code: MODEL_CHANGED,
      text: modelChangeWords(e, WORKING_STATUSES.includes(s.status)),
    });
  }
}

/** The model-change mark's text (core/fold.py `model_change_words`). */
export function modelChangeWords(e, midTurn) {
  let words = `Model: ${e.provider} / ${e.model}`;
  if (e.effort) words += ` · effort ${e.effort}`;
  if (midTurn) words += " (from the next turn)";
  if (e.reason) words += ` — ${e.reason}`;
  return words;
}

function providerSaved(state, env, e) {
  state.providers[e.provider.name] = structuredClone(e.provider);
}

function providerRemoved(state, env, e) {
  delete state.providers[e.name];
  delete state.auth[e.name];  // its credential went with it
}

function authUpdated(state, env, e) {
  state.auth[e.provider] = fillAuthInfo({
    provider: e.provider, state: e.state, method: e.method, account: e.account,
    expires_at: e.expires_at, error: e.error, verification_uri: e.verification_uri,
    user_code: e.user_code,
  });
}

function telegramPaired(state, env, e) {
  const chat = state.telegram_chats[String(e.chat_id)];
  if (chat) {
    chat.title = e.title;
  } else {
    state.telegram_chats[String(e.chat_id)] = fillTelegramChat({
      chat_id: e.chat_id, title: e.title, paired_at: env.ts,
    });
  }
}

function telegramSessionChosen(state, env, e) {
  const chat = state.telegram_chats[String(e.chat_id)];
  if (chat) chat.session_id = e.session_id;
}

function telegramSent(state, env, e) {
  const chat = state.telegram_chats[String(e.chat_id)];
  if (chat) chat.sent[e.key] = e.message_id;
}

// --- goals (codey_server/core/goals.py) ---------------------------------------------------

function goalSet(state, env, e) {
  const s = session(state, env);
  if (!s) return;
  s.goal = fillGoalInfo({
    goal_id: e.goal_id, condition: e.condition, command: e.command ? [...e.command] : null,
    max_turns: e.max_turns, checked_item: s.items.length ? s.items[s.items.length - 1].id : "",
    set_at: env.ts, updated_at: env.ts,
  });
}

function goalChecked(state, env, e) {
  const s = session(state, env);
  const g = s && s.goal;
  if (!g || g.goal_id !== e.goal_id) return;
  g.attempts = e.attempt;
  g.last_met = e.met;
  g.last_output = e.output;
  g.last_exit_code = e.exit_code;
  g.checked_item = e.after_item;
  g.updated_at = env.ts;
}

function goalEnded(state, env, e) {
  const s = session(state, env);
  const g = s && s.goal;
  if (!g || g.goal_id !== e.goal_id) return;
  g.status = e.type === "goal_met" ? "met" : "given_up";
  g.reason = e.reason;
  g.updated_at = env.ts;
}

// --- Web Push devices (codey_server/push/fold.py) -------------------------------------------

function pushDeviceAdded(state, env, e) {
  const known = state.push_devices[e.device_id];
  state.push_devices[e.device_id] = fillPushDevice({
    device_id: e.device_id, name: e.name, endpoint_host: e.endpoint_host, kinds: [...e.kinds],
    added_at: known ? known.added_at : env.ts,
  });
}

function pushDeviceChanged(state, env, e) {
  const device = state.push_devices[e.device_id];
  if (device) {
    device.name = e.name;
    device.kinds = [...e.kinds];
  }
}

// --- upgrades of the data (codey_server/upgrades/fold.py) -----------------------------------

function dataUpgraded(state, env, e) {
  if (state.upgrades.some((n) => n.upgrade_id === e.upgrade_id)) return;
  state.upgrades.push(fillUpgradeNotice({
    upgrade_id: e.upgrade_id, from_format: e.from_format, to_format: e.to_format,
    version: e.version, changes: [...e.changes], backup: e.backup, upgraded_at: env.ts,
  }));
}

function upgradeNoticeDismissed(state, env, e) {
  for (const notice of state.upgrades) {
    if (notice.upgrade_id === e.upgrade_id) notice.dismissed = true;
  }
}

// --- rewind (codey_server/core/rewind.py) -------------------------------------------------

/** The index of the live prompt `turn` in `s.items` (-1: none), as core/rewind.turn_index. */
export function turnIndex(s, turn) {
  for (let i = s.items.length - 1; i >= 0; i--) {
    const item = s.items[i];
    if (item.id === turn) return item.kind === "user_message" && !item.queued ? i : -1;
  }
  return -1;
}

function conversationRewound(state, env, e) {
  const s = env.session_id == null ? null : state.sessions[env.session_id];
  if (!s) return;
  const i = turnIndex(s, e.turn);
  if (i < 0) return;
  s.updated_at = env.ts;
  s.rewound.push(fillRewoundBranch({
    turn: e.turn, after: i ? s.items[i - 1].id : "", at: env.ts, mode: e.mode,
    items: s.items.slice(i),
  }));
  s.items.length = i;
  s.usage.context_tokens = 0;
  s.plan_status = "none";
  if (s.goal && s.goal.status === "active") {
    s.goal.checked_item = s.items.length ? s.items[s.items.length - 1].id : "";
  }
}

const HANDLERS = {
  worker_pair_requested: pairRequested,
  worker_pair_resolved: pairResolved,
  worker_paired: paired,
  worker_revoked: revoked,
  worker_renamed: renamed,
  worker_connected: connected,
  worker_disconnected: disconnected,
  session_created: sessionCreated,
  session_status_changed: statusChanged,
  session_title_changed: titleChanged,
  session_policy_changed: policyChanged,
  session_sandbox_changed: sandboxChanged,
  session_model_changed: modelChanged,
  worktree_updated: worktreeUpdated,
  session_item_appended: itemAppended,
  session_item_updated: itemUpdated,
  plan_updated: planUpdated,
  plan_approved: planApproved,
  turn_requested: (state, env) => { session(state, env); },
  approval_requested: approvalRequested,
  approval_resolved: approvalResolved,
  action_requested: actionRequested,
  action_finished: actionFinished,
  process_started: processStarted,
  process_output: processOutput,
  process_stop_requested: processStopRequested,
  process_ended: processEnded,
  process_listening: processListening,
  process_forward_requested: processForwardRequested,
  process_forwarded: processForwarded,
  session_workspace_changed: workspaceChanged,
  token_usage_recorded: usageRecorded,
  compaction_requested: compactionRequested,
  session_context_updated: contextUpdated,
  session_archived: archived,
  session_deleted: deleted,
  session_forked: forked,
  session_moved: moved,
  question_asked: questionAsked,
  question_answered: questionAnswered,
  memory_updated: memoryUpdated,
  rate_limit_updated: rateLimit,
  budget_set: budgetSet,
  budget_reached: budgetReached,
  prices_set: pricesSet,
  auth_status_updated: authUpdated,
  provider_saved: providerSaved,
  provider_removed: providerRemoved,
  terminal_created: terminalCreated,
  terminal_attached: terminalViewers,
  terminal_detached: terminalViewers,
  terminal_closed: terminalClosed,
  task_created: taskCreated,
  task_updated: taskChanged,
  task_moved: taskChanged,
  task_deleted: taskChanged,
  task_run_started: taskChanged,
  schedule_saved: scheduleSaved,
  schedule_deleted: (state, env, e) => { delete state.schedules[e.schedule_id]; },
  schedule_fired: scheduleFired,
  trigger_set: triggerSet,
  trigger_removed: (state, env, e) => { delete state.triggers[e.trigger_id]; },
  trigger_delivered: triggerDelivered,
  telegram_chat_paired: telegramPaired,
  telegram_chat_removed: (state, env, e) => { delete state.telegram_chats[String(e.chat_id)]; },
  telegram_session_chosen: telegramSessionChosen,
  telegram_message_sent: telegramSent,
  telegram_update_handled: (state, env, e) => {
    if (e.bot_id !== state.telegram_bot_id) {
      state.telegram_bot_id = e.bot_id;
      state.telegram_offset = e.update_id + 1;
    } else {
      state.telegram_offset = Math.max(state.telegram_offset, e.update_id + 1);
    }
  },
  push_device_added: pushDeviceAdded,
  push_device_changed: pushDeviceChanged,
  push_device_removed: (state, env, e) => { delete state.push_devices[e.device_id]; },
  data_upgraded: dataUpgraded,
  upgrade_notice_dismissed: upgradeNoticeDismissed,
  goal_set: goalSet,
  goal_checked: goalChecked,
  goal_met: goalEnded,
  goal_given_up: goalEnded,
  session_attention_changed: attentionChanged,
  attention_scheduled: attentionScheduled,
  attention_nudged: attentionNudged,
  attention_acted: attentionActed,
  approval_reviewed: approvalReviewed,
  checkpoint_recorded: checkpointRecorded,
  conversation_rewound: conversationRewound,
  agent_commands_updated: agentCommands,
  hooks_found: hooksFound,
  hooks_trusted: hooksTrusted,
  hook_ran: hookRan,
  agent_mode_updated: agentMode,
  agent_config_updated: agentConfig,
};

/**
 * Fold one envelope `{seq, ts, session_id, event: {type, ...}}` into `state` (in place). The
 * event is complete (see the top of this file).
 */
export function apply(state, env) {
  const handler = HANDLERS[env.event.type];
  if (handler !== undefined) handler(state, env, env.event);
  state.seq = env.seq;
  return state;
}

/** Fold every envelope in order. */
export function applyAll(state, envelopes) {
  for (const env of envelopes) apply(state, env);
  return state;
}

/**
 * The page's single store: the state plus listeners.
 *
 * Listeners are called as `fn(change)` after the state changed, where `change` is
 * `{kind: "event", env}` for one folded envelope or `{kind: "reset"}` when the whole state was
 * replaced (snapshot, resync). Views use the envelope to update the DOM incrementally.
 */
export class Store {
  constructor() {
    this.state = emptyState();
    this._listeners = new Set();
    /** processes' live output, beside the state (not folded: see tails.js) */
    this.tails = new Tails();
  }

  get seq() {
    return this.state.seq;
  }

  /** Call `fn(change)` on every change; returns a function that unsubscribes. */
  subscribe(fn) {
    this._listeners.add(fn);
    return () => this._listeners.delete(fn);
  }

  /** Fold an envelope unless it is already folded (seq ≤ state.seq). Returns true if folded. */
  apply(env) {
    if (env.seq <= this.state.seq) return false;
    apply(this.state, env);
    this._emit({ kind: "event", env });
    return true;
  }

  /** Replace the state (a snapshot frame or the bootstrap endpoint). */
  replace(seq, state) {
    this.state = state;
    this.state.seq = seq;
    this._emit({ kind: "reset" });
  }

  /** Throw the state away (a resync frame). */
  reset() {
    this.state = emptyState();
    this._emit({ kind: "reset" });
  }

  _emit(change) {
    for (const fn of this._listeners) {
      try {
        fn(change);
      } catch (err) {
        console.error("store listener failed", err);
      }
    }
  }
}
