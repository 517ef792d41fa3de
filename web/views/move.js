// "Move to…" (the session's menu): the session, its files (uncommitted changes included) and
// its conversation go on on another paired machine, in a new folder there. The dialog lists
// the other machines with their online state and their allowed roots, and proposes a folder
// under the chosen one's first root; the move runs on the server (POST /api/sessions/{id}/move)
// and its refusal (a turn under way, an offline machine, a folder outside its roots, a bundle
// too large) is shown as the server words it.

import { api } from "../api.js";
import { h, replaceChildren } from "../dom.js";
import { machineLabel } from "./common.js";

function basename(path) {
  const parts = String(path || "").split("/").filter(Boolean);
  return parts.length ? parts[parts.length - 1] : "session";
}

export class MoveDialog {
  constructor(ctx, sessionId) {
    this.ctx = ctx;
    this.sessionId = sessionId;
    this.busy = false;
    this.error = "";
    this.chosen = null;
    this.folder = "";
    this.folderTouched = false;
    this.el = h("dialog", { class: "dialog move-dialog", "data-testid": "move-dialog",
      "aria-labelledby": "move-title" });
    this.el.addEventListener("close", () => this.el.remove());
    this.el.addEventListener("cancel", (ev) => { if (this.busy) ev.preventDefault(); });
  }

  open() {
    const others = this._others();
    const online = others.find((w) => w.connected);
    this.chosen = (online || others[0] || {}).worker_id || null;
    this._propose();
    document.body.append(this.el);
    this._render();
    this.el.showModal();
  }

  _others() {
    const state = this.ctx.store.state;
    const s = state.sessions[this.sessionId];
    return Object.values(state.workers).filter((w) => !w.revoked && s &&
      w.worker_id !== s.worker_id);
  }

  _propose() {
    if (this.folderTouched) return;
    const state = this.ctx.store.state;
    const s = state.sessions[this.sessionId];
    const w = state.workers[this.chosen];
    const root = w && w.roots && w.roots.length ? w.roots[0].replace(/\/+$/, "") : "";
    this.folder = root && s ? `${root}/${basename(s.workdir)}-moved` : "";
  }

  async _move() {
    this.busy = true;
    this.error = "";
    this._render();
    try {
      const done = await api.moveSession(this.sessionId, this.chosen, this.folder.trim());
      this.busy = false;
      this.el.close();
      this.ctx.toast(`Moved: ${done.files} files, now in ${done.workdir}`, "ok");
    } catch (err) {
      this.busy = false;
      this.error = err.message;
      this._render();
    }
  }

  _render() {
    const state = this.ctx.store.state;
    const s = state.sessions[this.sessionId];
    const others = this._others();
    const from = s && state.workers[s.worker_id];
    const rows = others.map((w) => {
      const id = `move-to-${w.worker_id}`;
      const radio = h("input", { type: "radio", name: "move-target", id, value: w.worker_id,
        checked: w.worker_id === this.chosen, disabled: this.busy,
        "data-testid": `move-target-${w.worker_id}`,
        onchange: () => { this.chosen = w.worker_id; this._propose(); this._render(); } });
      return h("li", { class: "move-target" }, radio,
        h("label", { for: id, class: "col" },
          h("span", { class: "row gap" }, h("strong", {}, machineLabel(state, w)),
            h("span", { class: `badge ${w.connected ? "ok" : "muted"}`,
              "data-testid": "move-target-state" }, w.connected ? "online" : "offline")),
          h("span", { class: "muted small mono" },
            (w.roots || []).length ? `folders: ${w.roots.join(", ")}` : "")));
    });
    const folder = h("input", { id: "move-folder", class: "input mono", value: this.folder,
      "data-testid": "move-folder", disabled: this.busy, spellcheck: "false",
      placeholder: "/home/me/projects/app", oninput: () => {
        this.folder = folder.value;
        this.folderTouched = true;
        submit.disabled = !this.folder.trim() || !this.chosen;
      } });
    const submit = h("button", { class: "btn primary", type: "submit", "data-testid": "move-submit",
      disabled: this.busy || !this.chosen || !this.folder.trim() }, this.busy ? "Moving…"
      : "Move");
    const form = h("form", { class: "form", onsubmit: (ev) => {
      ev.preventDefault();
      if (!this.busy) this._move();
    } },
    h("h2", { id: "move-title" }, "Move this session to another machine"),
    h("p", { class: "small" }, "Its running processes on ",
      h("strong", {}, from ? machineLabel(state, from) : "this machine"),
      " are stopped, its files — uncommitted changes included — are carried over to a new " +
      "folder there, and the conversation goes on there. The files here stay as they are."),
    others.length ? h("ul", { class: "plain move-targets", "data-testid": "move-targets" }, rows)
      : h("p", { class: "muted", "data-testid": "move-none" },
        "No other machine is paired: link one first."),
    h("label", { for: "move-folder" }, "Folder on that machine (new or empty)"), folder,
    this.busy ? h("p", { class: "muted", role: "status", "data-testid": "move-progress" },
      "Bundling the work, carrying it over and unpacking it…") : null,
    this.error ? h("p", { class: "bad", role: "alert", "data-testid": "move-error" }, this.error)
      : null,
    h("div", { class: "row gap end" },
      h("button", { class: "btn", type: "button", "data-testid": "move-cancel",
        disabled: this.busy, onclick: () => this.el.close() }, "Cancel"), submit));
    replaceChildren(this.el, form);
  }
}
