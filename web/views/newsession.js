// The "New session" dialog: connected worker, workdir, provider/model, policy, sandbox and
// network, first prompt.

import { h, replaceChildren } from "../dom.js";
import { lastFolder, lastMachine, machineLabel, machineName, rememberMachine } from "./common.js";

const POLICIES = [
  ["suggest", "Suggest — ask before commands and edits"],
  ["auto-edit", "Auto-edit — edits in the workdir are automatic"],
  ["full-auto", "Full auto — nothing asks"],
  ["reviewer", "Reviewer — a second model approves low-risk actions, asks you the rest"],
];

export const SANDBOXES = [
  ["workspace-write", "Workspace — commands write only in the working directory"],
  ["read-only", "Read-only — commands write nowhere"],
  ["full-access", "Full access — no sandbox (commands can do anything you can)"],
];

/** What the machine's sandbox is, in words; null when it has one. */
export function noSandbox(worker) {
  const info = worker && worker.capabilities && worker.capabilities.sandbox;
  if (info && info.kind && info.kind !== "none") return null;
  return (info && info.reason) || "it does not report one (an older worker?)";
}

/** Providers a session can use now: needing no login, or logged in. */
export function usableProviders(config, auth) {
  return ((config && config.providers) || []).filter(
    (p) => p.auth === "none" || ((auth || {})[p.name] || {}).state === "logged_in");
}

export class NewSessionDialog {
  constructor(ctx) {
    this.ctx = ctx;
    this.el = h("dialog", { class: "dialog", "data-testid": "new-session-dialog",
      "aria-labelledby": "ns-title" });
    this.el.addEventListener("close", () => this.el.remove());
    this._render();
  }

  /** Show it as a modal; `workerId` preselects a worker. */
  open(workerId = null) {
    document.body.append(this.el);
    if (workerId) {
      this._worker.value = workerId;
      this._fillWorkdir();
    }
    this.el.showModal();
    // the first thing to do, at the top: the machine, or linking one when none is connected
    // (focus on Cancel, at the bottom, scrolled that line out of view)
    (this._worker.disabled ? this._linkMachine : this._worker).focus();
    this.el.scrollTop = 0;
  }

  _workers() {
    return Object.values(this.ctx.store.state.workers)
      .filter((w) => w.connected && !w.revoked)
      .sort((a, b) => machineName(a).localeCompare(machineName(b)));
  }

  _fillWorkdir() {
    const w = this.ctx.store.state.workers[this._worker.value];
    if (w && !this._workdir.dataset.touched) {
      this._workdir.value = lastFolder(w, this.ctx.store.state);
    }
    this._fillAgents(w);
  }

  /** External ACP agents the chosen machine can run instead of Codey's own loop. */
  _fillAgents(w) {
    const names = (w && w.capabilities && w.capabilities.acp_agents) || [];
    replaceChildren(this._agent, h("option", { value: "" }, "Codey"),
      ...names.map((n) => h("option", { value: n }, `${n} (ACP agent on this machine)`)));
    this._agentField.hidden = names.length === 0;
    this._warnSandbox();
    this._warnModels();
  }

  /** No model a session could use (none set up, or none logged in): say so, with the way to
   * Settings → Models, rather than start a session that can only fail. An ACP agent brings
   * its own model. */
  _warnModels() {
    const config = this.ctx.config; // (not loaded yet: nothing to say)
    const none = Boolean(config) && !this._agent.value &&
      !usableProviders(config, this.ctx.store.state.auth).length;
    this._modelNote.hidden = !none;
    this._submit.disabled = !this._workers().length || none;
  }

  /** A machine without a sandbox runs no command of a sandboxed session: say so now. */
  _warnSandbox() {
    const w = this.ctx.store.state.workers[this._worker.value];
    const why = w ? noSandbox(w) : null;
    const bare = this._sandbox.value === "full-access";
    this._sandboxNote.hidden = !(why || bare);
    this._sandboxNote.className = why && !bare ? "bad small" : "warn small";
    this._sandboxNote.textContent = why && !bare
      ? `This machine has no sandbox (${why}): its commands will be refused unless you ` +
        "choose Full access."
      : "Full access: the agent's commands run with all your rights, outside any sandbox.";
    this._network.disabled = bare;
  }

  _render() {
    const workers = this._workers();
    this._worker = h("select", { id: "ns-worker", "data-testid": "ns-worker", class: "input",
      required: true, disabled: !workers.length,
      onchange: () => this._fillWorkdir() },
    workers.length
      ? workers.map((w) => h("option", { value: w.worker_id },
        `${machineLabel(this.ctx.store.state, w)} (${w.os})`))
      : h("option", { value: "" }, "No connected machine"));
    const last = lastMachine(workers, this.ctx.store.state);
    if (last) this._worker.value = last;
    this._workdir = h("input", { id: "ns-workdir", "data-testid": "ns-workdir", class: "input mono",
      required: true, placeholder: "/home/me/project", autocomplete: "off",
      oninput: (ev) => {
        ev.target.dataset.touched = "1";
      } });
    const config = this.ctx.config;
    const modelOptions = [h("option", { value: "" },
      config && config.default_provider ? `Default (${config.default_provider})`
        : "Server default")];
    for (const p of (config && config.providers) || []) {
      for (const m of p.models || []) {
        modelOptions.push(h("option", { value: JSON.stringify([p.name, m]) }, `${p.name} / ${m}`));
      }
    }
    this._model = h("select", { id: "ns-model", "data-testid": "ns-model", class: "input" },
      modelOptions);
    this._agent = h("select", { id: "ns-agent", "data-testid": "ns-agent", class: "input",
      onchange: () => this._warnModels() });
    this._modelNote = h("p", { class: "bad small", "data-testid": "ns-no-model", role: "status",
      hidden: true }, "No model provider is set up yet: ",
    h("a", { href: "#/settings", "data-testid": "ns-settings-link",
      onclick: () => this.el.close() }, "add one in Settings → Models"),
    ", then start the session.");
    this._agentField = field("ns-agent", "Agent", this._agent);
    this._agentField.hidden = true;
    this._policy = h("select", { id: "ns-policy", "data-testid": "ns-policy", class: "input" },
      POLICIES.map(([v, text]) => h("option", { value: v }, text)));
    this._sandbox = h("select", { id: "ns-sandbox", "data-testid": "ns-sandbox", class: "input",
      onchange: () => this._warnSandbox() },
    SANDBOXES.map(([v, text]) => h("option", { value: v }, text)));
    this._network = h("input", { type: "checkbox", id: "ns-network",
      "data-testid": "ns-network" });
    this._sandboxNote = h("p", { "data-testid": "ns-sandbox-note", role: "status",
      hidden: true });
    this._planMode = h("input", { type: "checkbox", id: "ns-plan-mode",
      "data-testid": "ns-plan-mode" });
    // a worktree of its own: sessions on one repository do not see each other's changes
    this._worktree = h("input", { type: "checkbox", id: "ns-worktree",
      "data-testid": "ns-worktree", onchange: () => {
        this._baseField.hidden = !this._worktree.checked;
      } });
    this._base = h("input", { id: "ns-base", "data-testid": "ns-base", class: "input mono",
      placeholder: "the current branch", autocomplete: "off" });
    this._baseField = field("ns-base", "From (branch, tag or commit)", this._base);
    this._baseField.hidden = true;
    this._prompt = h("textarea", { id: "ns-prompt", "data-testid": "ns-prompt", class: "input",
      rows: 4, placeholder: "What should Codey do?" });
    // a goal: checked after each turn, the next turn started with what failed until it holds
    this._goal = h("input", { id: "ns-goal", "data-testid": "ns-goal", class: "input mono",
      autocomplete: "off", placeholder: "$ pytest -q   (or: the README explains setup)" });
    this._error = h("p", { class: "bad", "data-testid": "ns-error", role: "alert", hidden: true });
    this._submit = h("button", { class: "btn primary", type: "submit", "data-testid": "ns-submit",
      disabled: !workers.length }, "Start session");
    this._cancel = h("button", { class: "btn", type: "button", "data-testid": "ns-cancel",
      onclick: () => this.el.close() }, "Cancel");
    const form = h("form", { class: "form", method: "dialog",
      onsubmit: (ev) => {
        ev.preventDefault();
        this._create();
      } },
    h("h2", { id: "ns-title" }, "New session"),
    workers.length ? null : this._noMachine(),
    field("ns-worker", "Machine", this._worker),
    field("ns-workdir", "Working directory", this._workdir),
    this._agentField,
    field("ns-model", "Model", this._model),
    this._modelNote,
    field("ns-policy", "Approval policy", this._policy),
    field("ns-sandbox", "Sandbox", this._sandbox),
    h("label", { for: "ns-network", class: "check" }, this._network,
      " Network: sandboxed commands may reach the network"),
    this._sandboxNote,
    h("label", { for: "ns-plan-mode", class: "check" }, this._planMode,
      " Plan first: the agent proposes a plan and changes nothing until you approve it"),
    h("label", { for: "ns-worktree", class: "check" }, this._worktree,
      " In a new git worktree: a branch of its own (codey/…), the project's setup script " +
      "run; without git it works in the folder"),
    this._baseField,
    field("ns-prompt", "First prompt", this._prompt),
    field("ns-goal", "Goal (optional): keep going until it holds", this._goal),
    h("p", { class: "muted small" }, "After each turn the goal is checked: \"$ command\" " +
      "must exit 0 in the sandbox; otherwise the agent proves it and a reviewer judges."),
    this._error,
    h("div", { class: "row gap end" }, this._cancel, this._submit));
    replaceChildren(this.el, form);
    this._prompt.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        form.requestSubmit();
      }
    });
    if (workers.length) this._fillWorkdir();
    else this._warnModels();
  }

  /** No machine to start on: say so, with the way to link one (or start one linked). */
  _noMachine() {
    const linked = Object.values(this.ctx.store.state.workers).some((w) => !w.revoked);
    this._linkMachine = h("a", { href: "#/link", "data-testid": "ns-link-machine",
      onclick: (ev) => {
        ev.preventDefault();
        this.el.close();
        this.ctx.navigate("#/link");
      } }, "Link a machine");
    return h("p", { class: "warn", "data-testid": "ns-no-machine", role: "status" },
      linked ? "No machine is connected: start the worker on one of yours, or "
        : "No machine is connected yet: ",
      this._linkMachine, linked ? "." : " to start a session on it.");
  }

  async _create() {
    const workerId = this._worker.value;
    const workdir = this._workdir.value.trim();
    if (!workerId || !workdir) {
      this._showError(!workerId ? "Pick a machine." : "Enter a working directory.");
      return;
    }
    let provider = null;
    let model = null;
    if (this._model.value) [provider, model] = JSON.parse(this._model.value);
    this._submit.disabled = true;
    this._error.hidden = true;
    try {
      const ack = await this.ctx.socket.createSession({
        worker_id: workerId, workdir, prompt: this._prompt.value, provider, model,
        policy: this._policy.value, plan_mode: this._planMode.checked,
        agent: this._agent.value || null, sandbox: this._sandbox.value,
        network: this._network.checked && this._sandbox.value !== "full-access",
        worktree: this._worktree.checked && !this._agent.value
          ? { base: this._base.value.trim(), setup: true } : null,
        goal: this._goal.value,
      });
      rememberMachine(workerId, workdir);
      this.el.close();
      if (ack.session_id) this.ctx.navigate(`#/session/${ack.session_id}`);
    } catch (err) {
      this._showError(`Could not start the session: ${err.message}`);
      this._submit.disabled = false;
    }
  }

  _showError(text) {
    this._error.textContent = text;
    this._error.hidden = false;
  }
}

function field(id, text, control) {
  return h("div", { class: "field" }, h("label", { for: id }, text), control);
}
