// The session view (`#/session/<id>`): items, plan, approvals, prompt box, controls.
//
// Rendering is lazy and incremental:
// * only the last WINDOW items are built on open; "Show earlier" builds more on demand;
// * an appended item appends one node; an updated item re-renders one node at the next frame;
// * streamed command output is appended to the existing <pre> without re-rendering.

import { api } from "../api.js";
import { h, replaceChildren } from "../dom.js";
import { findItem } from "../store.js";
import { FrameBatch, isBusy, needsAttention, statusChip, workerUp } from "./common.js";
import { appendOutput, approvalNode, planSteps, renderItem } from "./items.js";

/** Items built when a session opens, and per "Show earlier" click. */
export const WINDOW = 200;

const POLICIES = ["suggest", "auto-edit", "full-auto"];

// Events that change the header / side panel rather than one item.
const HEADER_EVENTS = new Set([
  "session_status_changed", "session_title_changed", "session_policy_changed", "plan_updated",
  "session_workspace_changed", "token_usage_recorded", "worker_connected", "worker_disconnected",
  "worker_revoked", "worker_paired", "approval_requested", "approval_resolved",
]);

export class SessionView {
  constructor(ctx, sessionId) {
    this.ctx = ctx;
    this.sessionId = sessionId;
    this._nodes = new Map(); // item id -> node
    this._dirty = new Set(); // item ids to re-render
    this._headerDirty = true;
    this._start = 0; // index of the first built item
    this._built = 0; // items built so far (items[_start.._built))
    this._batch = new FrameBatch(() => this._flush());
    this._stick = true; // follow new items while the user is at the bottom
    this._build();
  }

  get session() {
    return this.ctx.store.state.sessions[this.sessionId] || null;
  }

  _build() {
    this._title = h("h2", { class: "s-title", "data-testid": "session-title" });
    this._meta = h("div", { class: "s-meta" });
    this._status = h("span", {});
    this._gone = h("span", {});
    this._policy = h("select", { id: "policy-select", class: "input compact",
      "data-testid": "policy-select", onchange: () => this._setPolicy() },
    POLICIES.map((p) => h("option", { value: p }, p)));
    this._interrupt = h("button", { class: "btn danger", type: "button",
      "data-testid": "interrupt", onclick: () => this._doInterrupt() }, "Interrupt");
    this._download = h("a", { class: "btn subtle", "data-testid": "download-log",
      href: api.sessionLogUrl(this.sessionId), download: `session-${this.sessionId}.ndjson` },
    "Download log");
    this._earlier = h("button", { class: "btn subtle earlier", type: "button",
      "data-testid": "show-earlier", onclick: () => this._showEarlier() }, "Show earlier");
    this._list = h("div", { class: "s-list" });
    this._orphans = h("div", { class: "s-orphans" }); // approvals whose item is not built
    this._scroller = h("div", { class: "s-scroll", "data-testid": "session-items",
      tabindex: "-1" }, this._earlier, this._list, this._orphans);
    this._scroller.addEventListener("scroll", () => {
      const s = this._scroller;
      this._stick = s.scrollHeight - s.scrollTop - s.clientHeight < 48;
    }, { passive: true });
    this._side = h("aside", { class: "s-side", "aria-label": "Plan and workspace" });
    this._input = h("textarea", { id: "prompt-input", class: "input prompt-input",
      "data-testid": "prompt-input", rows: 2, placeholder: "Ask Codey…" });
    this._send = h("button", { class: "btn primary", type: "submit",
      "data-testid": "prompt-send" }, "Send");
    const form = h("form", { class: "s-prompt", onsubmit: (ev) => {
      ev.preventDefault();
      this._sendPrompt();
    } },
    h("label", { for: "prompt-input", class: "sr-only" }, "Message to the agent"),
    this._input, this._send);
    this._input.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        form.requestSubmit();
      }
    });
    this._missing = h("p", { class: "muted s-missing", "data-testid": "session-missing" },
      "Waiting for this session…");
    this.el = h("section", { class: "session", "data-testid": "session-view",
      "data-session-id": this.sessionId },
    h("header", { class: "s-head" },
      h("div", { class: "s-head-main" },
        h("a", { href: "#/", class: "back", "aria-label": "Back to dashboard" }, "←"),
        h("div", { class: "s-head-text" }, this._title, this._meta)),
      h("div", { class: "s-controls" },
        this._status, this._gone,
        h("label", { for: "policy-select", class: "sr-only" }, "Approval policy"),
        this._policy, this._interrupt, this._download)),
    this._missing,
    h("div", { class: "s-body" }, this._scroller, this._side),
    form);
    this._renderAll();
  }

  /** Build the header and the last WINDOW items from scratch. */
  _renderAll() {
    const s = this.session;
    this._missing.hidden = Boolean(s);
    this._nodes.clear();
    this._dirty.clear();
    this._list.replaceChildren();
    if (!s) {
      this._start = 0;
      this._built = 0;
      this._earlier.hidden = true;
      this._renderHeader();
      return;
    }
    const n = s.items.length;
    this._start = Math.max(0, n - WINDOW);
    this._built = n;
    const frag = document.createDocumentFragment();
    for (let i = this._start; i < n; i++) frag.append(this._node(s.items[i], s));
    this._list.append(frag);
    this._earlier.hidden = this._start === 0;
    this._earlier.textContent = `Show earlier (${this._start} more)`;
    this._renderHeader();
    this._scrollToEnd();
  }

  _node(item, s) {
    const node = renderItem(item, this.ctx, s);
    this._nodes.set(item.id, node);
    return node;
  }

  _showEarlier() {
    const s = this.session;
    if (!s || this._start === 0) return;
    const from = Math.max(0, this._start - WINDOW);
    const frag = document.createDocumentFragment();
    for (let i = from; i < this._start; i++) frag.append(this._node(s.items[i], s));
    const before = this._scroller.scrollHeight;
    this._list.prepend(frag);
    this._scroller.scrollTop += this._scroller.scrollHeight - before; // keep the view still
    this._start = from;
    this._earlier.hidden = from === 0;
    this._earlier.textContent = `Show earlier (${from} more)`;
    this._renderOrphans();
  }

  /** Called by the router once `el` is in the document (scrolling needs layout). */
  mounted() {
    this._scrollToEnd();
  }

  _scrollToEnd() {
    this._scroller.scrollTop = this._scroller.scrollHeight;
  }

  /** Store changes: decide what to update; DOM work happens in `_flush` at the next frame. */
  onChange(change) {
    if (change.kind === "reset") {
      this._renderAll();
      return;
    }
    const env = change.env;
    const e = env.event;
    if (env.session_id !== this.sessionId) {
      if (HEADER_EVENTS.has(e.type)) {
        this._headerDirty = true;
        this._batch.schedule();
      }
      return;
    }
    const s = this.session;
    switch (e.type) {
      case "session_created":
        this._renderAll();
        return;
      case "session_item_appended":
        // Built at flush time, in order, from `_built` on.
        break;
      case "session_item_updated": {
        const node = this._nodes.get(e.item_id);
        if (!node) break;
        const onlyOutput = e.output_delta && !e.text_delta && e.output == null &&
          e.status == null && e.exit_code == null && e.error == null && e.result == null &&
          e.diff == null && e.files == null && e.truncated == null;
        if (onlyOutput && !this._dirty.has(e.item_id) && appendOutput(node, e.output_delta)) {
          if (this._stick) this._batch.schedule();
          return;
        }
        this._dirty.add(e.item_id);
        break;
      }
      case "approval_requested":
        this._dirty.add(e.item_id);
        this._headerDirty = true;
        break;
      case "approval_resolved": {
        const a = s && s.approvals[e.approval_id];
        if (a) this._dirty.add(a.item_id);
        this._headerDirty = true;
        break;
      }
      default:
        if (HEADER_EVENTS.has(e.type)) this._headerDirty = true;
    }
    this._batch.schedule();
  }

  _flush() {
    const s = this.session;
    if (!s) {
      this._renderHeader();
      return;
    }
    if (s.items.length > this._built) {
      const frag = document.createDocumentFragment();
      for (let i = this._built; i < s.items.length; i++) {
        frag.append(this._node(s.items[i], s));
        this._dirty.delete(s.items[i].id);
      }
      this._built = s.items.length;
      this._list.append(frag);
    }
    for (const id of this._dirty) {
      const old = this._nodes.get(id);
      const item = findItem(s, id);
      if (!old || !item) continue;
      const fresh = this._node(item, s);
      keepOpenState(old, fresh);
      old.replaceWith(fresh);
      const out = fresh.querySelector("pre.output");
      if (out) out.scrollTop = out.scrollHeight; // output follows its tail

    }
    this._dirty.clear();
    if (this._headerDirty) {
      this._headerDirty = false;
      this._renderHeader();
    }
    this._renderOrphans();
    if (this._stick) this._scrollToEnd();
  }

  _renderHeader() {
    const s = this.session;
    const state = this.ctx.store.state;
    if (!s) {
      this._title.textContent = "Session";
      this._send.disabled = true;
      this._interrupt.disabled = true;
      this._policy.disabled = true;
      return;
    }
    this._send.disabled = false;
    this._policy.disabled = false;
    this._title.textContent = s.title || "Untitled";
    document.title = `${s.title || "Session"} · Codey`;
    const w = state.workers[s.worker_id];
    replaceChildren(this._meta,
      h("span", {}, w ? w.hostname : s.worker_id), " · ",
      h("span", { class: "mono", title: s.workdir }, s.workdir), " · ",
      h("span", {}, `${s.provider} / ${s.model}`),
      s.usage.turns ? h("span", { class: "muted" },
        ` · ${s.usage.total_tokens.toLocaleString()} tokens`) : null);
    const status = statusChip(s.status, "session-status");
    if (s.status_reason) status.title = s.status_reason;
    this._status.replaceChildren(status, needsAttention(s.status)
      ? h("span", { class: "badge attention", "data-testid": "attention-badge" },
        s.status === "waiting_approval" ? "approval needed" : "needs you") : "");
    this._gone.replaceChildren(workerUp(state, s.worker_id) ? "" : h("span", {
      class: "chip gone", "data-testid": "worker-gone" }, "machine offline"));
    if (this._policy.value !== s.policy) this._policy.value = s.policy;
    this._interrupt.disabled = !isBusy(s.status);
    this._input.placeholder = isBusy(s.status)
      ? "Steer the agent — sent before its next step…" : "Ask Codey…";
    this._renderSide(s);
  }

  _renderSide(s) {
    const parts = [];
    parts.push(h("section", { class: "side-box", "data-testid": "plan",
      "aria-label": "Plan" },
    h("h3", {}, "Plan"),
    s.plan_explanation ? h("p", { class: "muted small" }, s.plan_explanation) : null,
    s.plan.length ? planSteps(s.plan) : h("p", { class: "muted small" }, "No plan yet.")));
    if (s.changed_paths.length) {
      parts.push(h("section", { class: "side-box", "aria-label": "Changed files" },
        h("h3", {}, "Changed files"),
        h("ul", { class: "paths" }, s.changed_paths.slice(-30).reverse().map((p) =>
          h("li", { class: "mono ellipsis", title: p }, p)))));
    }
    const u = s.usage;
    parts.push(h("section", { class: "side-box", "aria-label": "Usage" },
      h("h3", {}, "Usage"),
      h("dl", { class: "facts" },
        h("dt", {}, "Turns"), h("dd", {}, String(u.turns)),
        h("dt", {}, "Input"), h("dd", {}, u.input_tokens.toLocaleString()),
        h("dt", {}, "Output"), h("dd", {}, u.output_tokens.toLocaleString()),
        h("dt", {}, "Reasoning"), h("dd", {}, u.reasoning_tokens.toLocaleString()))));
    replaceChildren(this._side, parts);
  }

  // Pending approvals whose item is not on screen (older than the built window, or missing).
  _renderOrphans() {
    const s = this.session;
    if (!s) return;
    const pending = Object.values(s.approvals).filter((a) => a.status === "pending" &&
      !this._nodes.has(a.item_id));
    const sig = pending.map((a) => a.approval_id).join(",");
    if (sig === this._orphans.dataset.sig) return;
    this._orphans.dataset.sig = sig;
    replaceChildren(this._orphans,
      pending.map((a) => approvalNode(a, this.ctx, this.sessionId, true)));
  }

  async _sendPrompt() {
    const text = this._input.value.trim();
    if (!text) return;
    this._send.disabled = true;
    try {
      await this.ctx.socket.sendPrompt(this.sessionId, text);
      if (this._input.value.trim() === text) this._input.value = "";
      this._stick = true;
    } catch (err) {
      this.ctx.toast(`Message not sent: ${err.message}`, "error");
    } finally {
      this._send.disabled = !this.session;
    }
  }

  async _setPolicy() {
    const s = this.session;
    const policy = this._policy.value;
    if (!s || policy === s.policy) return;
    try {
      await this.ctx.socket.setApprovalPolicy(this.sessionId, policy);
    } catch (err) {
      this.ctx.toast(`Policy not changed: ${err.message}`, "error");
      this._policy.value = s.policy;
    }
  }

  async _doInterrupt() {
    this._interrupt.disabled = true;
    try {
      await this.ctx.socket.interrupt(this.sessionId);
    } catch (err) {
      this.ctx.toast(`Interrupt failed: ${err.message}`, "error");
      this._interrupt.disabled = !(this.session && isBusy(this.session.status));
    }
  }

  destroy() {
    this._batch.cancel();
  }
}

// A re-rendered item keeps the open/closed state of its <details> (reasoning, diffs, results).
function keepOpenState(old, fresh) {
  const before = old.querySelectorAll("details");
  if (!before.length) return;
  const after = fresh.querySelectorAll("details");
  for (let i = 0; i < Math.min(before.length, after.length); i++) after[i].open = before[i].open;
}
