// The dashboard (`#/`): workers (with pairing) and sessions.
//
// Cards are keyed and re-rendered only when what they show changed, so a streaming session
// does not steal focus from a button elsewhere on the page.

import { api } from "../api.js";
import { fmtAgo, h } from "../dom.js";
import { renderInline } from "../markdown.js";
import { utcDay } from "../store.js";
import {
  FrameBatch, QUEUED, SESSION_WORDS, budgetBox, busySeconds, countdownNode, fmtDuration,
  fmtTokens, fmtUsd, goalWords, keyedList, ladderStep, liveProcesses, machineLabel, machineName,
  needsAttention, processesWords, sessionWords, statusChip, titleNode, twinWords, workerUp,
} from "./common.js";
import { NewSessionDialog } from "./newsession.js";
import { PairPanel } from "./pair.js";

// Events that change what the dashboard shows (item events only touch `updated_at`).
const RELEVANT = new Set([
  "worker_pair_requested", "worker_pair_resolved", "worker_paired", "worker_revoked",
  "worker_renamed",
  "worker_connected", "worker_disconnected", "session_created", "session_status_changed",
  "session_title_changed", "session_policy_changed", "session_archived", "session_deleted",
  "session_forked", "session_moved",
  // a card says how many processes the session still runs
  "process_started", "process_ended",
  // and how its goal's checks went
  "goal_set", "goal_checked", "goal_met", "goal_given_up",
  // cost on each card and today's spend; a session stopped at a budget
  "token_usage_recorded", "budget_set", "budget_reached",
]);

/** When a session queued for a rate limit expects the reset (epoch seconds; null: unknown),
 * from its reason "queued for rate limit (resets in N s)" said at its last change. */
function queuedUntil(s) {
  const m = /resets in (\d+) s/.exec(s.status_reason || "");
  return m ? s.updated_at + Number(m[1]) : null;
}

/** The worker card lists this many of its sessions, the newest first. */
const WORKER_SESSIONS = 5;

const SORTS = { attention: "Needs you first", activity: "Last activity", created: "Newest" };

/** The words a session is found by: title, folder, machine, prompts. */
function haystack(s, state) {
  const w = state.workers[s.worker_id];
  const prompts = s.items.filter((i) => i.kind === "user_message").map((i) => i.text);
  return [s.title, s.workdir, w ? `${machineName(w)}\n${w.hostname}` : "", s.status,
    ...prompts].join("\n")
    .toLowerCase();
}

export class Dashboard {
  /** `link`: open with the "Link a machine" panel open (`#/link`). */
  constructor(ctx, { link = false } = {}) {
    this._logViews = new Map(); // worker id → its "Recent log" box
    this._renaming = null; // the machine whose name is being edited, and what is typed
    this._draft = "";
    this.ctx = ctx;
    this._batch = new FrameBatch(() => this.render());
    this._pairPanel = null;
    this._linkButton = h("button", { class: "btn", type: "button", "data-testid": "link-machine",
      "aria-expanded": "false", onclick: () => this._togglePair() }, "Link a machine");
    this._pairSlot = h("div", {});
    this._workers = h("div", { class: "cards", "data-testid": "workers" });
    this._sessions = h("div", { class: "cards", "data-testid": "sessions" });
    this._noWorkers = h("p", { class: "muted empty" },
      "No machine linked yet. Use “Link a machine” to add one.");
    this._noSessions = h("p", { class: "muted empty" }, "No sessions yet.");
    this._filter = { text: "", status: "", worker: "", archived: false, sort: "attention" };
    const search = h("input", { class: "input", type: "search", "data-testid": "session-search",
      placeholder: "Search sessions", "aria-label": "Search sessions" });
    search.addEventListener("input", () => { this._filter.text = search.value; this.render(); });
    this._statusFilter = h("select", { class: "input compact", "data-testid": "status-filter",
      "aria-label": "Status", onchange: (ev) => {
        this._filter.status = ev.target.value;
        this.render();
      } });
    this._workerFilter = h("select", { class: "input compact", "data-testid": "worker-filter",
      "aria-label": "Machine", onchange: (ev) => {
        this._filter.worker = ev.target.value;
        this.render();
      } });
    const sort = h("select", { class: "input compact", "data-testid": "session-sort",
      "aria-label": "Sort", onchange: (ev) => { this._filter.sort = ev.target.value; this.render(); } },
    Object.entries(SORTS).map(([k, v]) => h("option", { value: k }, v)));
    const archived = h("input", { type: "checkbox", id: "show-archived",
      "data-testid": "show-archived", onchange: (ev) => {
        this._filter.archived = ev.target.checked;
        this.render();
      } });
    this._counts = h("div", { class: "counts muted small", "data-testid": "session-counts" });
    this._spend = h("a", { class: "chip spend-chip", href: "#/usage", "data-testid": "dashboard-spend",
      title: "Today's cost of every session (UTC day): the usage page" });
    this._toolbar = h("div", { class: "toolbar", "data-testid": "session-toolbar" },
      search, this._statusFilter, this._workerFilter, sort,
      h("label", { for: "show-archived", class: "small" }, archived, " Archived"));
    this.el = h("div", { class: "dashboard", "data-testid": "dashboard" },
      h("section", { class: "panel", "aria-labelledby": "workers-h" },
        h("div", { class: "panel-head" }, h("h2", { id: "workers-h" }, "Machines"),
          this._linkButton),
        this._pairSlot, this._noWorkers, this._workers),
      h("section", { class: "panel sessions-panel", "aria-labelledby": "sessions-h" },
        h("div", { class: "panel-head" }, h("h2", { id: "sessions-h" }, "Sessions"),
          this._spend,
          h("button", { class: "btn primary", type: "button", "data-testid": "new-session",
            onclick: () => new NewSessionDialog(this.ctx).open() }, "New session")),
        this._toolbar, this._counts, this._noSessions, this._sessions));
    this.render();
    this._ticker = setInterval(() => this._batch.schedule(), 30000); // "last seen" texts
    this._countdown = setInterval(() => this._tickQueued(), 1000); // "resets in 42 s"
    if (link) this._togglePair();
  }

  onChange(change) {
    if (change.kind === "reset" || RELEVANT.has(change.env.event.type)) this._batch.schedule();
  }

  destroy() {
    this._batch.cancel();
    clearInterval(this._ticker);
    clearInterval(this._countdown);
    for (const view of this._logViews.values()) clearInterval(view.timer);
  }

  // The worker's last terminal lines, fetched while the box is open (they are not in the
  // event log). One element per worker, kept across re-renders of its card, so an open box
  // stays open.
  _logView(w) {
    let view = this._logViews.get(w.worker_id);
    if (view) return view.el;
    const pre = h("pre", { class: "worker-log mono small", "data-testid": "worker-log-lines" },
      "Loading…");
    const el = h("details", { class: "worker-log-box", "data-testid": "worker-log" },
      h("summary", {}, "Recent log"), pre);
    view = { el, timer: null };
    const load = async () => {
      try {
        const lines = await api.workerLog(w.worker_id);
        pre.textContent = lines.length
          ? lines.map((l) => `${new Date(l.ts * 1000).toLocaleTimeString()}  ` +
            `${l.level === "info" ? "" : l.level.toUpperCase() + " "}${l.message}`).join("\n")
          : "Nothing printed since the server started.";
        pre.scrollTop = pre.scrollHeight;
      } catch (err) {
        pre.textContent = `Could not load the log: ${err.message}`;
      }
    };
    el.addEventListener("toggle", () => {
      clearInterval(view.timer);
      view.timer = null;
      if (el.open) {
        load();
        view.timer = setInterval(load, 3000);
      }
    });
    this._logViews.set(w.worker_id, view);
    return el;
  }

  _togglePair() {
    if (this._pairPanel) {
      this._pairPanel.el.remove();
      this._pairPanel = null;
      this._linkButton.setAttribute("aria-expanded", "false");
      // closed: a reload shows the plain dashboard (no hashchange, so no new view)
      if (location.hash === "#/link") history.replaceState(null, "", "#/");
      return;
    }
    this._pairPanel = new PairPanel(this.ctx);
    this._pairSlot.append(this._pairPanel.el);
    this._linkButton.setAttribute("aria-expanded", "true");
  }

  /** The cards' "queued for rate limit (resets in N s)", counted down each second from
   * the time the session said it (its status change). */
  _tickQueued() {
    for (const el of this.el.querySelectorAll("[data-testid=session-queued][data-until]")) {
      const left = Math.max(0, Math.ceil(Number(el.dataset.until) - Date.now() / 1000));
      el.textContent = `${QUEUED} (resets in ${left} s)`;
    }
  }

  render() {
    const state = this.ctx.store.state;
    const today = Object.values(state.spend[utcDay(Date.now() / 1000)] || {});
    const micros = today.reduce((a, c) => a + c.cost_micros, 0);
    const tokens = today.reduce((a, c) => a + c.tokens, 0);
    this._spend.textContent = `today ${fmtUsd(micros)} · ${fmtTokens(tokens)} tokens`;
    const all = Object.values(state.sessions);
    const f = this._filter;
    const text = f.text.trim().toLowerCase();
    // sub-agents are listed under their parent (unless a filter looks for them)
    const nested = !text && !f.status;
    const shown = all.filter((s) => s.archived === f.archived &&
      (!nested || !s.parent_id || !state.sessions[s.parent_id]) &&
      (!f.status || s.status === f.status) && (!f.worker || s.worker_id === f.worker) &&
      (!text || haystack(s, state).includes(text)));
    // By default: sessions that need the user first, then newest (cards do not jump).
    const order = {
      attention: (a, b) => (needsAttention(b.status) - needsAttention(a.status)) ||
        (b.created_at - a.created_at),
      activity: (a, b) => b.updated_at - a.updated_at,
      created: (a, b) => b.created_at - a.created_at,
    }[f.sort];
    const sessions = shown.sort(order);
    this._renderFilters(all, state);
    const byWorker = new Map();
    for (const s of all.filter((x) => !x.archived)) {
      if (!byWorker.has(s.worker_id)) byWorker.set(s.worker_id, []);
      byWorker.get(s.worker_id).push(s);
    }
    const workers = Object.values(state.workers).sort((a, b) =>
      (a.revoked - b.revoked) || (b.connected - a.connected) ||
      machineName(a).localeCompare(machineName(b)));
    this._noWorkers.hidden = workers.length > 0;
    keyedList(this._workers, workers, (w) => w.worker_id,
      (w) => JSON.stringify([w, machineLabel(state, w), this._renaming === w.worker_id,
        fmtAgo(w.last_seen),
        (byWorker.get(w.worker_id) || []).map((s) => [s.session_id, s.title, sessionWords(s),
          twinWords(s, state)])]),
      (w) => this._workerCard(w, byWorker.get(w.worker_id) || []));
    this._noSessions.hidden = sessions.length > 0;
    this._noSessions.textContent = all.length ? "No session matches." : "No sessions yet.";
    keyedList(this._sessions, sessions, (s) => s.session_id,
      (s) => {
        const w = state.workers[s.worker_id];
        const kids = Object.values(state.sessions).filter((x) => x.parent_id === s.session_id);
        return JSON.stringify([s.title, s.status, s.status_reason, s.policy, s.provider, s.model,
          workerUp(state, s.worker_id), w ? machineLabel(state, w) : null, fmtAgo(s.updated_at),
          s.items.length, Math.round(busySeconds(s)), sessionWords(s), liveProcesses(s),
          twinWords(s, state),
          kids.map((k) => [k.session_id, k.title, k.status]),
          s.usage.cost_micros, s.usage.turns, s.budget_stop, ladderStep(s)]);
      },
      (s) => this._sessionCard(s));
    if (this._pairPanel) this._pairPanel.refresh();
  }

  _renderFilters(all, state) {
    const counts = {};
    for (const s of all) if (!s.archived) counts[s.status] = (counts[s.status] || 0) + 1;
    const archived = all.filter((s) => s.archived).length;
    const subAgents = all.filter((s) => s.parent_id && !s.archived).length;
    const parts = Object.entries(counts).sort((a, b) => b[1] - a[1])
      .map(([status, n]) => `${n} ${SESSION_WORDS[status] || status}`);
    if (subAgents) parts.push(`${subAgents} sub-agent${subAgents === 1 ? "" : "s"}`);
    if (archived) parts.push(`${archived} archived`);
    this._counts.textContent = parts.join(" · ");
    const statuses = ["", ...Object.keys(counts).sort()];
    const sig = JSON.stringify(statuses);
    if (this._statusFilter.dataset.sig !== sig) {
      this._statusFilter.dataset.sig = sig;
      this._statusFilter.replaceChildren(...statuses.map((st) => h("option", { value: st },
        st ? SESSION_WORDS[st] || st : "Any status")));
      this._statusFilter.value = this._filter.status;
    }
    const workers = Object.values(state.workers).filter((w) => !w.revoked);
    const labels = workers.map((w) => [w.worker_id, machineLabel(state, w)]);
    const wsig = JSON.stringify(labels);
    if (this._workerFilter.dataset.sig !== wsig) {
      this._workerFilter.dataset.sig = wsig;
      this._workerFilter.replaceChildren(h("option", { value: "" }, "Any machine"),
        ...labels.map(([id, label]) => h("option", { value: id }, label)));
      this._workerFilter.value = this._filter.worker;
    }
  }

  _workerCard(w, sessions) {
    const status = w.connected ? "connected" : "disconnected";
    const revoke = w.revoked ? null : this._revokeControl(w);
    return h("article", { class: `card worker-card ${status}${w.revoked ? " revoked" : ""}`,
      "data-testid": "worker-card", "data-worker-id": w.worker_id },
    h("div", { class: "card-head" },
      h("span", { class: `dot ${status}`, "aria-hidden": "true" }),
      this._renaming === w.worker_id ? this._renameForm(w)
        : h("h3", { class: "card-title", "data-testid": "worker-name" },
          machineLabel(this.ctx.store.state, w)),
      w.revoked || this._renaming === w.worker_id ? null : h("button", {
        class: "btn subtle small", type: "button", "data-testid": "worker-rename",
        "aria-label": `Rename ${machineName(w)}`, title: "Rename this machine",
        onclick: () => {
          this._renaming = w.worker_id;
          this._draft = machineName(w);
          this.render();
        } }, "Rename"),
      h("span", { class: `chip ${status}`, "data-testid": "worker-status" }, status),
      w.revoked ? h("span", { class: "chip revoked" }, "revoked") : null),
    h("dl", { class: "facts" },
      w.name ? [h("dt", {}, "Host"), h("dd", { "data-testid": "worker-hostname" }, w.hostname)]
        : null,
      h("dt", {}, "System"), h("dd", {}, w.os),
      h("dt", {}, "Version"), h("dd", {}, w.worker_version || "—"),
      h("dt", {}, "Last seen"), h("dd", { "data-testid": "worker-last-seen" },
        w.connected ? "now" : fmtAgo(w.last_seen)),
      h("dt", {}, "Roots"), h("dd", { class: "mono" }, (w.roots || []).join(", ") || "—"),
      h("dt", {}, "Sandbox"), sandboxFact(w),
      h("dt", {}, "Key"), h("dd", { class: "mono small", "data-testid": "worker-fingerprint" },
        w.fingerprint || "—")),
    w.revoked ? null : this._logView(w),
    sessions.length ? this._workerSessions(w, sessions) : null,
    revoke ? h("div", { class: "card-foot" }, revoke) : null);
  }

  /** The machine's newest sessions (and how many more there are). */
  _workerSessions(w, sessions) {
    const newest = [...sessions].sort((a, b) => b.created_at - a.created_at);
    const more = newest.length - WORKER_SESSIONS;
    return h("div", { class: "worker-sessions" },
      h("ul", { class: "mini-list", "aria-label": `Sessions on ${machineName(w)}`,
        "data-testid": "worker-sessions" },
      newest.slice(0, WORKER_SESSIONS).map((s) => {
        const twin = twinWords(s, this.ctx.store.state);
        return h("li", { "data-session-id": s.session_id },
          h("a", { href: `#/session/${encodeURIComponent(s.session_id)}` }, s.title || "Untitled"),
          twin ? h("span", { class: "muted small mono" }, ` (${twin})`) : null,
          " ", h("span", { class: `muted small status-text-${s.status}` }, sessionWords(s)));
      })),
      more > 0 ? h("p", { class: "muted small", "data-testid": "worker-sessions-more" },
        `and ${more} older`) : null);
  }

  // Renaming edits the card's title in place: Enter or Save keeps it, Escape or Cancel not;
  // an empty name gives the machine back its hostname. The draft lives on the page, so a
  // re-render of the card (a heartbeat, a session) keeps what was typed.
  _renameForm(w) {
    const input = h("input", { class: "input compact", "data-testid": "worker-name-input",
      value: this._draft, maxlength: 80, placeholder: w.hostname,
      "aria-label": `New name for ${machineName(w)}`,
      oninput: () => { this._draft = input.value; } });
    const done = () => {
      this._renaming = null;
      this.render();
    };
    const form = h("form", { class: "row gap rename-form", onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        await this.ctx.socket.renameWorker(w.worker_id, input.value);
        done();
      } catch (err) {
        this.ctx.toast(`Could not rename ${machineName(w)}: ${err.message}`, "error");
      }
    } },
    input,
    h("button", { class: "btn primary small", type: "submit",
      "data-testid": "worker-name-save" }, "Save"),
    h("button", { class: "btn small", type: "button", onclick: done }, "Cancel"));
    input.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape") done();
    });
    requestAnimationFrame(() => {
      if (!form.contains(document.activeElement)) input.focus();
    });
    return form;
  }

  // Revoking is two clicks: "Revoke" then "Confirm revoke" (no modal, keyboard friendly).
  _revokeControl(w) {
    const box = h("div", { class: "row gap" });
    const first = h("button", { class: "btn subtle danger", type: "button",
      "data-testid": "worker-revoke" }, "Revoke");
    first.addEventListener("click", () => {
      const confirm = h("button", { class: "btn danger", type: "button",
        "data-testid": "worker-revoke-confirm" }, `Confirm revoke ${machineLabel(this.ctx.store.state, w)}`);
      const cancel = h("button", { class: "btn", type: "button" }, "Cancel");
      cancel.addEventListener("click", () => {
        box.replaceChildren(first);
        first.focus();
      });
      confirm.addEventListener("click", async () => {
        confirm.disabled = true;
        try {
          await api.revokeWorker(w.worker_id);
          this.ctx.toast(`Revoked ${machineName(w)}`, "warn");
        } catch (err) {
          this.ctx.toast(`Could not revoke ${machineName(w)}: ${err.message}`, "error");
          confirm.disabled = false;
        }
      });
      box.replaceChildren(confirm, cancel);
      confirm.focus();
    });
    box.append(first);
    return box;
  }

  _sessionCard(s) {
    const state = this.ctx.store.state;
    const w = state.workers[s.worker_id];
    const up = workerUp(state, s.worker_id);
    const href = `#/session/${encodeURIComponent(s.session_id)}`;
    const facts = cardFacts(s);
    // "finished" says the agent is done, not that nothing of it runs: a dev server it left
    const running = liveProcesses(s);
    // two sessions of one title: what tells this one apart, beside its title
    const twin = twinWords(s, state);
    return h("article", { class: `card session-card outcome-${s.status}`,
      "data-testid": "session-card", "data-session-id": s.session_id },
    h("div", { class: "card-head" },
      h("h3", { class: "card-title", "data-testid": "card-title", title: s.title },
        titleNode(s.title, h("a", { href, class: "stretched" }))),
      twin ? h("span", { class: "chip twin mono", "data-testid": "session-twin",
        title: `${s.workdir} · ${s.session_id}` }, twin) : null,
      h("div", { class: "card-chips" },
        statusChip(s.status, "session-status", sessionWords(s)),
        running ? h("span", { class: "chip processes-chip", "data-testid": "session-processes",
          title: "Processes the agent started that still run: see them in the session" },
        processesWords(running)) : null),
      needsAttention(s.status)
        ? h("span", { class: "badge attention dot", "data-testid": "attention-badge",
          "aria-label": "needs you", title: "needs you" }) : null),
    facts.preview ? previewNode(facts.preview) : null,
    countdownNode(s),
    h("p", { class: "card-meta small muted", "data-testid": "session-meta" },
      h("span", { "data-testid": "session-activity" }, `active ${fmtAgo(s.updated_at)}`),
      facts.took ? ` · took ${facts.took}` : "",
      facts.files ? h("span", { class: "diffstat", "data-testid": "session-diffstat" },
        ` · ${facts.files} file${facts.files === 1 ? "" : "s"} `,
        h("span", { class: "d-add" }, `+${facts.added}`), " ",
        h("span", { class: "d-del" }, `−${facts.removed}`)) : "",
      s.usage.turns ? h("span", { "data-testid": "session-cost",
        title: `${s.usage.total_tokens} tokens over ${s.usage.turns} model calls` +
          (s.usage.unpriced_calls ? ` (${s.usage.unpriced_calls} without a price)` : "") },
      ` · ${fmtUsd(s.usage.cost_micros)}`) : "",
      ` · ${w ? machineLabel(state, w) : s.worker_id}`,
      up ? null : h("span", { class: "chip gone", "data-testid": "worker-gone",
        title: "The session's machine is not connected" }, "machine offline")),
    s.goal ? h("p", { class: `small card-goal goal-${s.goal.status}`, "data-testid": "card-goal",
      title: s.goal.condition },
    h("span", { class: "goal-label" }, "Goal "), h("span", { class: "mono" }, s.goal.condition),
    ` · ${goalWords(s.goal)}`) : null,
    s.status === "error" && s.status_reason
      ? h("p", { class: "small bad", "data-testid": "session-error" }, s.status_reason) : null,
    s.status === "running" && (s.status_reason || "").startsWith(QUEUED)
      ? h("p", { class: "small muted", "data-testid": "session-queued",
        "data-until": queuedUntil(s) }, s.status_reason) : null,
    budgetBox(s, this.ctx.socket, this.ctx.toast),
    this._children(s));
  }

  /** The sub-agents a session delegated to, nested in its card. */
  _children(s) {
    const kids = Object.values(this.ctx.store.state.sessions)
      .filter((x) => x.parent_id === s.session_id).sort((a, b) => a.created_at - b.created_at);
    if (!kids.length) return null;
    return h("ul", { class: "mini-list children", "data-testid": "session-children",
      "aria-label": `Sub-agents of ${s.title}` },
    kids.map((k) => h("li", { "data-testid": "child-card", "data-session-id": k.session_id },
      h("a", { href: `#/session/${encodeURIComponent(k.session_id)}` }, k.title), " ",
      statusChip(k.status, "child-status"))));
  }
}


/** The last line of `text` worth reading: prose before code, never a fence or a rule. */
export function lastWords(text) {
  let inFence = false;
  let prose = "";
  let code = "";
  for (const raw of String(text || "").split("\n")) {
    const line = raw.trim();
    if (/^(`{3,}|~{3,})/.test(line)) {
      inFence = !inFence;
      continue;
    }
    if (!/[\p{L}\p{N}]/u.test(line)) continue; // "}", "---", "|---|"
    if (inFence || line.startsWith("|")) code = line;
    else prose = line.replace(/^(#{1,6}\s+|[-*+]\s+|\d{1,9}[.)]\s+|>\s*)+/, "");
  }
  return prose || code;
}

/** A card's preview: one line of Markdown, its inline styles kept, its links plain text. */
function previewNode(line) {
  const p = h("p", { class: "preview", "data-testid": "session-preview" });
  p.innerHTML = renderInline(line); // safe: see markdown.js
  for (const a of p.querySelectorAll("a")) a.replaceWith(a.textContent);
  return p;
}

/** What a card says about a session: its last words, how long it took, what it changed. */
function cardFacts(s) {
  let preview = "";
  for (let i = s.items.length - 1; i >= 0 && !preview; i--) {
    const it = s.items[i];
    if (it.kind === "assistant_message" && it.text && !it.partial) preview = lastWords(it.text);
  }
  if (!preview) {
    const prompt = s.items.find((i) => i.kind === "user_message");
    preview = prompt ? lastWords(prompt.text) : "";
  }
  // the session's own turns, not the time to its last activity (a rename moves that)
  const busy = busySeconds(s);
  const took = busy >= 1 ? fmtDuration(busy) : "";
  const paths = new Set();
  let added = 0;
  let removed = 0;
  for (const it of s.items) {
    if (it.kind !== "tool_call" || !it.files) continue;
    for (const f of it.files) {
      paths.add(f.moved_to || f.path);
      added += f.added || 0;
      removed += f.removed || 0;
    }
  }
  const w = s.worktree;
  if (w && w.status !== "creating" && w.status !== "in_place" && w.status !== "failed") {
    // a worktree's whole change against its base, as the worker last counted it (its own
    // commits and what the model changed by commands too, not only its edits)
    return { preview: preview.slice(0, 200), took, files: w.files, added: w.added,
      removed: w.deleted };
  }
  return { preview: preview.slice(0, 200), took, files: paths.size, added, removed };
}

/** The machine's sandbox, or a warning that it has none (its sandboxed sessions' commands
 * are refused until the user chooses no sandbox for them). */
function sandboxFact(w) {
  const info = w.capabilities && w.capabilities.sandbox;
  if (info && info.kind && info.kind !== "none") {
    const name = { bwrap: "bubblewrap", seatbelt: "Seatbelt" }[info.kind] || info.kind;
    return h("dd", { "data-testid": "worker-sandbox" },
      `${name}${info.version ? ` ${info.version}` : ""}`);
  }
  return h("dd", { class: "bad", "data-testid": "worker-sandbox",
    title: "Commands of sandboxed sessions are refused on this machine" },
  `none — ${(info && info.reason) || "not reported (an older worker?)"}`);
}
