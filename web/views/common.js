// Helpers shared by the views.

import { fmtTime, h } from "../dom.js";
import { DEFAULT_DISPLAY, MCP_DISPLAY, MCP_PREFIX, TOOL_DISPLAY } from "../tool_display.js";

/**
 * Batch DOM work to one animation frame: `schedule()` many times, `fn` runs once.
 * `flushNow()` runs it synchronously (tests, or before reading the DOM).
 */
export class FrameBatch {
  constructor(fn) {
    this._fn = fn;
    this._handle = null;
    this._isTimeout = false; // which kind `_handle` is
  }

  schedule() {
    if (this._handle !== null) return;
    // rAF does not run in hidden tabs; a timeout keeps the DOM fresh for when they come back.
    const run = () => this.flushNow();
    this._isTimeout = document.hidden;
    this._handle = document.hidden ? setTimeout(run, 100) : requestAnimationFrame(run);
  }

  flushNow() {
    this.cancel();
    this._fn();
  }

  cancel() {
    // each handle is cancelled by its own kind only: frame and timer ids are separate
    // counters, and a frame's id given to clearTimeout cancels whatever timer has that
    // number (a view's one-second ticker, say)
    if (this._handle !== null) {
      if (this._isTimeout) clearTimeout(this._handle);
      else cancelAnimationFrame(this._handle);
    }
    this._handle = null;
  }
}

/**
 * Reconcile `container`'s children with `values` by key: a child whose signature is unchanged
 * is kept as is (so focus and open <details> survive), others are re-rendered.
 */
export function keyedList(container, values, key, signature, render) {
  const old = new Map();
  for (const child of container.children) {
    if (child.dataset.key !== undefined) old.set(child.dataset.key, child);
  }
  let index = 0;
  for (const value of values) {
    const k = key(value);
    const sig = signature(value);
    let node = old.get(k);
    if (!node || node.dataset.sig !== sig) {
      const fresh = render(value);
      fresh.dataset.key = k;
      fresh.dataset.sig = sig;
      if (node) node.replaceWith(fresh);
      node = fresh;
    }
    old.delete(k);
    const at = container.children[index];
    if (at !== node) container.insertBefore(node, at || null);
    index += 1;
  }
  for (const node of old.values()) node.remove();
}

/** A session's status in plain words (the raw value stays in `data-status`). */
export const SESSION_WORDS = {
  idle: "finished", running: "working", waiting_approval: "needs approval",
  waiting_user: "waiting for you", waiting_worker: "waiting for machine", interrupted: "stopped",
  error: "failed", closed: "closed",
};

/** A tool call's status in plain words. */
export const TOOL_WORDS = {
  pending: "queued", waiting_approval: "needs approval", waiting_user: "waiting for you",
  running: "running", done: "done", failed: "failed", rejected: "rejected",
  cancelled: "cancelled",
};

/**
 * What a session's status means for the user: `idle` with nothing done yet is "new", and a
 * fork that has not worked yet is "forked" (whatever its source's outcome was).
 */
export function sessionWords(s) {
  if (s.status === "idle" && !s.items.some((i) => i.kind !== "user_message")) return "new";
  if (s.status === "idle" && s.forked_from && !s.busy_seconds && s.busy_since == null) {
    return "forked";
  }
  if (s.status === "waiting_user" && s.budget_stop) return "budget reached";
  if (s.status === "running" && (s.status_reason || "").startsWith(QUEUED)) return "queued";
  return SESSION_WORDS[s.status] || s.status;
}

/** The status reason of a session waiting in its provider's rate-limit window. */
export const QUEUED = "queued for rate limit";

/** Money in millionths of a dollar, as "$0.0123", "$1.24", "$120". */
export function fmtUsd(micros) {
  const usd = (micros || 0) / 1e6;
  if (usd === 0) return "$0";
  if (usd < 0.01) return `$${usd.toFixed(4)}`;
  if (usd < 100) return `$${usd.toFixed(2)}`;
  return `$${Math.round(usd)}`;
}

/** Tokens as "950", "12.3k", "4.5M". */
export function fmtTokens(n) {
  if (n < 1000) return String(n);
  if (n < 1e6) return `${(n / 1000).toFixed(n < 10000 ? 1 : 0)}k`;
  return `${(n / 1e6).toFixed(1)}M`;
}

/** A budget amount in its unit: "10.0k tokens", "$2.00". */
export function fmtBudget(unit, amount) {
  return unit === "usd" ? fmtUsd(amount) : `${fmtTokens(amount)} tokens`;
}

/** What "Raise by …" adds to a budget stopped at `stop`: half the limit, at least a step. */
export function raiseStep(stop) {
  const min = stop.unit === "usd" ? 100_000 : 1000;
  return Math.max(min, Math.round(stop.limit / 2));
}

/**
 * The box of a session stopped at a budget: what stopped it, and the one-click "Raise by …"
 * that lets it go on. Null when it is not stopped.
 */
export function budgetBox(s, socket, toast) {
  const stop = s.budget_stop;
  if (!stop || s.status !== "waiting_user") return null;
  const by = raiseStep(stop);
  const button = h("button", { class: "btn primary", type: "button",
    "data-testid": "budget-raise" }, `Raise by ${fmtBudget(stop.unit, by)}`);
  button.addEventListener("click", async (e) => {
    e.preventDefault();
    e.stopPropagation();
    button.disabled = true;
    try {
      await socket.raiseBudget(s.session_id, by);
    } catch (err) {
      button.disabled = false;
      if (toast) toast(`Could not raise the budget: ${err.message}`, "error");
    }
  });
  const whose = stop.scope === "day" ? "today's budget for every session" : "its budget";
  return h("div", { class: "budget-stop", "data-testid": "budget-stop", role: "status" },
    h("strong", {}, "Budget reached"),
    ` — spent ${fmtBudget(stop.unit, stop.spent)} of ${whose} (${fmtBudget(stop.unit,
      stop.limit)}). `, button);
}

/** How many of a session's processes (the agent's `exec`: a dev server, a watcher) may
 * still run: running, or asked to stop and not ended yet. A finished session can have some. */
export function liveProcesses(s) {
  return (s.processes || []).filter((p) => p.status === "running" || p.status === "stopping")
    .length;
}

/** "1 process running", "2 processes running"; "" for none. */
export function processesWords(n) {
  return n ? `${n} process${n === 1 ? "" : "es"} running` : "";
}

/** Seconds the session's own turns took so far (the one under way counted to now). */
export function busySeconds(s, now = Date.now() / 1000) {
  const since = s.busy_since == null ? 0 : Math.max(0, now - s.busy_since);
  return (s.busy_seconds || 0) + since;
}

const FORK_SUFFIX = /(\s\(fork\))+$/;

/**
 * `el` (a link, a heading) holding `title`, its " (fork)" ending in a part of its own that is
 * never cut off: the rest may be shortened to fit, the ending stays in view.
 */
export function titleNode(title, el) {
  const text = title || "Untitled";
  const m = FORK_SUFFIX.exec(text);
  el.classList.add("title-parts");
  el.append(h("span", { class: "title-main" }, m ? text.slice(0, m.index) : text));
  if (m) {
    el.append(h("span", { class: "title-fork", "data-testid": "title-fork" }, m[0]));
  }
  return el;
}

/** The last part of a path ("/home/me/app/" → "app"). */
export function baseName(path) {
  const parts = String(path || "").replace(/\/+$/, "").split("/");
  return parts[parts.length - 1] || path || "";
}

/**
 * What tells session `s` apart from the others of the same title (null: none has it): its
 * folder's name (a worktree's branch) when theirs differ, its machine when that is what
 * differs, else the end of its id and when it started.
 */
export function twinWords(s, state) {
  const twins = Object.values(state.sessions).filter((o) => o.session_id !== s.session_id &&
    (o.title || "") === (s.title || ""));
  if (!twins.length) return null;
  const where = (x) => (x.worktree && x.worktree.branch ? `⎇ ${x.worktree.branch}`
    : baseName(x.workdir));
  if (twins.every((o) => where(o) !== where(s))) return where(s);
  const machine = (x) => {
    const w = state.workers[x.worker_id];
    return w ? machineLabel(state, w) : x.worker_id;
  };
  if (twins.every((o) => machine(o) !== machine(s))) return `${where(s)} on ${machine(s)}`;
  return `${where(s)} · #${s.session_id.slice(-4)} · ${fmtTime(s.created_at)}`;
}

/**
 * A status chip. `testid` names it for tests; the raw status is in `data-status`; the text is
 * the plain words (`words`, or the session vocabulary).
 */
export function statusChip(status, testid, words = null) {
  return h("span", { class: `chip status-${status}`, "data-testid": testid,
    "data-status": status }, words || SESSION_WORDS[status] || status);
}

/** A session's goal in a few words: how far its checks went. */
export function goalWords(g) {
  if (g.status === "met") return `met after ${g.attempts} check${g.attempts === 1 ? "" : "s"}`;
  if (g.status === "given_up") return `given up after ${g.attempts} of ${g.max_turns}`;
  if (!g.attempts) return `working · not checked yet (at most ${g.max_turns})`;
  return `working · check ${g.attempts} of ${g.max_turns} ${g.last_met ? "passed" : "failed"}`;
}

/** "4 s", "2 min 5 s", "1 h 3 min" for a number of seconds. */
export function fmtDuration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ""}`;
  return `${Math.floor(s / 3600)} h${Math.floor((s % 3600) / 60) ? ` ${Math.floor((s % 3600) / 60)} min` : ""}`;
}

/**
 * What the agent is doing right now, in a few words, and since when (epoch seconds):
 * "thinking", "running `pytest -q`", "waiting for your approval", "retrying in 8 s (HTTP 429)".
 * Null when no turn runs.
 */
export function activity(s, state) {
  if (!isBusy(s.status) && s.status !== "waiting_worker") return null;
  const last = s.items[s.items.length - 1];
  if (s.status === "waiting_approval") return { text: "waiting for your approval", since: s.updated_at };
  if (s.status === "waiting_user" && s.budget_stop) return { text: "budget reached", since: s.updated_at };
  if (s.status === "waiting_user") {
    return { text: s.plan_status === "proposed" ? "waiting for you to approve the plan"
      : "waiting for your answer", since: s.updated_at };
  }
  if (s.status === "waiting_worker" || (last && last.kind === "tool_call" &&
      last.status === "running" && !workerUp(state, s.worker_id))) {
    return { text: "waiting for the machine to come back", since: s.updated_at };
  }
  const reason = s.status_reason || "";
  if (reason.startsWith("model busy") || reason.startsWith("the answer was cut")) {
    return { text: reason.replace(/^model busy \((.*)\); retrying in (.*)$/, "retrying in $2 ($1)"),
      since: s.updated_at };
  }
  if (reason.startsWith(QUEUED)) return { text: reason, since: s.updated_at };
  if (reason.startsWith("compacting")) return { text: "compacting the conversation", since: s.updated_at };
  const running = [...s.items].reverse().find((i) => i.kind === "tool_call" && i.status === "running");
  if (running) {
    const what = running.command ? `running \`${running.command.join(" ").slice(0, 60)}\``
      : toolDisplay(running).busy || running.name.replace(/_/g, " ");
    return { text: what, since: running.ts };
  }
  if (last && (last.kind === "assistant_message" || last.kind === "reasoning") && last.streaming) {
    return { text: last.kind === "reasoning" ? "thinking" : "writing", since: last.ts };
  }
  return { text: "thinking", since: s.updated_at };
}

/**
 * How a tool call shows: its tool's display (web/tool_display.js, generated from the server's
 * tools), an MCP tool's, or, for a tool the server does not know (an ACP agent's), the default.
 */
export function toolDisplay(item) {
  if (item.mcp_server || item.name.startsWith(MCP_PREFIX)) return MCP_DISPLAY;
  return Object.hasOwn(TOOL_DISPLAY, item.name) ? TOOL_DISPLAY[item.name] : DEFAULT_DISPLAY;
}

/** Statuses that need the user. */
export function needsAttention(status) {
  return status === "waiting_approval" || status === "waiting_user";
}

/** Statuses in which a turn is under way and can be interrupted. */
export function isBusy(status) {
  return status === "running" || status === "waiting_approval" || status === "waiting_worker" ||
    status === "waiting_user";
}

/** Whether a session's worker is connected (and not revoked). */
export function workerUp(state, workerId) {
  const w = state.workers[workerId];
  return Boolean(w && w.connected && !w.revoked);
}

// --- machines as the user knows them --------------------------------------------------------

/** A machine's name: the one the user gave it, else its hostname. */
export function machineName(w) {
  return (w && (w.name || w.hostname)) || "";
}

/**
 * A machine's label wherever one is chosen or shown: its name, and when another machine (not
 * revoked) has the same name, the start of its key's fingerprint — the one compared when it
 * was paired — so that two "vm"s can be told apart.
 */
export function machineLabel(state, w) {
  const name = machineName(w);
  const twin = Object.values(state.workers).some((o) => o.worker_id !== w.worker_id &&
    !o.revoked && machineName(o) === name);
  if (!twin) return name;
  // paired before fingerprints were kept: its id is unique too, if less familiar
  const key = w.fingerprint ? w.fingerprint.replace(/^SHA256:/, "").slice(0, 9)
    : w.worker_id.replace(/^wrk_/, "").slice(0, 6);
  return `${name} · key ${key}`;
}

// The dialogs that start work on a machine (New session, the Board's Run, Schedules) open on
// the machine last used, in the folder last used on it: the newer of what this browser
// remembers and the newest session on that machine in the state (started from anywhere:
// another browser, a phone, the API, a schedule). The browser's memory may be off (private
// windows), which only loses what it adds.
const LAST_MACHINE = "codey.lastMachine";
const LAST_FOLDER = "codey.lastFolder.";

function stored(key) {
  try {
    return localStorage.getItem(key);
  } catch {
    return null;
  }
}

/** Remember that work was started on `workerId` in `folder`. */
export function rememberMachine(workerId, folder) {
  try {
    localStorage.setItem(LAST_MACHINE, workerId);
    if (folder) {
      localStorage.setItem(LAST_FOLDER + workerId,
        JSON.stringify({ folder, at: Date.now() / 1000 }));
    }
  } catch {
    // no storage: nothing remembered
  }
}

/** This browser's memory of the folder last used on a machine: {folder, at} or null (an
 * older page kept the bare folder: when is unknown). */
function rememberedFolder(workerId) {
  const raw = stored(LAST_FOLDER + workerId);
  if (!raw) return null;
  try {
    const kept = JSON.parse(raw);
    if (kept && typeof kept.folder === "string") return { folder: kept.folder, at: kept.at || 0 };
  } catch {
    // the bare folder
  }
  return { folder: raw, at: 0 };
}

/** The newest session started on `workerId` (not a sub-agent's), as {folder, at}, or null:
 * the folder the user picked, a worktree's repository rather than the worktree. */
function newestSession(state, workerId) {
  let best = null;
  for (const s of Object.values((state && state.sessions) || {})) {
    if (s.worker_id !== workerId || s.parent_id) continue;
    const folder = s.worktree ? s.worktree.repo : s.workdir;
    if (folder && (!best || s.created_at > best.at)) best = { folder, at: s.created_at };
  }
  return best;
}

/** The machine last used, if it is among `workers` (else null). */
export function lastMachine(workers, state = null) {
  const id = stored(LAST_MACHINE);
  if (workers.some((w) => w.worker_id === id)) return id;
  let best = null;
  for (const w of workers) {
    const newest = newestSession(state, w.worker_id);
    if (newest && (!best || newest.at > best.at)) best = { id: w.worker_id, at: newest.at };
  }
  return best ? best.id : null;
}

/** The folder last used on `w` (see above), else its first root, else "". */
export function lastFolder(w, state = null) {
  if (!w) return "";
  const mine = rememberedFolder(w.worker_id);
  const newest = newestSession(state, w.worker_id);
  const last = !mine ? newest : !newest ? mine : newest.at > mine.at ? newest : mine;
  return last ? last.folder : (w.roots || [])[0] || "";
}

// the attention ladder ---------------------------------------------------------------------

const LADDER_THEN = {
  reject: "rejected", park: "session parked", reviewer: "to the reviewer",
  answer: "answered for you",
};

/**
 * The next step of the attention ladder of the session's wait for the user, or null (no
 * wait, or nothing more will happen): `{at, words, then}` — at `at` (epoch seconds) the wait
 * is `words` ("reminder to your devices", "rejected", …).
 */
export function ladderStep(s) {
  const a = s.attention;
  if (!a || a.acted) return null;
  const waiting = a.target === "question" ? s.questions[a.target_id] : s.approvals[a.target_id];
  if (!waiting || waiting.status !== "pending" || s.parked_on) return null;
  if (a.act_at != null) return { at: a.act_at, words: LADDER_THEN[a.then] || a.then, then: a.then };
  if (a.nudge_at != null && !a.nudged) {
    return { at: a.nudge_at, words: "reminder to your devices", then: "nudge" };
  }
  return null;
}

/** "1:05", "12:00", "1:02:03" for a number of seconds (0 and less: "0:00"). */
export function fmtClock(seconds) {
  const t = Math.max(0, Math.ceil(seconds));
  const two = (n) => String(n).padStart(2, "0");
  const hms = t >= 3600 ? `${Math.floor(t / 3600)}:${two(Math.floor((t % 3600) / 60))}`
    : `${Math.floor(t / 60)}`;
  return `${hms}:${two(t % 60)}`;
}

function countdownText(at, words) {
  const left = at - Date.now() / 1000;
  return left > 0 ? `if nobody answers: ${words} in ${fmtClock(left)}` : `nobody answered: ${words}`;
}

/** The ladder's countdown chip for a session (null when there is none); it ticks by itself. */
export function countdownNode(s) {
  const next = ladderStep(s);
  if (!next) return null;
  startCountdowns();
  return h("span", { class: `chip countdown then-${next.then}`, "data-testid": "attention-countdown",
    "data-at": String(next.at), "data-words": next.words, role: "timer",
    title: "When nobody answers (the attention ladder): what happens, and when" },
  countdownText(next.at, next.words));
}

let countdownTicker = null;
function startCountdowns() {
  if (countdownTicker !== null) return;
  // one ticker for every countdown on the page: no re-render, only their texts
  countdownTicker = setInterval(() => {
    for (const el of document.querySelectorAll("[data-testid=attention-countdown]")) {
      el.textContent = countdownText(Number(el.dataset.at), el.dataset.words);
    }
  }, 1000);
}

/** What the reviewer model said about an approval, as one line (null: it did not judge it). */
export function reviewWords(approval) {
  const r = approval.review;
  if (!r) return null;
  if (r.decision === "error") return `the reviewer failed, so you decide: ${r.reason}`;
  if (r.approved) return `approved by the reviewer: ${r.reason}`;
  return `the reviewer ${r.decision === "deny" ? "denied it" : "did not approve it"} ` +
    `(risk ${r.risk}): ${r.reason}`;
}
