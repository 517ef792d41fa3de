// The MCP dialog (top bar): tokens for agents that use Codey as an MCP server (`/mcp`).
//
// A token is shown once, when it is made (the server keeps only its hash), with the URL and a
// config snippet to paste into the agent; each can be revoked, and is refused from then on.

import { api } from "../api.js";
import { copyText, fmtAgo, h, replaceChildren } from "../dom.js";

const SCOPES = [
  ["read", "read: list and read sessions, machines, tasks"],
  ["sessions", "sessions: also start sessions and send prompts"],
  ["admin", "admin: also change the task board, and run a worktree's setup script or "
    + "branch it from a revision of its choice (before any approval)"],
];
const POLICIES = [
  ["suggest", "suggest: asks before every change"],
  ["auto-edit", "auto-edit: edits go ahead, commands ask"],
  ["full-auto", "full-auto: nothing asks"],
];

export class McpDialog {
  constructor(ctx) {
    this.ctx = ctx;
    this.tokens = [];
    this.fresh = null; // {name, token}: shown until the dialog closes
    // what the user typed and chose: kept across renders (the token list's fetch renders
    // again, and would otherwise put the choices back to their defaults under the user)
    this.form = { name: "", scope: "sessions", policy: "suggest" };
    this.el = h("dialog", { class: "dialog", "data-testid": "mcp-dialog",
      "aria-labelledby": "mcp-title" });
    this.el.addEventListener("close", () => this.el.remove());
  }

  async open() {
    document.body.append(this.el);
    this._render();
    this.el.showModal();
    await this._refresh();
  }

  async _refresh() {
    try {
      this.tokens = await api.mcpTokens();
      this._error = "";
    } catch (err) {
      this._error = err.message;
    }
    this._render();
  }

  async _do(fn) {
    try {
      this._error = "";
      await fn();
    } catch (err) {
      this._error = err.message;
    }
    await this._refresh();
  }

  _render() {
    const url = `${location.origin}/mcp`;
    const name = h("input", { id: "mcp-name", class: "input", "data-testid": "mcp-name",
      placeholder: "who uses it, e.g. claude on my laptop", maxlength: 80,
      value: this.form.name, oninput: () => { this.form.name = name.value; } });
    const choice = (id, key, label, options) => {
      const select = h("select", { id, class: "input", "data-testid": id,
        onchange: () => { this.form[key] = select.value; } },
        options.map(([v, text]) => h("option", { value: v, selected: v === this.form[key] },
          text)));
      return [h("label", { for: id, class: "offscreen" }, label), select];
    };
    const [scopeLabel, scope] = choice("mcp-scope", "scope", "What it may do", SCOPES);
    const [policyLabel, policy] = choice("mcp-policy", "policy", "The most its sessions may do",
      POLICIES);
    const form = h("form", { class: "col gap", onsubmit: (ev) => {
      ev.preventDefault();
      this._do(async () => {
        const made = await api.createMcpToken(name.value.trim() || "agent", scope.value,
          policy.value);
        this.fresh = made;
        this.form = { name: "", scope: "sessions", policy: "suggest" };
      });
    } },
    h("div", { class: "row gap" },
      h("label", { for: "mcp-name", class: "offscreen" }, "Token name"), name,
      h("button", { class: "btn", type: "submit", "data-testid": "mcp-create" }, "New token")),
    h("div", { class: "row gap wrap" }, scopeLabel, scope, policyLabel, policy));
    const fresh = this.fresh ? h("div", { class: "notice", "data-testid": "mcp-fresh" },
      h("p", {}, `Token for ${this.fresh.name} — copy it now, it is not shown again:`),
      h("div", { class: "row gap" },
        h("pre", { class: "install mono", "data-testid": "mcp-token" }, this.fresh.token),
        copyButton(this.fresh.token, this.ctx)),
      h("p", { class: "muted small" }, "In the agent's MCP settings:"),
      h("pre", { class: "install mono small" }, JSON.stringify({ codey: { type: "http", url,
        headers: { Authorization: `Bearer ${this.fresh.token}` } } }, null, 2))) : null;
    const list = this.tokens.length ? h("ul", { class: "plain", "data-testid": "mcp-tokens" },
      this.tokens.map((t) => h("li", { class: "row gap", "data-testid": "mcp-token-row" },
        h("span", {}, t.name),
        h("span", { class: "badge", "data-testid": "mcp-token-scope",
          title: "what it may do; the most its sessions may do" },
        `${t.scope} · up to ${t.max_policy}`),
        h("span", { class: "muted small" }, t.last_used_at ? `used ${fmtAgo(t.last_used_at)}`
          : "never used"),
        h("button", { class: "btn subtle danger", type: "button", "data-testid": "mcp-revoke",
          "aria-label": `Revoke ${t.name}`,
          onclick: () => this._do(async () => {
            await api.revokeMcpToken(t.token_id);
            if (this.fresh && this.fresh.token_id === t.token_id) this.fresh = null;
          }) }, "Revoke"))))
      : h("p", { class: "muted" }, "No token: nothing can use /mcp.");
    replaceChildren(this.el, h("div", { class: "form" },
      h("h2", { id: "mcp-title" }, "Codey as an MCP server"),
      h("p", {}, "Agents — in Codey sessions or anywhere else — can list, start and steer " +
        "sessions through ", h("code", {}, url), " with a token of their own."),
      form, fresh,
      h("h3", {}, "Tokens"), list,
      this._error ? h("p", { class: "bad", role: "alert" }, this._error) : null,
      h("div", { class: "row gap end" }, h("button", { class: "btn", type: "button",
        "data-testid": "mcp-close", onclick: () => this.el.close() }, "Close"))));
  }
}

function copyButton(text, ctx) {
  const button = h("button", { class: "btn small", type: "button", "data-testid": "mcp-copy",
    "aria-label": "Copy the token" }, "Copy");
  button.addEventListener("click", async () => {
    try {
      await copyText(text);
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    } catch (err) {
      ctx.toast(`Could not copy: ${err.message}`, "bad");
    }
  });
  return button;
}
