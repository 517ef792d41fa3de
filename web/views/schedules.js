// `#/schedules`: prompts run on a machine at set times (cron, in a time zone, or once).
//
// Everything shown is folded from `schedule_*` events (the store), so a run started by the
// server shows up here live, with a link to its session; changes go through /api/schedules.

import { api } from "../api.js";
import { fmtTime, h, replaceChildren, showingErrors } from "../dom.js";

const OUTCOME = { started: "ran", failed: "failed", skipped: "skipped" };

export class SchedulesPage {
  constructor(ctx) {
    this.ctx = ctx;
    this._list = h("div", { class: "schedule-list", "data-testid": "schedules" });
    this._form = this._buildForm();
    this._error = h("p", { class: "bad", role: "alert", hidden: true });
    this.el = h("section", { class: "page", "data-testid": "schedules-page" },
      h("header", { class: "panel-head" }, h("h2", {}, "Schedules")),
      h("p", { class: "muted" }, "A prompt that runs by itself on a machine: every night, " +
        "every hour, or once. Each run is a session of its own (or a prompt to one session)."),
      this._form, this._error, this._list);
    document.title = "Schedules · Codey";
    this.render();
  }

  _buildForm() {
    const field = (label, input) => h("label", { class: "field" }, h("span", {}, label), input);
    this._name = h("input", { class: "input", "data-testid": "sch-name", required: true,
      placeholder: "nightly tests" });
    this._cron = h("input", { class: "input mono", "data-testid": "sch-cron", required: true,
      value: "0 3 * * *", title: "minute hour day month weekday" });
    this._tz = h("input", { class: "input", "data-testid": "sch-tz",
      value: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC" });
    this._worker = h("select", { class: "input", "data-testid": "sch-worker", required: true });
    this._workdir = h("input", { class: "input mono", "data-testid": "sch-workdir",
      required: true, placeholder: "/home/you/project" });
    this._prompt = h("textarea", { class: "input", rows: 2, "data-testid": "sch-prompt",
      required: true, placeholder: "Run the test suite and tell me what broke" });
    this._policy = h("select", { class: "input", "data-testid": "sch-policy" },
      ["suggest", "auto-edit", "full-auto"].map((p) => h("option", { value: p }, p)));
    return h("form", { class: "card schedule-form", "data-testid": "sch-form",
      onsubmit: (ev) => {
        ev.preventDefault();
        this._save();
      } },
    h("div", { class: "grid2" },
      field("Name", this._name), field("Cron (min hour day month weekday)", this._cron),
      field("Time zone", this._tz), field("Machine", this._worker),
      field("Folder", this._workdir), field("Approval policy", this._policy)),
    field("Prompt", this._prompt),
    h("div", { class: "row gap end" }, h("button", { class: "btn primary", type: "submit",
      "data-testid": "sch-save" }, "Add schedule")));
  }

  _do(fn) {
    return showingErrors(this._error, fn);
  }

  _save() {
    this._do(async () => {
      await api.createSchedule({ name: this._name.value.trim(), cron: this._cron.value.trim(),
        timezone: this._tz.value.trim() || "UTC", worker_id: this._worker.value,
        workdir: this._workdir.value.trim(), prompt: this._prompt.value,
        policy: this._policy.value });
      this._name.value = "";
      this._prompt.value = "";
    });
  }

  render() {
    const state = this.ctx.store.state;
    const workers = Object.values(state.workers).filter((w) => !w.revoked);
    const sig = JSON.stringify(workers.map((w) => w.worker_id));
    if (this._worker.dataset.sig !== sig) {
      const keep = this._worker.value;
      this._worker.dataset.sig = sig;
      replaceChildren(this._worker, ...workers.map((w) => h("option",
        { value: w.worker_id }, w.hostname)));
      if (keep) this._worker.value = keep;
    }
    const list = Object.values(state.schedules || {})
      .sort((a, b) => a.created_at - b.created_at);
    if (!list.length) {
      replaceChildren(this._list, h("p", { class: "muted", "data-testid": "sch-empty" },
        "No schedule yet."));
      return;
    }
    replaceChildren(this._list, ...list.map((info) => this._card(info, state)));
  }

  _card(info, state) {
    const s = info.spec;
    const w = state.workers[s.worker_id];
    const when = s.cron ? h("code", {}, s.cron) : `once at ${fmtTime(s.at)}`;
    const runs = info.runs.slice(-5).reverse();
    const lastError = [...info.runs].reverse().find((r) => r.outcome === "failed");
    const toggle = () => api.updateSchedule(s.schedule_id, { name: s.name, cron: s.cron,
      at: s.at, timezone: s.timezone, worker_id: s.worker_id, workdir: s.workdir,
      prompt: s.prompt, policy: s.policy, target_session: s.target_session,
      enabled: !s.enabled });
    return h("article", { class: `card schedule${s.enabled ? "" : " paused"}`,
      "data-testid": "schedule", "data-schedule-id": s.schedule_id },
    h("div", { class: "card-head" },
      h("h3", { class: "card-title" }, s.name),
      h("span", { class: `chip ${s.enabled ? "connected" : ""}`, "data-testid": "sch-state" },
        s.enabled ? "active" : "paused")),
    h("p", {}, when, ` (${s.timezone}) on ${w ? w.hostname : s.worker_id}, in `,
      h("span", { class: "mono" }, s.workdir)),
    h("p", { class: "muted" }, `“${s.prompt}”`),
    runs.length ? h("ul", { class: "mini-list", "data-testid": "sch-runs" }, runs.map((r) =>
      h("li", {}, `${fmtTime(r.due_at)} — ${OUTCOME[r.outcome] || r.outcome}`,
        r.skipped ? ` (${r.skipped} missed before)` : "",
        r.session_id ? [" · ", h("a", { href: `#/session/${encodeURIComponent(r.session_id)}` },
          "session")] : "",
        r.error ? h("span", { class: "bad" }, ` — ${r.error}`) : "")))
      : h("p", { class: "muted small" }, "Not run yet."),
    lastError ? h("p", { class: "bad small", "data-testid": "sch-error" },
      `Last error: ${lastError.error}`) : null,
    h("div", { class: "card-foot row gap" },
      h("button", { class: "btn", type: "button", "data-testid": "sch-run",
        onclick: () => this._do(() => api.runSchedule(s.schedule_id)) }, "Run now"),
      h("button", { class: "btn subtle", type: "button", "data-testid": "sch-toggle",
        onclick: () => this._do(toggle) }, s.enabled ? "Pause" : "Resume"),
      h("button", { class: "btn subtle danger", type: "button", "data-testid": "sch-delete",
        onclick: () => this._do(() => api.deleteSchedule(s.schedule_id)) }, "Delete")));
  }

  onChange(change) {
    if (change.kind === "reset" || change.env.event.type.startsWith("schedule_") ||
        change.env.event.type.startsWith("worker_")) this.render();
  }
}
