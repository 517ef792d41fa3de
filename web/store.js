// The browser's state: the same fold as `codey_server.reducers.apply`, in JavaScript.
//
// `apply(state, envelope)` mutates `state` in place and returns it, exactly like the Python
// fold; a parity test replays one log through both and compares the JSON. Every object created
// here has the same keys and defaults as its Python struct (codey_protocol.state), because the
// server's snapshots contain every field and the two must compare equal.
//
// Items inside events arrive complete (every field), so an appended item is stored as received
// and "has attribute X" in Python is `X in item` here.

/** Keep only the most recent changed paths (reducers.MAX_CHANGED_PATHS). */
export const MAX_CHANGED_PATHS = 200;

const UPDATE_FIELDS = [
  "status", "streaming", "queued", "exit_code", "truncated", "diff", "files", "error",
  "result", "action_id", "approval_id", "output",
];

/** A fresh `State()`. */
export function emptyState() {
  return { seq: 0, workers: {}, pair_requests: {}, sessions: {}, auth: {}, rate_limits: {} };
}

/** The item with `itemId`, searched from the end where updates nearly always land. */
export function findItem(session, itemId) {
  const items = session.items;
  for (let i = items.length - 1; i >= 0; i--) {
    if (items[i].id === itemId) return items[i];
  }
  return null;
}

const dflt = (value, fallback) => (value === undefined ? fallback : value);

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
  state.workers[e.worker_id] = {
    worker_id: e.worker_id, hostname: e.hostname, os: e.os,
    python_version: dflt(e.python_version, ""), worker_version: dflt(e.worker_version, ""),
    roots: [...e.roots], connected: false, revoked: false, paired_at: env.ts,
    last_seen: null, capabilities: { executors: [], mcp_servers: [] },
  };
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
  w.capabilities = dflt(e.capabilities, { executors: [], mcp_servers: [] });
  w.last_seen = env.ts;
}

function disconnected(state, env, e) {
  const w = state.workers[e.worker_id];
  if (w) {
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
  state.sessions[env.session_id] = {
    session_id: env.session_id, title: e.title, worker_id: e.worker_id, workdir: e.workdir,
    provider: e.provider, model: e.model, policy: dflt(e.policy, "suggest"), status: "idle",
    status_reason: "", created_at: env.ts, updated_at: env.ts, items: [], plan: [],
    plan_explanation: "", approvals: {}, approved_prefixes: [], pending_actions: {},
    changed_paths: [],
    usage: { input_tokens: 0, output_tokens: 0, reasoning_tokens: 0, total_tokens: 0, turns: 0 },
  };
}

function statusChanged(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.status = e.status;
    s.status_reason = dflt(e.reason, "");
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

function itemAppended(state, env, e) {
  const s = session(state, env);
  if (s) s.items.push(e.item);
}

function itemUpdated(state, env, e) {
  const s = session(state, env);
  if (!s) return;
  const item = findItem(s, e.item_id);
  if (!item) return;
  if (e.text_delta && "text" in item) item.text += e.text_delta;
  if (e.output_delta && item.kind === "tool_call") item.output += e.output_delta;
  for (const name of UPDATE_FIELDS) {
    const value = e[name];
    if (value !== null && value !== undefined && name in item) item[name] = value;
  }
}

function planUpdated(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.plan = [...e.steps];
    s.plan_explanation = dflt(e.explanation, "");
  }
}

function approvalRequested(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.approvals[e.approval_id] = {
      approval_id: e.approval_id, item_id: e.item_id, kind: e.kind, status: "pending",
      command: dflt(e.command, null), patch: dflt(e.patch, null), path: dflt(e.path, null),
      reason: dflt(e.reason, ""), message: "", requested_at: env.ts, decided_at: null,
    };
  }
}

function approvalResolved(state, env, e) {
  const s = session(state, env);
  if (!s) return;
  const a = s.approvals[e.approval_id];
  if (!a || a.status !== "pending") return; // the first decision wins
  a.status = e.decision;
  a.message = dflt(e.message, "");
  a.decided_at = env.ts;
  if (e.for_session && e.decision === "approved" && a.command && a.command.length) {
    if (!s.approved_prefixes.some((p) => sameList(p, a.command))) {
      s.approved_prefixes.push([...a.command]);
    }
  }
}

function actionRequested(state, env, e) {
  const s = session(state, env);
  if (s) {
    s.pending_actions[e.action_id] = {
      action_id: e.action_id, item_id: e.item_id, worker_id: e.worker_id, action: e.action,
    };
  }
}

function actionFinished(state, env, e) {
  const s = session(state, env);
  if (s) delete s.pending_actions[e.action_id];
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
    u.input_tokens += e.input_tokens || 0;
    u.output_tokens += e.output_tokens || 0;
    u.reasoning_tokens += e.reasoning_tokens || 0;
    u.total_tokens += e.total_tokens || 0;
    u.turns += 1;
  }
}

function rateLimit(state, env, e) {
  state.rate_limits[e.provider] = {
    limit_requests: dflt(e.limit_requests, null),
    remaining_requests: dflt(e.remaining_requests, null),
    reset_requests: dflt(e.reset_requests, null),
    limit_tokens: dflt(e.limit_tokens, null),
    remaining_tokens: dflt(e.remaining_tokens, null),
    reset_tokens: dflt(e.reset_tokens, null),
    updated_at: env.ts,
  };
}

function authUpdated(state, env, e) {
  state.auth[e.provider] = {
    provider: e.provider, state: e.state, method: dflt(e.method, "none"),
    account: dflt(e.account, null), expires_at: dflt(e.expires_at, null),
    error: dflt(e.error, null), verification_uri: dflt(e.verification_uri, null),
    user_code: dflt(e.user_code, null),
  };
}

const HANDLERS = {
  worker_pair_requested: pairRequested,
  worker_pair_resolved: pairResolved,
  worker_paired: paired,
  worker_revoked: revoked,
  worker_connected: connected,
  worker_disconnected: disconnected,
  session_created: sessionCreated,
  session_status_changed: statusChanged,
  session_title_changed: titleChanged,
  session_policy_changed: policyChanged,
  session_item_appended: itemAppended,
  session_item_updated: itemUpdated,
  plan_updated: planUpdated,
  approval_requested: approvalRequested,
  approval_resolved: approvalResolved,
  action_requested: actionRequested,
  action_finished: actionFinished,
  session_workspace_changed: workspaceChanged,
  token_usage_recorded: usageRecorded,
  rate_limit_updated: rateLimit,
  auth_status_updated: authUpdated,
};

/** Fold one envelope `{seq, ts, session_id, event: {type, ...}}` into `state` (in place). */
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
