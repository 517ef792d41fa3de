// The rewind dialog (issue 38 §2): back to just before one prompt of the session — its files
// and conversation, its files only, or its conversation only, as Claude Code's /rewind.
//
// The files that will change come from the checkpoints' preview (GET …/checkpoints/{turn}/
// preview), each with its diff; a file changed by hand since the checkpoint is named and left
// unticked (kept). Without file checkpoints on the server (the route answers 404) only the
// conversation can be rewound, and the dialog says so. A refusal (a turn runs, the checkpoint's
// commit is gone…) is shown in the dialog, which stays open. After a conversation rewind the
// prompt's text goes back in the prompt box (`codey:prompt-text` on window, for the session
// view), so it can be edited and sent again.

import { ApiError, api } from "../api.js";
import { renderDiff } from "../diff.js";
import { h, replaceChildren } from "../dom.js";
import { turnIndex } from "../store.js";
import { renderItem } from "./items.js";

const MODES = [
  ["both", "Files and conversation", "Put the files back as they were before this prompt, and " +
    "take the conversation back to it"],
  ["files", "Files only", "Put the files back; the conversation goes on as it is"],
  ["conversation", "Conversation only", "Take the conversation back to this prompt; the files " +
    "stay as they are"],
];

/** The live prompts of `s` (newest first): what a rewind can go back to. */
export function livePrompts(s) {
  return s.items.filter((i) => i.kind === "user_message" && !i.queued).reverse();
}

function short(text, n = 80) {
  const line = (text || "").split("\n").find((l) => l.trim()) || "(no text)";
  return line.length > n ? `${line.slice(0, n - 1)}…` : line;
}

/** The text of a diff answer of whatever shape the checkpoints give (text, a list of files,
 * or path → diff). */
function diffText(answer) {
  if (typeof answer === "string") return answer;
  if (!answer || typeof answer !== "object") return "";
  const files = Array.isArray(answer) ? answer : answer.files;
  if (Array.isArray(files)) return files.map((f) => f.diff || "").join("\n");
  if (typeof answer.diff === "string") return answer.diff;
  return Object.values(answer).filter((v) => typeof v === "string").join("\n");
}

export class RewindDialog {
  constructor(ctx, sessionId, turn) {
    this.ctx = ctx;
    this.sessionId = sessionId;
    this.turn = turn;
    this.mode = "both";
    this.preview = null; // the checkpoints' preview of this turn (null: none)
    this.filesOk = false; // whether the files of this turn can be rewound
    this.ticked = new Map(); // path → put back (unticked: kept as it is)
    this.el = h("dialog", { class: "dialog wide rewind-dialog", "data-testid": "rewind-dialog",
      "aria-labelledby": "rewind-title" });
    this.el.addEventListener("close", () => this.el.remove());
    this._refusal = h("p", { class: "rewind-refusal", role: "alert",
      "data-testid": "rewind-refusal", hidden: true });
    this._files = h("div", { class: "rewind-files", "data-testid": "rewind-files" });
    this._modes = h("fieldset", { class: "rewind-modes" });
    this._confirm = h("button", { class: "btn primary", type: "button",
      "data-testid": "rewind-confirm", onclick: () => this._rewind() }, "Rewind");
  }

  get session() {
    return this.ctx.store.state.sessions[this.sessionId] || null;
  }

  async open() {
    const s = this.session;
    if (!s) return;
    document.body.append(this.el);
    const picker = h("select", { class: "input", id: "rewind-turn", "data-testid": "rewind-turn",
      onchange: (ev) => {
        this.turn = ev.target.value;
        this._load();
      } }, livePrompts(s).map((i) => h("option", { value: i.id, selected: i.id === this.turn },
      short(i.text))));
    replaceChildren(this.el, h("div", { class: "form" },
      h("div", { class: "row gap" },
        h("h2", { id: "rewind-title" }, "Rewind"),
        h("span", { class: "grow" }),
        h("button", { class: "btn", type: "button", "data-testid": "rewind-cancel",
          onclick: () => this.el.close() }, "Cancel")),
      h("div", { class: "field" },
        h("label", { for: "rewind-turn" }, "Back to just before the prompt"), picker),
      this._modes, this._files, this._refusal,
      h("div", { class: "row gap rewind-actions" }, h("span", { class: "grow" }), this._confirm)));
    this.el.showModal();
    await this._load();
  }

  _renderModes() {
    replaceChildren(this._modes, h("legend", {}, "What to rewind"),
      MODES.map(([value, label, hint]) => {
        const off = value !== "conversation" && !this.filesOk;
        return h("label", { class: `rewind-mode${off ? " off" : ""}` },
          h("input", { type: "radio", name: "rewind-mode", value,
            "data-testid": `rewind-mode-${value}`, checked: this.mode === value, disabled: off,
            onchange: () => {
              this.mode = value;
              this._renderFiles();
            } }),
          h("span", {}, h("strong", {}, label), h("span", { class: "muted small" }, ` — ${hint}`)));
      }));
  }

  async _load() {
    this._refusal.hidden = true;
    this._files.replaceChildren(h("p", { class: "muted small" }, "Asking the machine…"));
    this.preview = null;
    this.filesOk = false;
    try {
      this.preview = await api.rewindPreview(this.sessionId, this.turn);
      this.filesOk = !this.preview.refused;
    } catch (err) {
      this.preview = err instanceof ApiError && err.status === 404 ? "unavailable"
        : { refused: err.message, files: [], hand_edited: [] };
    }
    if (!this.filesOk && this.mode !== "conversation") this.mode = "conversation";
    const p = this.preview;
    this.ticked = new Map();
    if (this.filesOk) {
      const hand = new Set(p.hand_edited || []);
      for (const f of p.files || []) this.ticked.set(f.path, !hand.has(f.path));
    }
    this._renderModes();
    this._renderFiles();
  }

  _renderFiles() {
    const p = this.preview;
    if (p === "unavailable") {
      replaceChildren(this._files, h("p", { class: "muted small", "data-testid":
        "rewind-no-checkpoints" }, "File checkpoints unavailable: only the conversation can be " +
        "rewound."));
      return;
    }
    if (!p) return;
    if (p.refused) {
      replaceChildren(this._files, h("p", { class: "small rewind-files-refused",
        "data-testid": "rewind-files-refused" }, `Files cannot be rewound: ${p.refused}`));
      return;
    }
    if (this.mode === "conversation") {
      replaceChildren(this._files, h("p", { class: "muted small" },
        "The files stay as they are."));
      return;
    }
    const files = p.files || [];
    if (!files.length) {
      replaceChildren(this._files, h("p", { class: "muted small", "data-testid":
        "rewind-no-change" }, "No file changed since this prompt."));
      return;
    }
    const hand = new Set(p.hand_edited || []);
    replaceChildren(this._files,
      h("p", { class: "small" }, `${files.length} file${files.length === 1 ? "" : "s"} will ` +
        "change (untick one to keep it as it is):"),
      h("ul", { class: "rewind-file-list" }, files.map((f) => h("li", {
        class: "rewind-file", "data-testid": "rewind-file", "data-path": f.path },
      h("label", { class: "row gap" },
        h("input", { type: "checkbox", "data-testid": "rewind-file-tick",
          checked: this.ticked.get(f.path) !== false,
          onchange: (ev) => this.ticked.set(f.path, ev.target.checked) }),
        h("span", { class: "mono grow rewind-path" }, f.path),
        h("span", { class: `chip status-${f.status || "modified"}` }, f.status || "modified"),
        hand.has(f.path) ? h("span", { class: "chip hand-edited", "data-testid": "hand-edited",
          title: "Changed by hand since the checkpoint: kept unless you tick it" },
        "edited by hand") : null),
      h("div", { class: "row gap" },
        h("button", { class: "btn small subtle", type: "button",
          "data-testid": "rewind-restore-file", onclick: (ev) => this._restoreFile(ev, f.path) },
        "Restore this file only")),
      f.diff ? renderDiff(f.diff) : null)),
      this._turnDiff()));
  }

  /** "Diff between two turns": any two prompts of the live conversation. */
  _turnDiff() {
    const s = this.session;
    const prompts = s ? livePrompts(s) : [];
    if (prompts.length < 2) return null;
    const choice = (id, selected) => h("select", { class: "input compact", id,
      "data-testid": id }, prompts.map((i) => h("option", { value: i.id,
      selected: i.id === selected }, short(i.text, 40))));
    const from = choice("rewind-diff-from", prompts[prompts.length - 1].id);
    const to = choice("rewind-diff-to", prompts[0].id);
    const out = h("div", { "data-testid": "rewind-turn-diff" });
    return h("details", { class: "rewind-between" }, h("summary", {}, "Diff between two turns"),
      h("div", { class: "row gap wrap" }, from, h("span", {}, "→"), to,
        h("button", { class: "btn small", type: "button", onclick: async () => {
          try {
            replaceChildren(out, renderDiff(diffText(
              await api.turnDiff(this.sessionId, from.value, to.value))));
          } catch (err) {
            replaceChildren(out, h("p", { class: "small" }, `No diff: ${err.message}`));
          }
        } }, "Show diff")), out);
  }

  async _restoreFile(ev, path) {
    const button = ev.currentTarget;
    button.disabled = true;
    try {
      await api.restoreFile(this.sessionId, this.turn, path);
      this.ctx.toast(`${path} restored`);
      await this._load();
    } catch (err) {
      this._refuse(err.message);
      button.disabled = false;
    }
  }

  _refuse(message) {
    this._refusal.textContent = `Not rewound: ${message}`;
    this._refusal.hidden = false;
  }

  async _rewind() {
    const s = this.session;
    const prompt = s && s.items[turnIndex(s, this.turn)];
    const keep = [...this.ticked].filter(([, on]) => !on).map(([path]) => path);
    this._confirm.disabled = true;
    this._refusal.hidden = true;
    try {
      await api.rewind(this.sessionId, { turn: this.turn, mode: this.mode, keep });
    } catch (err) {
      this._refuse(err.message);
      this._confirm.disabled = false;
      return;
    }
    this.el.close();
    if (this.mode !== "files" && prompt) {
      window.dispatchEvent(new CustomEvent("codey:prompt-text", {
        detail: { sessionId: this.sessionId, text: prompt.text } }));
    }
    this.ctx.toast(this.mode === "files" ? "Files rewound" : "Rewound");
  }
}

/** Open the rewind dialog of `sessionId` at the prompt `turn` (its newest live prompt when
 * none is given, as `/rewind` does). */
export function openRewind(ctx, sessionId, turn = null) {
  const s = ctx.store.state.sessions[sessionId];
  const prompts = s ? livePrompts(s) : [];
  if (!prompts.length) {
    ctx.toast("Nothing to rewind yet: the session has no prompt", "error");
    return null;
  }
  const dialog = new RewindDialog(ctx, sessionId, turn || prompts[0].id);
  dialog.open();
  return dialog;
}

/** A branch a rewind took back, folded under a "rewound" marker where it stood; its items are
 * built when it is opened (they are history, not the live conversation: no actions of theirs
 * can be taken, and the transcript's tests and searches see the live items only until then). */
export function rewoundBranch(branch, ctx, session) {
  const prompts = branch.items.filter((i) => i.kind === "user_message");
  const body = h("div", { class: "rewound-items" });
  const node = h("details", { class: "item rewound-branch", "data-testid": "rewound-branch",
    "data-turn": branch.turn },
  h("summary", { class: "rewound-summary" }, `↺ Rewound: ${prompts.length} prompt` +
    `${prompts.length === 1 ? "" : "s"} from “${short(prompts.length ? prompts[0].text : "",
      60)}” (${branch.mode === "conversation" ? "conversation" : branch.mode === "files"
      ? "files" : "files and conversation"})`), body);
  node.addEventListener("toggle", () => {
    if (!node.open || body.childElementCount) return;
    for (const item of branch.items) {
      const built = renderItem(item, ctx, session);
      // history: what was done there cannot be acted on from here
      for (const b of built.querySelectorAll("button")) b.remove();
      body.append(built);
    }
  });
  return node;
}
