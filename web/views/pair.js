// Linking a machine: the "Link a machine" panel (every pending request) and the
// `#/pair/<CODE>` page (one request, opened from the link the worker printed).
//
// Pending requests come from GET /api/pairing/requests because only that carries the code to
// compare; the state's `pair_requests` (events) tells us when to fetch again.

import { api } from "../api.js";
import { fmtTime, h, replaceChildren } from "../dom.js";

/** A card for one pair request with approve / deny; `onDone(outcome)` after a decision. */
export function pairRequestCard(req, ctx, onDone) {
  const result = h("div", { class: "pair-result", "data-testid": "pair-result",
    role: "status" });
  const approve = h("button", { class: "btn primary", type: "button",
    "data-testid": "pair-approve" }, "Approve");
  const deny = h("button", { class: "btn danger", type: "button", "data-testid": "pair-deny" },
    "Deny");
  const busy = (on) => {
    approve.disabled = on;
    deny.disabled = on;
  };
  approve.addEventListener("click", async () => {
    busy(true);
    try {
      await api.approvePair(req.request_id, req.code);
      result.textContent = `Linked ${req.hostname}. It connects in a moment.`;
      result.className = "pair-result good";
      ctx.toast(`Linked ${req.hostname}`, "good");
      onDone("approved");
    } catch (err) {
      result.textContent = `Not linked: ${err.message}`;
      result.className = "pair-result bad";
      busy(false);
    }
  });
  deny.addEventListener("click", async () => {
    busy(true);
    try {
      await api.denyPair(req.request_id);
      result.textContent = `Denied ${req.hostname}.`;
      result.className = "pair-result";
      onDone("denied");
    } catch (err) {
      result.textContent = `Could not deny: ${err.message}`;
      result.className = "pair-result bad";
      busy(false);
    }
  });
  const roots = (req.roots || []).join(", ") || "—";
  return h("article", { class: "card pair-card", "data-testid": "pair-request",
    "data-request-id": req.request_id },
  h("div", { class: "pair-code-row" },
    h("span", { class: "muted" }, "Code"),
    h("code", { class: "code-big", "data-testid": "pair-code" }, req.code || "—")),
  h("p", { class: "muted small" },
    "Check that this code is the one printed on the machine you are linking."),
  h("dl", { class: "facts" },
    h("dt", {}, "Host"), h("dd", { "data-testid": "pair-hostname" }, req.hostname),
    h("dt", {}, "System"), h("dd", {}, req.os),
    h("dt", {}, "Python"), h("dd", {}, req.python_version || "—"),
    h("dt", {}, "Worker"), h("dd", {}, req.worker_version || "—"),
    h("dt", {}, "Roots"), h("dd", { class: "mono" }, roots),
    h("dt", {}, "Key"), h("dd", { class: "mono", "data-testid": "pair-fingerprint" },
      req.fingerprint),
    h("dt", {}, "Expires"), h("dd", {}, fmtTime(req.expires_at))),
  h("div", { class: "row gap" }, approve, deny),
  result);
}

/** The panel listing pending requests (opened by "Link a machine"). */
export class PairPanel {
  constructor(ctx) {
    this.ctx = ctx;
    this.el = h("section", { class: "pair-panel", "data-testid": "pair-panel",
      "aria-label": "Link a machine" });
    this._list = h("div", { class: "pair-list" });
    this._sig = null;
    this._inflight = false;
    const origin = location.origin;
    this.el.append(
      h("h3", {}, "Link a machine"),
      h("p", { class: "muted small" }, "On the machine, run ",
        h("code", {}, `uvx codey-worker --server ${origin}`),
        ". It prints a link; open it, or approve the request here."),
      this._list);
    this.refresh(true);
  }

  /** Fetch the pending requests again if the state's set of requests changed. */
  async refresh(force = false) {
    const sig = Object.keys(this.ctx.store.state.pair_requests).sort().join(",");
    if (!force && sig === this._sig) return;
    this._sig = sig;
    if (this._inflight) {
      this._again = true;
      return;
    }
    this._inflight = true;
    try {
      const reqs = await api.pairRequests();
      this._render(reqs);
    } catch (err) {
      replaceChildren(this._list, h("p", { class: "bad" },
        `Could not load pair requests: ${err.message}`));
    } finally {
      this._inflight = false;
      if (this._again) {
        this._again = false;
        this.refresh(true);
      }
    }
  }

  _render(reqs) {
    if (!reqs.length) {
      replaceChildren(this._list, h("p", { class: "muted", "data-testid": "pair-empty" },
        "No machine is waiting. Start a worker and its request appears here."));
      return;
    }
    replaceChildren(this._list,
      reqs.map((r) => pairRequestCard(r, this.ctx, () => this.refresh(true))));
  }
}

/** The `#/pair/<CODE>` page. */
export class PairPage {
  constructor(ctx, code) {
    this.ctx = ctx;
    this.code = code.toUpperCase();
    this.el = h("section", { class: "page narrow", "data-testid": "pair-page" },
      h("p", {}, h("a", { href: "#/", class: "back" }, "← Dashboard")),
      h("h2", {}, "Link this machine?"));
    this._body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
    this.el.append(this._body);
    this._load();
  }

  async _load() {
    try {
      const req = await api.pairByCode(this.code);
      replaceChildren(this._body, pairRequestCard({ ...req, code: req.code || this.code },
        this.ctx, () => {}));
    } catch (err) {
      const text = err.status === 404
        ? `No machine is waiting with code ${this.code}. It may have expired or been used.`
        : `Could not load the request: ${err.message}`;
      replaceChildren(this._body, h("p", { class: "bad", "data-testid": "pair-missing" }, text));
    }
  }

  onChange() {}

  destroy() {}
}
