// `#/schedules`: prompts run on a machine at set times (cron, in a time zone, or once).
//
// Everything shown is folded from `schedule_*` events (the store), so a run started by the
// server shows up here live, with a link to its session; changes go through /api/schedules.

import { api } from "../api.js";
import { h, replaceChildren, showingErrors } from "../dom.js";
import { FrameBatch, SESSION_WORDS, isBusy, keyedList, lastFolder, lastMachine, machineLabel,
  machineName, rememberMachine } from "./common.js";

const OUTCOME = { started: "ran", failed: "failed", skipped: "skipped" };
// a run's session changing (its commands ending, its status) changes what its card says
const SESSION_EVENTS = new Set(["session_item_appended", "session_item_updated",
  "session_status_changed"]);

/**
 * A run's items: its prompt (`run.item_id`) and what came after it, up to the next prompt,
 * and whether they reach the session's end (then the session's status is the run's). A run
 * recorded before runs named their prompt is its whole session, unless it prompted the
 * schedule's own session (then: null, unknown).
 */
function runItems(session, run, spec) {
  const items = session.items;
  let start = 0;
  if (run.item_id) {
    start = items.findIndex((i) => i.id === run.item_id);
    if (start < 0) return null;
  } else if (spec.target_session === run.session_id) {
    return null;
  }
  let end = items.findIndex((i, n) => n > start && i.kind === "user_message");
  if (end < 0) end = items.length;
  return { items: items.slice(start, end), current: end === items.length };
}

/**
 * What a run did, in words, from its session's items as the store folded them: "ran", "ran —
 * 3 of 3 commands failed", "working", "needs approval", "ran — the session failed: …". The
 * firing's own outcome (`started`) says only that the run began. `bad` when it went wrong.
 */
export function runReport(run, spec, state) {
  if (run.outcome !== "started") {
    return { words: OUTCOME[run.outcome] || run.outcome, bad: run.outcome === "failed" };
  }
  const session = run.session_id ? state.sessions[run.session_id] : null;
  const span = session ? runItems(session, run, spec) : null;
  if (!span) return { words: "ran", bad: false };
  let ran = 0;
  let failed = 0;
  for (const item of span.items) {
    if (item.kind !== "tool_call" || !item.command) continue;
    if (item.status === "done" || item.status === "failed") ran += 1;
    if (item.status === "failed") failed += 1;
  }
  const status = span.current ? session.status : "idle";
  const parts = [isBusy(status) ? SESSION_WORDS[status] : "ran"];
  if (failed) parts.push(`${failed} of ${ran} command${ran === 1 ? "" : "s"} failed`);
  if (status === "error") {
    parts.push(`the session failed${session.status_reason ? `: ${session.status_reason}` : ""}`);
  } else if (status === "interrupted") {
    parts.push("stopped");
  }
  return { words: parts.join(" — "), bad: failed > 0 || status === "error" };
}

/** An hour from now, rounded to the minute, as a datetime-local input wants it. */
function inAnHour() {
  const t = new Date(Date.now() + 3600_000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())}` +
    `T${pad(t.getHours())}:${pad(t.getMinutes())}`;
}

/** `ts` on the clock of `zone`, the schedule's (the zone it was written in). */
function inZone(ts, zone) {
  const d = new Date(ts * 1000);
  const opts = { year: "numeric", month: "short", day: "numeric", hour: "2-digit",
    minute: "2-digit" };
  try {
    return d.toLocaleString([], { ...opts, timeZone: zone });
  } catch {
    return d.toLocaleString([], opts); // a zone this browser does not know
  }
}

export class SchedulesPage {
  constructor(ctx) {
    this.ctx = ctx;
    this._list = h("div", { class: "schedule-list", "data-testid": "schedules" });
    this._form = this._buildForm();
    this._error = h("p", { class: "bad", role: "alert", hidden: true });
    this._batch = new FrameBatch(() => this.renderList());
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
    // once: a wall-clock date and time, read in the time zone below (by the server, which
    // takes `at` as ISO 8601 without an offset in the schedule's zone)
    this._at = h("input", { class: "input", type: "datetime-local", "data-testid": "sch-at",
      value: inAnHour() });
    this._kind = h("select", { class: "input", "data-testid": "sch-kind",
      onchange: () => this._showKind() },
    h("option", { value: "cron" }, "Repeat, on a cron schedule"),
    h("option", { value: "once" }, "Once, at a date and time"));
    this._tz = h("input", { class: "input", "data-testid": "sch-tz",
      value: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC" });
    this._workdir = h("input", { class: "input mono", "data-testid": "sch-workdir",
      required: true, placeholder: "/home/you/project",
      oninput: () => { this._workdir.dataset.touched = "1"; } });
    // the folder last used on the machine picked, until the user types one
    this._worker = h("select", { class: "input", "data-testid": "sch-worker", required: true,
      onchange: () => this._fillFolder() });
    this._prompt = h("textarea", { class: "input", rows: 2, "data-testid": "sch-prompt",
      required: true, placeholder: "Run the test suite and tell me what broke" });
    this._policy = h("select", { class: "input", "data-testid": "sch-policy" },
      ["suggest", "auto-edit", "full-auto", "reviewer"].map((p) => h("option", { value: p }, p)));
    this._cronField = field("Cron (min hour day month weekday)", this._cron);
    this._atField = field("Date and time", this._at);
    const form = h("form", { class: "card schedule-form", "data-testid": "sch-form",
      onsubmit: (ev) => {
        ev.preventDefault();
        this._save();
      } },
    h("div", { class: "grid2" },
      field("Name", this._name), field("When", this._kind), this._cronField, this._atField,
      field("Time zone", this._tz), field("Machine", this._worker),
      field("Folder", this._workdir), field("Approval policy", this._policy)),
    field("Prompt", this._prompt),
    h("div", { class: "row gap end" }, h("button", { class: "btn primary", type: "submit",
      "data-testid": "sch-save" }, "Add schedule")));
    this._showKind();
    return form;
  }

  _fillFolder() {
    const w = this.ctx.store.state.workers[this._worker.value];
    if (w && !this._workdir.dataset.touched) {
      this._workdir.value = lastFolder(w, this.ctx.store.state);
    }
  }

  /** Cron or a date and time: only the chosen one is shown, and required. */
  _showKind() {
    const once = this._kind.value === "once";
    this._cronField.hidden = once;
    this._cron.required = !once;
    this._atField.hidden = !once;
    this._at.required = once;
  }

  _do(fn) {
    return showingErrors(this._error, fn);
  }

  _save() {
    this._do(async () => {
      const once = this._kind.value === "once";
      await api.createSchedule({ name: this._name.value.trim(),
        ...(once ? { at: this._at.value } : { cron: this._cron.value.trim() }),
        timezone: this._tz.value.trim() || "UTC", worker_id: this._worker.value,
        workdir: this._workdir.value.trim(), prompt: this._prompt.value,
        policy: this._policy.value });
      rememberMachine(this._worker.value, this._workdir.value.trim());
      this._name.value = "";
      this._prompt.value = "";
    });
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
    const list = Object.values(state.schedules || {})
      .sort((a, b) => a.created_at - b.created_at);
    if (!list.length) {
      replaceChildren(this._list, h("p", { class: "muted", "data-testid": "sch-empty" },
        "No schedule yet."));
      return;
    }
    if ([...this._list.children].some((el) => el.dataset.key === undefined)) {
      replaceChildren(this._list); // "No schedule yet."
    }
    // a card is rebuilt only when what it shows changed: a run's session streaming output
    // must not replace the buttons under the pointer
    const reports = (info) => info.runs.slice(-5).map((r) => runReport(r, info.spec, state));
    keyedList(this._list, list, (info) => info.spec.schedule_id, (info) => {
      const w = state.workers[info.spec.worker_id];
      return JSON.stringify([info, reports(info), w ? machineLabel(state, w) : ""]);
    }, (info) => this._card(info, state));
  }

  _card(info, state) {
    const s = info.spec;
    const w = state.workers[s.worker_id];
    const when = s.cron ? h("code", {}, s.cron) : `once at ${inZone(s.at, s.timezone)}`;
    // a one-time schedule that has fired is over, paused or not
    const phase = info.done ? "done" : s.enabled ? "active" : "paused";
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
      h("span", { class: `chip ${phase === "active" ? "connected" : ""}`,
        "data-testid": "sch-state" }, phase)),
    h("p", {}, when, ` (${s.timezone}) on ${w ? machineLabel(state, w) : s.worker_id}, in `,
      h("span", { class: "mono" }, s.workdir)),
    h("p", { class: "muted" }, `“${s.prompt}”`),
    runs.length ? h("ul", { class: "mini-list", "data-testid": "sch-runs" }, runs.map((r) => {
      const report = runReport(r, s, state);
      return h("li", report.bad ? { class: "bad" } : {},
        `${inZone(r.due_at, s.timezone)} — ${report.words}`,
        r.skipped ? ` (${r.skipped} missed before)` : "",
        r.session_id ? [" · ", h("a", { href: `#/session/${encodeURIComponent(r.session_id)}` },
          "session")] : "",
        r.error ? h("span", { class: "bad" }, ` — ${r.error}`) : "");
    })) : h("p", { class: "muted small" }, "Not run yet."),
    lastError ? h("p", { class: "bad small", "data-testid": "sch-error" },
      `Last error: ${lastError.error}`) : null,
    h("div", { class: "card-foot row gap" },
      h("button", { class: "btn", type: "button", "data-testid": "sch-run",
        onclick: () => this._do(() => api.runSchedule(s.schedule_id)) }, "Run now"),
      // pausing a one-time schedule that is over would change nothing
      info.done ? null : h("button", { class: "btn subtle", type: "button",
        "data-testid": "sch-toggle",
        onclick: () => this._do(toggle) }, s.enabled ? "Pause" : "Resume"),
      h("button", { class: "btn subtle danger", type: "button", "data-testid": "sch-delete",
        onclick: () => this._do(() => api.deleteSchedule(s.schedule_id)) }, "Delete")));
  }

  onChange(change) {
    if (change.kind === "reset" || change.env.event.type.startsWith("schedule_") ||
        change.env.event.type.startsWith("worker_")) {
      this.render();
    } else if (SESSION_EVENTS.has(change.env.event.type) && this._runsIn(change.env.session_id)) {
      this._batch.schedule(); // a command's output streams: once a frame at most
    }
  }

  /** Whether `sessionId` is the session of a run the cards show. */
  _runsIn(sessionId) {
    return Object.values(this.ctx.store.state.schedules || {}).some((info) =>
      info.runs.slice(-5).some((r) => r.session_id === sessionId));
  }

  destroy() {
    this._batch.cancel();
  }
}
