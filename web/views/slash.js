// The slash menu of a session's prompt box: `/` opens a list of the built-ins, the session's
// prompt files (read by its worker in its workdir: GET /api/sessions/{id}/commands) and an ACP
// agent's own commands, filtered as the name is typed. Arrows move, Enter runs (or, for a
// command that takes arguments, completes it), Tab completes, Esc closes; a tap runs too.

import { api } from "../api.js";
import { h, replaceChildren } from "../dom.js";

/** The built-ins: `args` says it takes arguments (Enter completes it instead of running). */
export const BUILTINS = [
  { name: "model", description: "Switch the model (/model <name>, or pick it)",
    argument_hint: "[model]" },
  { name: "compact", description: "Summarize the older conversation now" },
  { name: "goal", description: "Set a goal checked after each turn",
    argument_hint: "<$ command | condition | clear>", args: true },
  { name: "rewind", description: "Go back to an earlier turn" },
  { name: "review", description: "Ask the agent to review the current changes",
    argument_hint: "[focus]" },
  { name: "new", description: "A new session on this machine and folder" },
];

/** How long a session's list of prompt files is kept before it is asked again. */
const FRESH_MS = 15000;

/** The review a `/review` asks for (Codex's /review does the same with its own words). */
export function reviewPrompt(focus) {
  return "Review the current changes in this workdir (git status and git diff, staged and " +
    "not), as a careful reviewer: bugs, missing tests, risky edits, unclear names. List the " +
    "problems by file with the line, most important first; change nothing." +
    (focus ? `\n\nFocus on: ${focus}` : "");
}

/** `/name rest` of a typed text: [name, rest], or null when it is no slash command. */
export function parseSlash(text) {
  const m = /^\/([A-Za-z0-9_.:-]+)(?:\s+([\s\S]*))?$/.exec(text.trim());
  return m ? [m[1], (m[2] || "").trim()] : null;
}

export class SlashMenu {
  /** `input`: the prompt's textarea; `sessionOf()`: the session now; `run(entry, args)`:
   * carries out a chosen entry (a Promise). */
  constructor(ctx, sessionId, input, sessionOf, run) {
    this.ctx = ctx;
    this.sessionId = sessionId;
    this.input = input;
    this.sessionOf = sessionOf;
    this.run = run;
    this.files = null; // the prompt files, once read
    this.warnings = [];
    this.fetchedAt = 0;
    this.loading = null;
    this.error = "";
    this.active = 0;
    this.shown = [];
    this.el = h("div", { class: "slash-menu", role: "listbox", id: "slash-menu",
      "data-testid": "slash-menu", "aria-label": "Slash commands", hidden: true });
    input.setAttribute("aria-controls", "slash-menu");
    input.setAttribute("aria-autocomplete", "list");
    input.addEventListener("input", () => this.update());
    input.addEventListener("blur", () => {
      // a tap on an entry blurs the input first: close only when focus went elsewhere
      setTimeout(() => { if (!this.el.contains(document.activeElement)) this.close(); }, 150);
    });
    // capture: before the prompt box's own Enter (which sends)
    input.addEventListener("keydown", (ev) => this._key(ev), true);
  }

  get open() {
    return !this.el.hidden;
  }

  /** Every entry: built-ins, the agent's own commands, the prompt files. */
  entries() {
    const s = this.sessionOf();
    const out = BUILTINS.map((b) => ({ ...b, source: "built-in" }));
    const taken = new Set(out.map((e) => e.name));
    for (const c of (s && s.agent_commands) || []) {
      if (taken.has(c.name)) continue;
      taken.add(c.name);
      out.push({ name: c.name, description: c.description || "", argument_hint: c.hint || "",
        source: "agent", args: Boolean(c.hint) });
    }
    for (const f of this.files || []) {
      if (taken.has(f.name)) continue;
      taken.add(f.name);
      out.push({ ...f, source: f.scope, args: Boolean(f.argument_hint) });
    }
    return out;
  }

  /** The typed command name, while one is being typed (no space yet); else null. */
  _typed() {
    const m = /^\/([^\s]*)$/.exec(this.input.value);
    return m ? m[1].toLowerCase() : null;
  }

  update() {
    const typed = this._typed();
    if (typed === null) {
      this.close();
      return;
    }
    this._load();
    const all = this.entries();
    const starts = all.filter((e) => e.name.toLowerCase().startsWith(typed));
    const within = all.filter((e) => !e.name.toLowerCase().startsWith(typed) &&
      e.name.toLowerCase().includes(typed));
    this.shown = [...starts, ...within];
    this.active = Math.min(this.active, Math.max(0, this.shown.length - 1));
    this._render();
    this.el.hidden = false;
    this.input.setAttribute("aria-expanded", "true");
  }

  close() {
    this.el.hidden = true;
    this.active = 0;
    this.input.setAttribute("aria-expanded", "false");
    this.input.removeAttribute("aria-activedescendant");
  }

  /** Read the session's prompt files (again after FRESH_MS). */
  _load() {
    if (this.loading || Date.now() - this.fetchedAt < FRESH_MS) return;
    this.loading = api.slashCommands(this.sessionId).then((got) => {
      this.files = got.commands;
      this.warnings = got.warnings;
      this.error = "";
    }, (err) => {
      this.error = err.message;
    }).finally(() => {
      this.fetchedAt = Date.now();
      this.loading = null;
      if (this.open) this.update();
    });
  }

  _render() {
    const rows = this.shown.map((e, i) => h("div", {
      class: `slash-item${i === this.active ? " active" : ""}`, role: "option",
      id: `slash-${i}`, "aria-selected": String(i === this.active),
      "data-testid": "slash-item", "data-name": e.name,
      onpointerdown: (ev) => ev.preventDefault(), // keep the focus in the prompt box
      onclick: () => this._choose(e, false) },
    h("span", { class: "slash-name" }, `/${e.name}`),
    e.argument_hint ? h("span", { class: "slash-hint muted" }, e.argument_hint) : null,
    e.description ? h("span", { class: "slash-desc muted" }, e.description) : null,
    h("span", { class: "slash-source chip" }, e.source)));
    const notes = [];
    if (this.loading && this.files === null) {
      notes.push(h("div", { class: "slash-note muted" }, "Reading the prompt files…"));
    }
    if (this.error) {
      notes.push(h("div", { class: "slash-note warn", "data-testid": "slash-error" },
        `Prompt files not read: ${this.error}`));
    }
    if (this.warnings.length) {
      notes.push(h("div", { class: "slash-note muted", "data-testid": "slash-warnings",
        title: this.warnings.join("\n") },
      `${this.warnings.length} prompt file${this.warnings.length > 1 ? "s" : ""} with a ` +
        "problem (hover or long-press)"));
    }
    if (!rows.length) notes.unshift(h("div", { class: "slash-note muted" }, "No such command"));
    replaceChildren(this.el, ...rows, ...notes);
    if (rows.length) {
      this.input.setAttribute("aria-activedescendant", `slash-${this.active}`);
      rows[this.active].scrollIntoView({ block: "nearest" });
    }
  }

  _key(ev) {
    if (!this.open || ev.isComposing) return;
    const n = this.shown.length;
    if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
      if (!n) return;
      ev.preventDefault();
      this.active = (this.active + (ev.key === "ArrowDown" ? 1 : n - 1)) % n;
      this._render();
    } else if (ev.key === "Escape") {
      ev.preventDefault();
      ev.stopImmediatePropagation();
      this.close();
    } else if ((ev.key === "Enter" && !ev.shiftKey) || ev.key === "Tab") {
      if (!n) return;
      ev.preventDefault();
      ev.stopImmediatePropagation();
      this._choose(this.shown[this.active], ev.key === "Tab");
    }
  }

  /** Complete the entry into the box (`complete`, or it takes arguments), or run it. */
  _choose(entry, complete) {
    this.close();
    if (complete || entry.args) {
      this.input.value = `/${entry.name} `;
      this.input.focus();
      return;
    }
    this.input.value = "";
    this.run(entry, "");
  }

  /** The entry a typed `/name …` names, or null. */
  find(name) {
    return this.entries().find((e) => e.name === name) || null;
  }
}
