// `#/board`: the task board. Four columns; drag a card to move or reorder it (or use its
// ◀ ▶ ▲ ▼ buttons, which keep the keyboard's focus); "Run" starts a session on the task,
// after which the card follows its session (working → in progress, done → review).
//
// Everything is folded from `task_*` events (the store): every tab shows the same board live.

import { api } from "../api.js";
import { h, replaceChildren, showingErrors } from "../dom.js";
import {
  lastFolder, lastMachine, machineLabel, rememberMachine, SESSION_WORDS,
} from "./common.js";

const COLUMNS = [
  ["todo", "To do"], ["in_progress", "In progress"], ["review", "Review"], ["done", "Done"],
];

export class BoardPage {
  constructor(ctx) {
    this.ctx = ctx;
    this._cols = {};
    this._running = null; // the task whose Run form is open
    this._focus = null; // [task id, button test id] to focus again after a re-render
    this._title = h("input", { class: "input", "data-testid": "task-title", required: true,
      placeholder: "What needs doing" });
    this._desc = h("textarea", { class: "input", rows: 1, "data-testid": "task-desc",
      placeholder: "Details for whoever (or whatever) does it" });
    this._error = h("p", { class: "bad", role: "alert", hidden: true });
    const form = h("form", { class: "row gap board-new", onsubmit: (ev) => {
      ev.preventDefault();
      this._do(async () => {
        await api.createTask({ title: this._title.value.trim(), description: this._desc.value });
        this._title.value = "";
        this._desc.value = "";
      });
    } },
    h("label", { class: "offscreen", for: "task-title" }, "New task"), this._title,
    this._desc, h("button", { class: "btn primary", type: "submit",
      "data-testid": "task-add" }, "Add task"));
    this._board = h("div", { class: "board", "data-testid": "board" },
      COLUMNS.map(([status, label]) => {
        const list = h("ol", { class: "board-list", "data-status": status });
        this._cols[status] = list;
        const col = h("section", { class: "board-col", "data-testid": `column-${status}`,
          "aria-label": label }, h("h3", {}, label), list);
        col.addEventListener("dragover", (ev) => ev.preventDefault());
        col.addEventListener("drop", (ev) => {
          ev.preventDefault();
          const id = ev.dataTransfer.getData("text/plain");
          const target = ev.target.closest("[data-task-id]");
          const before = target && target.dataset.taskId !== id ? target.dataset.taskId : null;
          if (id) this._move(id, status, before);
        });
        return col;
      }));
    this.el = h("section", { class: "page", "data-testid": "board-page" },
      h("header", { class: "panel-head" }, h("h2", {}, "Board")), form, this._error,
      this._board);
    document.title = "Board · Codey";
    this.render();
  }

  _do(fn) {
    return showingErrors(this._error, fn);
  }

  _move(id, status, before) {
    this._do(() => api.moveTask(id, status, before));
  }

  _sorted(status) {
    return Object.values(this.ctx.store.state.tasks || {})
      .filter((t) => t.status === status).sort((a, b) => a.order - b.order);
  }

  render() {
    const state = this.ctx.store.state;
    for (const [status] of COLUMNS) {
      const tasks = this._sorted(status);
      replaceChildren(this._cols[status], ...(tasks.length ? tasks.map((t, i) =>
        this._card(t, status, tasks, i, state)) : [h("li", { class: "muted small empty" },
        "Nothing here")]));
    }
    if (this._focus) {
      const [id, testid] = this._focus;
      const card = this._board.querySelector(`[data-task-id="${id}"]`);
      const el = card && card.querySelector(`[data-testid="${testid}"]`);
      // the same button again (a second press moves it once more); the card when that
      // button no longer applies (at the top, in the last column)
      if (el && !el.disabled) el.focus();
      else if (card) card.focus();
      this._focus = null;
    }
  }

  _card(t, status, column, index, state) {
    const at = COLUMNS.findIndex(([s]) => s === status);
    const btn = (label, testid, title, onclick, disabled = false) => h("button", {
      class: "btn icon small", type: "button", "data-testid": testid, title, "aria-label": title,
      disabled, onclick: () => {
        this._focus = [t.task_id, testid];
        onclick();
      } }, label);
    const deps = t.depends_on.map((d) => state.tasks[d]).filter(Boolean);
    const last = t.session_ids.length ? state.sessions[t.session_ids.at(-1)] : null;
    const card = h("li", { class: "card task-card", draggable: "true", "data-testid": "task",
      tabindex: "-1",
      "data-task-id": t.task_id, "data-status": status },
    h("div", { class: "card-head" }, h("strong", { class: "card-title" }, t.title)),
    t.description ? h("p", { class: "muted small" }, t.description) : null,
    deps.length ? h("p", { class: "small" }, "after ", deps.map((d, i) => [i ? ", " : "",
      h("span", { class: d.status === "done" ? "good" : "warn" }, d.title)])) : null,
    last ? h("p", { class: "small" }, h("a", { href: `#/session/${encodeURIComponent(
      last.session_id)}`, "data-testid": "task-session" }, "session"),
    ` · ${SESSION_WORDS[last.status] || last.status}`,
    last.worktree && last.worktree.status === "ready" ? h("span", { class: "diffstat",
      "data-testid": "task-diffstat", title: `its worktree's change (${last.worktree.branch})` },
    ` · ${last.worktree.files} file${last.worktree.files === 1 ? "" : "s"} `,
    h("span", { class: "d-add" }, `+${last.worktree.added}`), " ",
    h("span", { class: "d-del" }, `−${last.worktree.deleted}`)) : null) : null,
    h("div", { class: "row gap task-actions" },
      btn("◀", "task-left", "Move to the previous column",
        () => this._move(t.task_id, COLUMNS[at - 1][0], null), at === 0),
      btn("▶", "task-right", "Move to the next column",
        () => this._move(t.task_id, COLUMNS[at + 1][0], null), at === COLUMNS.length - 1),
      btn("▲", "task-up", "Move up", () => this._move(t.task_id, status,
        column[index - 1].task_id), index === 0),
      btn("▼", "task-down", "Move down", () => this._move(t.task_id, status,
        index + 2 < column.length ? column[index + 2].task_id : null),
      index === column.length - 1),
      status !== "done" ? h("button", { class: "btn small", type: "button",
        "data-testid": "task-run", onclick: () => {
          this._running = this._running === t.task_id ? null : t.task_id;
          this.render();
        } }, "Run") : null,
      h("button", { class: "btn subtle small danger", type: "button",
        "data-testid": "task-delete", onclick: () => this._do(() => api.deleteTask(t.task_id)) },
      "Delete")),
    this._running === t.task_id ? this._runForm(t, state) : null);
    card.addEventListener("dragstart", (ev) => {
      ev.dataTransfer.setData("text/plain", t.task_id);
      ev.dataTransfer.effectAllowed = "move";
    });
    return card;
  }

  _runForm(t, state) {
    const workers = Object.values(state.workers).filter((w) => !w.revoked && w.connected);
    const folder = h("input", { class: "input mono", "data-testid": "run-workdir",
      required: true, placeholder: "/home/you/project", "aria-label": "Folder",
      oninput: () => { folder.dataset.touched = "1"; } });
    // the machine and folder last used, until the user picks others
    const machine = h("select", { class: "input", "data-testid": "run-worker",
      "aria-label": "Machine", onchange: () => {
        if (!folder.dataset.touched) {
          folder.value = lastFolder(state.workers[machine.value], state);
        }
      } },
    workers.map((w) => h("option", { value: w.worker_id }, machineLabel(state, w))));
    machine.value = lastMachine(workers, state) || (workers[0] ? workers[0].worker_id : "");
    folder.value = lastFolder(state.workers[machine.value], state);
    const policy = h("select", { class: "input", "data-testid": "run-policy" },
      ["suggest", "auto-edit", "full-auto", "reviewer"].map((p) => h("option", { value: p }, p)));
    // each attempt in a worktree of its own, by default: attempts run side by side
    const worktree = h("input", { type: "checkbox", checked: true, "data-testid": "run-worktree" });
    return h("form", { class: "run-form", "data-testid": "run-form", onsubmit: (ev) => {
      ev.preventDefault();
      this._do(async () => {
        await api.runTask(t.task_id, { worker_id: machine.value,
          workdir: folder.value.trim(), policy: policy.value, worktree: worktree.checked });
        rememberMachine(machine.value, folder.value.trim());
        this._running = null;
        this.render();
      });
    } },
    workers.length ? [machine, folder, policy, h("label", { class: "check small",
      title: "A git worktree of its own, on a new branch (without git: in the folder)" },
    worktree, " worktree"), h("button", { class: "btn primary small",
      type: "submit", "data-testid": "run-start" }, "Start")]
      : h("p", { class: "muted small" }, "No machine is connected."));
  }

  onChange(change) {
    if (change.kind === "reset") return this.render();
    const type = change.env.event.type;
    if (type.startsWith("task_") || type === "session_status_changed" ||
        type === "worktree_updated" ||
        type.startsWith("worker_")) {
      if (this._running && this.el.contains(document.activeElement) &&
          document.activeElement.closest("[data-testid=run-form]")) return; // typing
      this.render();
    }
  }
}
