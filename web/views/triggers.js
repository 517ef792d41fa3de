// `#/triggers`: webhooks that start a session (or a board task) when an event arrives — a
// schedule started by an event.
//
// Everything shown is folded from `trigger_*` events (the store), so a delivery shows up
// here live; changes go through /api/triggers. A trigger's secret is never in the state:
// the server shows it once, in the answer that made it, and this page shows it until closed.

import { api } from "../api.js";
import { copyText, fmtAgo, h, replaceChildren, showingErrors } from "../dom.js";
import { keyedList, lastFolder, lastMachine, machineLabel, machineName,
  rememberMachine } from "./common.js";

const OUTCOME = { started: "started", refused: "refused", filtered: "filtered" };
const DELIVERIES_SHOWN = 8;
const EXAMPLE = "A comment on {{payload.repository.full_name}}#{{payload.issue.number}} by " +
  "{{payload.comment.user.login}}:\n\n{{payload.comment.body}}";

/** The URL GitHub posts to: this server's address and the trigger's own path. */
function hookUrl(spec) {
  return `${location.origin}/hooks/t/${spec.hook_id}`;
}

export class TriggersPage {
  constructor(ctx) {
    this.ctx = ctx;
    this._editing = null; // the trigger id the form changes (null: a new one)
    this._list = h("div", { class: "trigger-list", "data-testid": "triggers" });
    this._shown = h("div", { "data-testid": "trg-secret-box", hidden: true });
    this._form = this._buildForm();
    this._error = h("p", { class: "bad", role: "alert", hidden: true });
    this.el = h("section", { class: "page", "data-testid": "triggers-page" },
      h("header", { class: "panel-head" }, h("h2", {}, "Triggers")),
      h("p", { class: "muted" }, "A webhook that starts a session (or a board task) when an " +
        "event arrives: a comment on an issue, a pull request opened. Paste its URL and " +
        "secret into GitHub (Settings → Webhooks, content type application/json). The " +
        "payload's fields fill the prompt: {{payload.issue.title}}, {{payload.commits[0].id}}; " +
        "their text is anyone's words, so keep the approval policy at suggest unless you " +
        "trust every sender."),
      this._shown, this._form, this._error, this._list);
    document.title = "Triggers · Codey";
    this.render();
  }

  _buildForm() {
    const field = (label, input) => h("label", { class: "field" }, h("span", {}, label), input);
    this._name = h("input", { class: "input", "data-testid": "trg-name", required: true,
      placeholder: "fix on comment" });
    this._worker = h("select", { class: "input", "data-testid": "trg-worker", required: true,
      onchange: () => this._fillFolder() });
    this._workdir = h("input", { class: "input mono", "data-testid": "trg-workdir",
      required: true, placeholder: "/home/you/project",
      oninput: () => { this._workdir.dataset.touched = "1"; } });
    this._events = h("input", { class: "input mono", "data-testid": "trg-events",
      placeholder: "issue_comment, pull_request.opened",
      title: "X-GitHub-Event names, each optionally with .action; empty: every event" });
    this._target = h("select", { class: "input", "data-testid": "trg-target" },
      h("option", { value: "session" }, "Start a session"),
      h("option", { value: "task" }, "Add a board task"));
    this._policy = h("select", { class: "input", "data-testid": "trg-policy" },
      ["suggest", "auto-edit", "full-auto", "reviewer"].map((p) => h("option", { value: p }, p)));
    this._tokens = h("input", { class: "input", type: "number", min: 1, step: 1,
      "data-testid": "trg-budget-tokens", placeholder: "no limit" });
    this._usd = h("input", { class: "input", type: "number", min: 0.01, step: 0.01,
      "data-testid": "trg-budget-usd", placeholder: "no limit" });
    this._rate = h("input", { class: "input", type: "number", min: 1, max: 600, step: 1,
      value: "30", "data-testid": "trg-rate" });
    this._signed = h("input", { type: "checkbox", checked: true, "data-testid": "trg-signed" });
    this._prompt = h("textarea", { class: "input mono", rows: 4, "data-testid": "trg-prompt",
      required: true, placeholder: EXAMPLE });
    this._submit = h("button", { class: "btn primary", type: "submit",
      "data-testid": "trg-save" }, "Add trigger");
    this._cancel = h("button", { class: "btn subtle", type: "button", hidden: true,
      "data-testid": "trg-cancel", onclick: () => this._edit(null) }, "Cancel");
    return h("form", { class: "card trigger-form", "data-testid": "trg-form",
      onsubmit: (ev) => {
        ev.preventDefault();
        this._save();
      } },
    h("div", { class: "grid2" },
      field("Name", this._name), field("Machine", this._worker),
      field("Folder", this._workdir), field("Events (empty: all)", this._events),
      field("Starts", this._target), field("Approval policy", this._policy),
      field("Budget, tokens per session", this._tokens),
      field("Budget, US$ per session", this._usd),
      field("Deliveries per minute at most", this._rate),
      h("label", { class: "field check" }, this._signed,
        h("span", {}, "Signed (X-Hub-Signature-256 with a secret)"))),
    field("Prompt (a template)", this._prompt),
    h("div", { class: "row gap end" }, this._cancel, this._submit));
  }

  _fillFolder() {
    const w = this.ctx.store.state.workers[this._worker.value];
    if (w && !this._workdir.dataset.touched) {
      this._workdir.value = lastFolder(w, this.ctx.store.state);
    }
  }

  _do(fn) {
    return showingErrors(this._error, fn);
  }

  _body(extra = {}) {
    const num = (el) => (el.value.trim() === "" ? null : Number(el.value));
    return { name: this._name.value.trim(), worker_id: this._worker.value,
      workdir: this._workdir.value.trim(), prompt: this._prompt.value,
      events: this._events.value.split(/[\s,]+/).filter(Boolean),
      target: this._target.value, policy: this._policy.value,
      budget_tokens: num(this._tokens) || 0, budget_usd: num(this._usd) || 0,
      per_minute: num(this._rate) || 30, signed: this._signed.checked, ...extra };
  }

  _save() {
    this._do(async () => {
      const body = this._body();
      const saved = this._editing
        ? await api.updateTrigger(this._editing, { ...body,
          enabled: this.ctx.store.state.triggers[this._editing]?.spec.enabled ?? true })
        : await api.createTrigger(body);
      rememberMachine(body.worker_id, body.workdir);
      this._reveal(saved);
      this._edit(null);
    });
  }

  /** The URL and, this once, the secret of a trigger just saved. */
  _reveal(saved) {
    const url = `${location.origin}${saved.url_path}`;
    const copyRow = (label, value, testid) => h("div", { class: "field" },
      h("span", {}, label),
      h("div", { class: "row gap" },
        h("input", { class: "input mono", readonly: true, value, "data-testid": testid }),
        h("button", { class: "btn", type: "button",
          onclick: () => this._do(async () => {
            await copyText(value);
            this.ctx.toast(`${label} copied`, "info");
          }) }, "Copy")));
    replaceChildren(this._shown, h("div", { class: "card trigger-secret" },
      h("h3", { class: "card-title" }, "Paste these into the webhook's settings"),
      copyRow("Payload URL", url, "trg-new-url"),
      saved.secret ? copyRow("Secret", saved.secret, "trg-new-secret") : null,
      saved.secret ? h("p", { class: "small warn" }, "The secret is shown this once: " +
        "copy it now. (New secret makes another.)") : null,
      (saved.warnings || []).map((w) => h("p", { class: "small bad" }, w)),
      h("div", { class: "row end" }, h("button", { class: "btn subtle", type: "button",
        "data-testid": "trg-secret-close",
        onclick: () => { this._shown.hidden = true; replaceChildren(this._shown); } },
      "Done"))));
    this._shown.hidden = false;
  }

  /** Fill the form with a trigger to change it (null: back to adding one). */
  _edit(triggerId) {
    this._editing = triggerId;
    const info = triggerId ? this.ctx.store.state.triggers[triggerId] : null;
    const s = info ? info.spec : null;
    this._name.value = s ? s.name : "";
    this._prompt.value = s ? s.prompt : "";
    this._events.value = s ? s.events.join(", ") : "";
    this._tokens.value = s && s.budget_tokens != null ? String(s.budget_tokens) : "";
    this._usd.value = s && s.budget_usd != null ? String(s.budget_usd) : "";
    this._rate.value = s ? String(s.per_minute) : "30";
    this._signed.checked = s ? s.has_secret : true;
    if (s) {
      this._target.value = s.target;
      this._policy.value = s.policy;
      this._worker.value = s.worker_id;
      this._workdir.value = s.workdir;
      this._workdir.dataset.touched = "1";
    }
    this._submit.textContent = s ? "Save changes" : "Add trigger";
    this._cancel.hidden = !s;
    if (s) this._form.scrollIntoView({ block: "start" });
  }

  render() {
    const state = this.ctx.store.state;
    const workers = Object.values(state.workers).filter((w) => !w.revoked)
      .sort((a, b) => machineName(a).localeCompare(machineName(b)));
    const labels = workers.map((w) => [w.worker_id, machineLabel(state, w)]);
    const sig = JSON.stringify(labels);
    if (this._worker.dataset.sig !== sig) {
      const keep = this._worker.value || lastMachine(workers, this.ctx.store.state);
      this._worker.dataset.sig = sig;
      replaceChildren(this._worker, ...labels.map(([id, label]) => h("option",
        { value: id }, label)));
      if (keep && labels.some(([id]) => id === keep)) this._worker.value = keep;
      this._fillFolder();
    }
    this.renderList();
  }

  renderList() {
    const state = this.ctx.store.state;
    const list = Object.values(state.triggers || {}).sort((a, b) => a.created_at - b.created_at);
    if (!list.length) {
      replaceChildren(this._list, h("p", { class: "muted", "data-testid": "trg-empty" },
        "No trigger yet."));
      return;
    }
    if ([...this._list.children].some((el) => el.dataset.key === undefined)) {
      replaceChildren(this._list); // "No trigger yet."
    }
    keyedList(this._list, list, (info) => info.spec.trigger_id, (info) => {
      const w = state.workers[info.spec.worker_id];
      return JSON.stringify([info, w ? machineLabel(state, w) : ""]);
    }, (info) => this._card(info, state));
  }

  _card(info, state) {
    const s = info.spec;
    const w = state.workers[s.worker_id];
    const url = hookUrl(s);
    const body = () => ({ name: s.name, worker_id: s.worker_id, workdir: s.workdir,
      prompt: s.prompt, policy: s.policy, target: s.target, events: s.events,
      budget_tokens: s.budget_tokens || 0, budget_usd: s.budget_usd || 0,
      per_minute: s.per_minute,
      enabled: s.enabled, signed: s.has_secret });
    const deliveries = info.deliveries.slice(-DELIVERIES_SHOWN).reverse();
    const budget = [s.budget_tokens != null ? `${s.budget_tokens} tokens` : "",
      s.budget_usd != null ? `US$${s.budget_usd}` : ""].filter(Boolean).join(", ");
    return h("article", { class: `card trigger${s.enabled ? "" : " paused"}`,
      "data-testid": "trigger", "data-trigger-id": s.trigger_id },
    h("div", { class: "card-head" },
      h("h3", { class: "card-title" }, s.name),
      h("span", { class: `chip ${s.enabled ? "connected" : ""}`, "data-testid": "trg-state" },
        s.enabled ? "active" : "paused")),
    h("div", { class: "row gap trigger-url" },
      h("code", { class: "mono", "data-testid": "trg-url" }, url),
      h("button", { class: "btn subtle small", type: "button", "data-testid": "trg-copy",
        onclick: () => this._do(async () => {
          await copyText(url);
          this.ctx.toast("URL copied", "info");
        }) }, "Copy URL")),
    h("p", {}, `${s.events.length ? s.events.join(", ") : "every event"} → ` +
      `${s.target === "task" ? "a board task" : `a session (${s.policy})`} on ` +
      `${w ? machineLabel(state, w) : s.worker_id}, in `, h("span", { class: "mono" }, s.workdir),
    budget ? ` · budget ${budget}` : "", s.has_secret ? " · signed" : " · unsigned"),
    h("p", { class: "muted mono small trigger-prompt" }, s.prompt),
    deliveries.length ? h("ul", { class: "mini-list", "data-testid": "trg-deliveries" },
      deliveries.map((d) => h("li", {
        class: d.outcome === "refused" ? "bad" : "", "data-testid": "trg-delivery",
        "data-outcome": d.outcome },
      `${fmtAgo(d.at)} — ${d.event || "(no event)"}: ${OUTCOME[d.outcome] || d.outcome}`,
      d.reason ? ` — ${d.reason}` : "",
      d.replay_of ? " (a replay)" : "",
      d.missing.length ? h("span", { class: "warn" }, ` · missing: ${d.missing.join(", ")}`)
        : "",
      d.session_id ? [" · ", h("a", { href: `#/session/${encodeURIComponent(d.session_id)}` },
        "session")] : "",
      d.task_id ? [" · ", h("a", { href: "#/board" }, "task")] : "",
      d.payload ? [" ", h("button", { class: "btn subtle small", type: "button",
        "data-testid": "trg-replay", title: "Run this payload again (a new delivery)",
        onclick: () => this._do(async () => {
          const out = await api.replayDelivery(s.trigger_id, d.delivery_id);
          this.ctx.toast(`Replayed: ${out.outcome}${out.reason ? ` — ${out.reason}` : ""}`,
            out.outcome === "refused" ? "warn" : "info");
        }) }, "Replay")] : "")))
      : h("p", { class: "muted small" }, "No delivery yet."),
    h("div", { class: "card-foot row gap" },
      h("button", { class: "btn", type: "button", "data-testid": "trg-edit",
        onclick: () => this._edit(s.trigger_id) }, "Edit"),
      h("button", { class: "btn subtle", type: "button", "data-testid": "trg-toggle",
        onclick: () => this._do(() => api.updateTrigger(s.trigger_id,
          { ...body(), enabled: !s.enabled })) }, s.enabled ? "Pause" : "Resume"),
      h("button", { class: "btn subtle", type: "button", "data-testid": "trg-rotate",
        onclick: () => this._do(async () => {
          this._reveal(await api.updateTrigger(s.trigger_id,
            { ...body(), signed: true, rotate_secret: true }));
        }) }, "New secret"),
      h("button", { class: "btn subtle danger", type: "button", "data-testid": "trg-delete",
        onclick: () => this._do(() => api.deleteTrigger(s.trigger_id)) }, "Delete")));
  }

  onChange(change) {
    if (change.kind === "reset" || change.env.event.type.startsWith("trigger_") ||
        change.env.event.type.startsWith("worker_")) {
      this.render();
    }
  }

  destroy() {}
}
