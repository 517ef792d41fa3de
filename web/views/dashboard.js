// The dashboard (`#/`): workers (with pairing) and sessions.
//
// Cards are keyed and re-rendered only when what they show changed, so a streaming session
// does not steal focus from a button elsewhere on the page.

import { api } from "../api.js";
import { fmtAgo, h } from "../dom.js";
import { FrameBatch, keyedList, needsAttention, statusChip, workerUp } from "./common.js";
import { NewSessionDialog } from "./newsession.js";
import { PairPanel } from "./pair.js";

// Events that change what the dashboard shows (item events only touch `updated_at`).
const RELEVANT = new Set([
  "worker_pair_requested", "worker_pair_resolved", "worker_paired", "worker_revoked",
  "worker_connected", "worker_disconnected", "session_created", "session_status_changed",
  "session_title_changed", "session_policy_changed",
]);

export class Dashboard {
  constructor(ctx) {
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
    this.el = h("div", { class: "dashboard", "data-testid": "dashboard" },
      h("section", { class: "panel", "aria-labelledby": "workers-h" },
        h("div", { class: "panel-head" }, h("h2", { id: "workers-h" }, "Machines"),
          this._linkButton),
        this._pairSlot, this._noWorkers, this._workers),
      h("section", { class: "panel sessions-panel", "aria-labelledby": "sessions-h" },
        h("div", { class: "panel-head" }, h("h2", { id: "sessions-h" }, "Sessions"),
          h("button", { class: "btn primary", type: "button", "data-testid": "new-session",
            onclick: () => new NewSessionDialog(this.ctx).open() }, "New session")),
        this._noSessions, this._sessions));
    this.render();
    this._ticker = setInterval(() => this._batch.schedule(), 30000); // "last seen" texts
  }

  onChange(change) {
    if (change.kind === "reset" || RELEVANT.has(change.env.event.type)) this._batch.schedule();
  }

  destroy() {
    this._batch.cancel();
    clearInterval(this._ticker);
  }

  _togglePair() {
    if (this._pairPanel) {
      this._pairPanel.el.remove();
      this._pairPanel = null;
      this._linkButton.setAttribute("aria-expanded", "false");
      return;
    }
    this._pairPanel = new PairPanel(this.ctx);
    this._pairSlot.append(this._pairPanel.el);
    this._linkButton.setAttribute("aria-expanded", "true");
  }

  render() {
    const state = this.ctx.store.state;
    // Sessions that need the user first, then newest first (not by activity: cards would jump).
    const sessions = Object.values(state.sessions).sort((a, b) =>
      (needsAttention(b.status) - needsAttention(a.status)) || (b.created_at - a.created_at));
    const byWorker = new Map();
    for (const s of sessions) {
      if (!byWorker.has(s.worker_id)) byWorker.set(s.worker_id, []);
      byWorker.get(s.worker_id).push(s);
    }
    const workers = Object.values(state.workers).sort((a, b) =>
      (a.revoked - b.revoked) || (b.connected - a.connected) ||
      a.hostname.localeCompare(b.hostname));
    this._noWorkers.hidden = workers.length > 0;
    keyedList(this._workers, workers, (w) => w.worker_id,
      (w) => JSON.stringify([w, fmtAgo(w.last_seen),
        (byWorker.get(w.worker_id) || []).map((s) => [s.session_id, s.title, s.status])]),
      (w) => this._workerCard(w, byWorker.get(w.worker_id) || []));
    this._noSessions.hidden = sessions.length > 0;
    keyedList(this._sessions, sessions, (s) => s.session_id,
      (s) => {
        const w = state.workers[s.worker_id];
        return JSON.stringify([s.title, s.status, s.status_reason, s.policy, s.provider, s.model,
          workerUp(state, s.worker_id), w ? w.hostname : null]);
      },
      (s) => this._sessionCard(s));
    if (this._pairPanel) this._pairPanel.refresh();
  }

  _workerCard(w, sessions) {
    const status = w.connected ? "connected" : "disconnected";
    const revoke = w.revoked ? null : this._revokeControl(w);
    return h("article", { class: `card worker-card ${status}${w.revoked ? " revoked" : ""}`,
      "data-testid": "worker-card", "data-worker-id": w.worker_id },
    h("div", { class: "card-head" },
      h("span", { class: `dot ${status}`, "aria-hidden": "true" }),
      h("h3", { class: "card-title" }, w.hostname),
      h("span", { class: `chip ${status}`, "data-testid": "worker-status" }, status),
      w.revoked ? h("span", { class: "chip revoked" }, "revoked") : null),
    h("dl", { class: "facts" },
      h("dt", {}, "System"), h("dd", {}, w.os),
      h("dt", {}, "Version"), h("dd", {}, w.worker_version || "—"),
      h("dt", {}, "Last seen"), h("dd", { "data-testid": "worker-last-seen" },
        w.connected ? "now" : fmtAgo(w.last_seen)),
      h("dt", {}, "Roots"), h("dd", { class: "mono" }, (w.roots || []).join(", ") || "—")),
    sessions.length
      ? h("ul", { class: "mini-list", "aria-label": `Sessions on ${w.hostname}` },
        sessions.slice(0, 5).map((s) => h("li", {},
          h("a", { href: `#/session/${encodeURIComponent(s.session_id)}` }, s.title || "Untitled"),
          " ", h("span", { class: `muted small status-text-${s.status}` }, s.status))))
      : null,
    revoke ? h("div", { class: "card-foot" }, revoke) : null);
  }

  // Revoking is two clicks: "Revoke" then "Confirm revoke" (no modal, keyboard friendly).
  _revokeControl(w) {
    const box = h("div", { class: "row gap" });
    const first = h("button", { class: "btn subtle danger", type: "button",
      "data-testid": "worker-revoke" }, "Revoke");
    first.addEventListener("click", () => {
      const confirm = h("button", { class: "btn danger", type: "button",
        "data-testid": "worker-revoke-confirm" }, `Confirm revoke ${w.hostname}`);
      const cancel = h("button", { class: "btn", type: "button" }, "Cancel");
      cancel.addEventListener("click", () => {
        box.replaceChildren(first);
        first.focus();
      });
      confirm.addEventListener("click", async () => {
        confirm.disabled = true;
        try {
          await api.revokeWorker(w.worker_id);
          this.ctx.toast(`Revoked ${w.hostname}`, "warn");
        } catch (err) {
          this.ctx.toast(`Could not revoke ${w.hostname}: ${err.message}`, "error");
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
    return h("article", { class: "card session-card", "data-testid": "session-card",
      "data-session-id": s.session_id },
    h("div", { class: "card-head" },
      h("h3", { class: "card-title" }, h("a", { href, class: "stretched" }, s.title || "Untitled")),
      needsAttention(s.status)
        ? h("span", { class: "badge attention", "data-testid": "attention-badge" },
          s.status === "waiting_approval" ? "approval needed" : "needs you")
        : null),
    h("div", { class: "card-meta" },
      statusChip(s.status, "session-status"),
      up ? null : h("span", { class: "chip gone", "data-testid": "worker-gone",
        title: "The session's machine is not connected" }, "machine offline")),
    h("dl", { class: "facts" },
      h("dt", {}, "Machine"), h("dd", {}, w ? w.hostname : s.worker_id),
      h("dt", {}, "Model"), h("dd", {}, `${s.provider} / ${s.model}`),
      h("dt", {}, "Policy"), h("dd", {}, s.policy),
      h("dt", {}, "Folder"), h("dd", { class: "mono ellipsis", title: s.workdir }, s.workdir)),
    s.status_reason ? h("p", { class: "muted small" }, s.status_reason) : null);
  }
}
