// Linking a machine: the "Link a machine" panel (every pending request) and the
// `#/pair/<CODE>` page (one request, opened from the link the worker printed).
//
// Pending requests come from GET /api/pairing/requests because only that carries the code to
// compare; the state's `pair_requests` (events) tells us when to fetch again.

import { api } from "../api.js";
import { copyText, fmtTime, h, replaceChildren } from "../dom.js";

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
  result,
  req.code ? pairQr(req.code) : null);
}

/** A QR code of the pairing link: approve from a phone (drawn by the server, as SVG). */
function pairQr(code) {
  const link = `${location.origin}/#/pair/${encodeURIComponent(code)}`;
  return h("details", { class: "fold qr", "data-testid": "pair-qr" },
    h("summary", { class: "small" }, "Approve from your phone"),
    h("img", { src: `/api/qr.svg?text=${encodeURIComponent(link)}`, width: 164, height: 164,
      alt: `QR code of ${link}`, "data-testid": "pair-qr-image" }),
    h("p", { class: "small muted mono" }, link));
}

/**
 * The lines that install and start a worker pointed at this server, from the wheels it hands
 * out under /dl/ (see codey_server/downloads.py): `uvx` (needs uv) and a venv with pip.
 */
export function installLines(origin, wheels, uv = null) {
  const worker = origin + wheels.worker;
  const protocol = origin + wheels.protocol;
  const venv = "~/.codey-worker";
  const args = `--from ${worker} --with ${protocol} codey-worker --server ${origin}`;
  return {
    uvx: `uvx ${args}`,
    // `uvx` is `uv tool run`: by uv's absolute path, it needs nothing on the PATH
    local: uv ? `${uv} tool run ${args}` : null,
    pip: `python3 -m venv ${venv} && ${venv}/bin/pip install ${protocol} ${worker}` +
      ` && ${venv}/bin/codey-worker --server ${origin}`,
  };
}

/** How to reach uv from a new terminal where it is "command not found". */
function pathNote(uv) {
  const dir = uv ? uv.slice(0, uv.lastIndexOf("/")) : "$HOME/.local/bin";
  return h("p", { class: "muted small", "data-testid": "install-path-note" },
    "“uvx: command not found”? uv installs into ", h("code", {}, dir),
    ", which a new terminal may not have on its PATH: run ",
    h("code", {}, `export PATH="${dir}:$PATH"`), " (add it to ~/.bashrc to keep it)",
    uv ? ", or use the line for this server's own machine." : ".");
}

function commandLine(label, text, testid, ctx) {
  const code = h("code", { class: "install-line", "data-testid": testid }, text);
  const copy = h("button", { class: "btn small", type: "button",
    "data-testid": `${testid}-copy`, "aria-label": `Copy the ${label} line` }, "Copy");
  copy.addEventListener("click", async () => {
    try {
      await copyText(text);
      copy.textContent = "Copied";
      setTimeout(() => { copy.textContent = "Copy"; }, 1500);
    } catch (err) {
      ctx.toast(`Could not copy: ${err.message}`, "bad");
    }
  });
  return h("div", { class: "install-row" },
    h("span", { class: "muted small" }, label), h("pre", { class: "install" }, code), copy);
}

/** The install block of the panel: loads /dl/index.json, shows both lines. */
function installBlock(ctx) {
  const el = h("div", { class: "install-block", "data-testid": "install" },
    h("p", { class: "muted small" }, "Preparing the worker's install line…"));
  // where uv is on the server's machine: not knowing it only loses that one line
  const tools = api.localTools().catch(() => ({ uv: null }));
  Promise.all([api.workerWheels(), tools]).then(([wheels, { uv }]) => {
    const lines = installLines(location.origin, wheels, uv);
    replaceChildren(el,
      h("p", { class: "small" }, "On the machine, run this line (it needs ",
        h("a", { href: "https://docs.astral.sh/uv/", target: "_blank", rel: "noopener" }, "uv"),
        "): it installs the worker this server was built with and starts it."),
      commandLine("uvx", lines.uvx, "install-line", ctx),
      lines.local ? h("p", { class: "muted small" },
        "On this server's own machine, by uv's full path (works in any terminal):") : null,
      lines.local ? commandLine("uv", lines.local, "install-line-local", ctx) : null,
      pathNote(uv),
      h("p", { class: "muted small" }, "Or, with Python ≥ 3.11 and pip only:"),
      commandLine("pip", lines.pip, "install-line-pip", ctx),
      h("p", { class: "muted small" },
        "The worker prints a link; open it, or approve the request here."));
  }).catch((err) => {
    replaceChildren(el, h("p", { class: "bad small", "data-testid": "install-error" },
      `No install line: ${err.message}. From a checkout of Codey, run `,
      h("code", {}, `uv run codey-worker --server ${location.origin}`), "."), pathNote(null));
  });
  return el;
}

/** The panel listing pending requests (opened by "Link a machine"). */
export class PairPanel {
  constructor(ctx) {
    this.ctx = ctx;
    this.el = h("section", { class: "pair-panel", "data-testid": "pair-panel",
      "aria-label": "Link a machine" });
    this._list = h("div", { class: "pair-list", "data-testid": "pair-list" });
    this._sig = null;
    this._inflight = false;
    this._shown = new Set(); // requests already on screen (a new one is brought into view)
    // the requests first: the install lines below are long, and a request is what the user
    // waits for once the worker runs
    this.el.append(h("h3", {}, "Link a machine"), this._list, installBlock(ctx));
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
        "No machine is waiting. Run the line below on it: its request appears here."));
      return;
    }
    const cards = reqs.map((r) => pairRequestCard(r, this.ctx, () => this.refresh(true)));
    replaceChildren(this._list, cards);
    const fresh = cards.find((c, i) => !this._shown.has(reqs[i].request_id));
    this._shown = new Set(reqs.map((r) => r.request_id));
    if (fresh) fresh.scrollIntoView({ block: "nearest" });
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
