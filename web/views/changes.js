// The Changes view of a session in a worktree: everything it changed against its base
// (committed and not, per file with +/− or a binary's sizes, from GET
// /api/sessions/{id}/changes), comments on a line or a file sent to the agent as one
// follow-up prompt, and shipping it: commit the ticked files (a message the model drafts, the
// user edits; generated files and binaries unticked until the user says), merge into the base
// (fast-forward, or rebase then fast-forward; a conflict can go to the agent), push and open
// a pull request, remove.
//
// Every operation is the worker's own git action, on the user's word; each shows in the
// session as a `git_op` item, so the transcript says what was done.

import { api } from "../api.js";
import { fmtBytes, h, replaceChildren } from "../dom.js";
import { countChanges, lineClass, splitDiff } from "../diff.js";

// What tools make and no one writes: left out of a commit unless ticked. git lists them only
// when the project's .gitignore does not name them, and committed they conflict in every
// parallel worktree (issue 33: a test run's __pycache__ went in under "Fix add()").
const GENERATED = [
  [/(^|\/)__pycache__\//, "a Python bytecode cache"],
  [/\.py[cod]$/, "Python bytecode"],
  [/(^|\/)\.(pytest_cache|mypy_cache|ruff_cache|hypothesis|tox|nox)\//, "a tool's cache"],
  [/(^|\/)node_modules\//, "installed packages"],
  [/(^|\/)\.?venv\//, "a virtual environment"],
  [/(^|\/)[^/]+\.egg-info\//, "package metadata a build made"],
  [/(^|\/)(dist|build|out)\//, "build output"],
  [/(^|\/)target\/(debug|release)\//, "build output"],
  [/(^|\/)\.(next|nuxt|parcel-cache|turbo|cache|gradle)\//, "a build cache"],
  [/\.(o|obj|a|so|dylib|dll|exe|class|lib|wasm)$/, "compiled output"],
  [/(^|\/)(\.coverage|coverage\.xml)$|(^|\/)(htmlcov|coverage)\//, "coverage data"],
  [/(^|\/)\.DS_Store$|(^|\/)Thumbs\.db$/, "a file manager's metadata"],
];

/** Whether a changed file is ticked for the next commit by default, and why not:
 * `{ticked, note}`. Generated files and binaries are left out until the user ticks them. */
export function commitChoice(f) {
  const hit = GENERATED.find(([re]) => re.test(f.path));
  if (hit) {
    return { ticked: false, kind: "generated",
      note: `Generated: ${hit[1]}. Left out of the commit unless you tick it; better, ` +
        "add it to .gitignore." };
  }
  if (f.binary) {
    return { ticked: false, kind: "binary",
      note: "A binary file: left out of the commit unless you tick it." };
  }
  return { ticked: true, kind: "", note: "" };
}

/** Whether a commit can take the file: it has changes not committed yet. */
export function pickable(f) {
  return Boolean(f.uncommitted);
}

/** The paths a commit of the ticked files sends (a rename's old path too, so its deletion
 * goes with it). `ticked`: path → boolean. */
export function commitPaths(files, ticked) {
  const out = [];
  for (const f of files) {
    if (!pickable(f) || !ticked.get(f.path)) continue;
    out.push(f.path);
    if (f.old_path) out.push(f.old_path);
  }
  return [...new Set(out)];
}

/** A binary file's change in size, in words: "new, 1.2 KiB", "1.0 KiB → 1.2 KiB (+210 B)". */
export function sizeChange(f) {
  const before = f.old_size ?? null;
  const after = f.new_size ?? null;
  if (before === null && after === null) return "binary";
  if (before === null) return `new, ${fmtBytes(after)}`;
  if (after === null) return `deleted, ${fmtBytes(before)}`;
  const d = after - before;
  const delta = d === 0 ? "same size" : `${d > 0 ? "+" : "−"}${fmtBytes(Math.abs(d))}`;
  return `${fmtBytes(before)} → ${fmtBytes(after)} (${delta})`;
}

/** The follow-up prompt of a review: each comment with where it is. */
export function reviewPrompt(comments) {
  const lines = comments.map((c) => c.line
    ? `- ${c.path}, at \`${c.line.trim()}\`: ${c.text.trim()}`
    : `- ${c.path}: ${c.text.trim()}`);
  return `Review comments on your change:\n\n${lines.join("\n")}\n\nAddress each of them.`;
}

export class ChangesDialog {
  constructor(ctx, sessionId) {
    this.ctx = ctx;
    this.sessionId = sessionId;
    this.changes = null;
    this.comments = []; // {path, line, text}
    this.ticked = new Map(); // path → in the next commit (the user's choice, else the default)
    this.el = h("dialog", { class: "dialog wide", "data-testid": "changes-dialog",
      "aria-labelledby": "changes-title" });
    this.el.addEventListener("close", () => this.el.remove());
    this._status = h("p", { class: "muted small", role: "status", "data-testid": "changes-status" });
    this._body = h("div", { class: "changes-body" });
  }

  get session() {
    return this.ctx.store.state.sessions[this.sessionId] || null;
  }

  async open() {
    document.body.append(this.el);
    const w = this.session && this.session.worktree;
    replaceChildren(this.el, h("div", { class: "form" },
      h("div", { class: "row gap" },
        h("h2", { id: "changes-title" }, "Changes"),
        w ? h("span", { class: "chip mono", "data-testid": "changes-branch" },
          `${w.branch} ← ${w.base || "base"}`) : null,
        h("span", { class: "grow" }),
        h("button", { class: "btn", type: "button", onclick: () => this.el.close() }, "Close")),
      this._status, this._body));
    this.el.showModal();
    await this.refresh();
  }

  async refresh() {
    this._status.hidden = false;
    this._status.textContent = "Asking the machine…";
    try {
      this.changes = await api.changes(this.sessionId);
      this._status.hidden = true;
    } catch (err) {
      this._status.textContent = `Could not read the changes: ${err.message}`;
      return;
    }
    this._render();
  }

  _render() {
    if (!this._files) {
      // built once: a refresh after a commit redraws the files, never the buttons being used
      this._files = h("div", { class: "changes-files" });
      replaceChildren(this._body, this._files, this._review(), this._ship());
    }
    const c = this.changes;
    // an older worker commits everything whatever it is sent: no boxes that would not hold
    this._picking = Boolean(c.can_pick);
    for (const f of c.files) {
      if (!this.ticked.has(f.path)) this.ticked.set(f.path, commitChoice(f).ticked);
    }
    const totals = c.files.reduce((t, f) => [t[0] + f.added, t[1] + f.deleted], [0, 0]);
    const diffs = new Map(splitDiff(c.diff).map((f) => [f.path, f.lines]));
    replaceChildren(this._files,
      h("p", { "data-testid": "changes-totals" },
        `${c.files.length} file${c.files.length === 1 ? "" : "s"} `,
        h("span", { class: "d-count d-add" }, `+${totals[0]}`), " ",
        h("span", { class: "d-count d-del" }, `−${totals[1]}`),
        h("span", { class: "muted" }, ` against ${c.base} · ${c.commits.length} commit` +
          `${c.commits.length === 1 ? "" : "s"}${c.dirty ? " · uncommitted changes" : ""}` +
          `${c.behind ? ` · ${c.behind} behind ${c.base}` : ""}`)),
      c.files.length ? null : h("p", { class: "muted" }, "Nothing changed yet."),
      c.files.map((f) => this._file(f, diffs.get(f.path) || [])),
      c.truncated ? h("p", { class: "warn small" }, "The diff was cut: it is too long to show " +
        "whole.") : null);
    this._renderPicked();
  }

  /** "2 of 3 files to commit" beside the Commit button. */
  _renderPicked() {
    if (!this._pickedCount || !this.changes) return;
    if (!this._picking) {
      this._pickedCount.textContent = "everything is committed (this machine's worker " +
        "cannot leave files out)";
      return;
    }
    const open = this.changes.files.filter(pickable);
    const n = open.filter((f) => this.ticked.get(f.path)).length;
    this._pickedCount.textContent = open.length
      ? `${n} of ${open.length} file${open.length === 1 ? "" : "s"} to commit`
      : "nothing left to commit";
  }

  _file(f, lines) {
    const { added, removed } = lines.length ? countChanges(lines)
      : { added: f.added, removed: f.deleted };
    const pre = h("pre", { class: "diff-body" });
    for (const line of lines) {
      const row = h("span", { class: `d-line ${lineClass(line)} commentable`,
        title: "Click to comment on this line" }, `${line}\n`);
      row.addEventListener("click", () => this._comment(f.path, line, row));
      pre.append(row);
    }
    const anchor = h("div", {}); // a comment on the file goes here, under its diff
    const note = h("button", { class: "btn small subtle", type: "button",
      "data-testid": "comment-file", onclick: (ev) => {
        ev.preventDefault(); // (in the summary: do not fold the file)
        this._comment(f.path, "", anchor);
      } }, "Comment on the file");
    const choice = commitChoice(f);
    let pick = null;
    if (this._picking && pickable(f)) {
      pick = h("input", { type: "checkbox", class: "commit-pick", "data-testid": "commit-pick",
        "aria-label": `Commit ${f.path}`, title: "In the next commit",
        checked: Boolean(this.ticked.get(f.path)), onchange: (ev) => {
          this.ticked.set(f.path, ev.currentTarget.checked);
          this._renderPicked();
        } });
    }
    // a generated file's diff is folded: it is rarely read, and a cache can be long
    return h("details", { class: "diff-filebox", open: choice.kind !== "generated",
      "data-testid": "changed-file", "data-path": f.path, "data-kind": choice.kind || null },
    h("summary", { class: "diff-file" }, pick,
      h("span", { class: "diff-path" }, f.old_path ? `${f.old_path} → ${f.path}` : f.path),
      h("span", { class: "chip" }, f.status), f.committed ? null
        : h("span", { class: "chip", title: "Not committed yet" }, "uncommitted"),
      f.binary ? h("span", { class: "d-count", "data-testid": "binary-size",
        title: "A binary file's size, at the base and now" }, sizeChange(f)) : [
        h("span", { class: "d-count d-add" }, `+${added}`),
        h("span", { class: "d-count d-del" }, `−${removed}`)], note,
      // in the summary: it shows while the file is folded
      pick && choice.note ? h("span", { class: "pick-note small", "data-testid": "pick-note" },
        choice.note) : null),
    f.binary ? h("p", { class: "muted small" }, "A binary file.") : pre, anchor);
  }

  /** A comment box under `anchor`, for a line (its text) or the file (""). */
  _comment(path, line, anchor) {
    const input = h("textarea", { class: "input", rows: 2, "data-testid": "comment-input",
      placeholder: line ? "Comment on this line…" : "Comment on the file…" });
    const box = h("div", { class: "comment-box" }, input,
      h("div", { class: "row gap end" },
        h("button", { class: "btn small", type: "button", onclick: () => box.remove() },
          "Cancel"),
        h("button", { class: "btn small primary", type: "button",
          "data-testid": "comment-add", onclick: () => {
            if (!input.value.trim()) return;
            this.comments.push({ path, line, text: input.value });
            box.replaceWith(h("div", { class: "comment", "data-testid": "comment" },
              `✎ ${input.value}`));
            this._renderReviewBar();
          } }, "Add")));
    anchor.after(box);
    input.focus();
  }

  _review() {
    this._reviewBar = h("div", { class: "row gap end" });
    this._renderReviewBar();
    return this._reviewBar;
  }

  _renderReviewBar() {
    const n = this.comments.length;
    replaceChildren(this._reviewBar, h("button", { class: "btn primary", type: "button",
      "data-testid": "send-review", disabled: !n, onclick: () => this._sendReview() },
    n ? `Send ${n} comment${n === 1 ? "" : "s"} to the agent` : "Send review"));
  }

  async _sendReview() {
    try {
      await this.ctx.socket.sendPrompt(this.sessionId, reviewPrompt(this.comments));
      this.comments = [];
      this.ctx.toast("Review sent to the agent", "good");
      this.el.close();
    } catch (err) {
      this.ctx.toast(`Review not sent: ${err.message}`, "error");
    }
  }

  _ship() {
    const w = (this.session && this.session.worktree) || {};
    this._message = h("textarea", { class: "input mono", rows: 3, "data-testid": "commit-message",
      placeholder: "What this change does" });
    this._mode = h("select", { class: "input compact", "data-testid": "merge-mode" },
      h("option", { value: "rebase" }, "rebase, then fast-forward"),
      h("option", { value: "ff" }, "fast-forward only"));
    this._openPr = h("input", { type: "checkbox", "data-testid": "open-pr", checked: true });
    this._shipOut = h("div", { class: "small", role: "status", "data-testid": "ship-result" });
    this._pickedCount = h("span", { class: "muted small", "data-testid": "commit-count" });
    this._renderPicked();
    const button = (testid, text, fn, cls = "btn") => h("button", { class: cls, type: "button",
      "data-testid": testid, onclick: (ev) => this._run(ev.currentTarget, fn) }, text);
    return h("section", { class: "ship card" },
      h("h3", {}, "Ship it"),
      h("div", { class: "field" }, h("label", {}, "Commit message"), this._message),
      h("div", { class: "row gap wrap" },
        button("draft-message", "Draft it with the model", () => this._draft()),
        button("commit", "Commit", () => this._commit(), "btn primary"), this._pickedCount,
        h("span", { class: "grow" }),
        this._mode, button("merge", `Merge into ${w.base || "base"}`, () => this._merge())),
      h("div", { class: "row gap wrap" },
        h("label", { class: "check small" }, this._openPr, " open a pull request"),
        button("push", "Push", () => this._push()),
        h("span", { class: "grow" }),
        button("remove-worktree", "Remove worktree", () => this._remove(), "btn danger")),
      this._shipOut);
  }

  async _run(buttonEl, fn) {
    buttonEl.disabled = true;
    try {
      await fn();
    } catch (err) {
      this._say(err.message, "bad");
    } finally {
      buttonEl.disabled = false;
    }
  }

  _say(text, cls = "", ...extra) {
    replaceChildren(this._shipOut, h("p", { class: cls }, text), ...extra);
  }

  async _draft() {
    this._say("The model is writing a message…", "muted");
    const { message } = await api.draftCommitMessage(this.sessionId);
    this._message.value = message;
    this._say("Drafted: edit it as you like, then Commit.", "muted");
  }

  async _commit() {
    const message = this._message.value.trim();
    if (!message) {
      this._message.focus();
      this._say("Write a message first (or let the model draft one).", "warn");
      return;
    }
    const files = this.changes ? this.changes.files : [];
    // the ticked files only, and nothing else (an older worker commits everything, as it
    // always did, and gets no list it would not follow)
    const body = { message };
    if (this._picking && files.some(pickable)) {
      body.paths = commitPaths(files, this.ticked);
      if (!body.paths.length) {
        this._say("Tick the files to commit first.", "warn");
        return;
      }
    }
    const res = await api.worktreeOp(this.sessionId, "commit", body);
    this._message.value = ""; // (the next commit needs its own message)
    this._say(`Committed ${res.sha.slice(0, 10)} (${res.files} file${res.files === 1 ? "" : "s"}).`,
      "good");
    await this.refresh();
  }

  async _merge() {
    const res = await api.worktreeOp(this.sessionId, "merge", { mode: this._mode.value });
    if (res.merged) {
      this._say(res.message || `Merged (${res.sha.slice(0, 10)}).`, "good");
      await this.refresh();
      return;
    }
    const base = (this.session.worktree || {}).base || "the base";
    this._say(res.conflicts.length ? `It conflicts with ${base} in: ${res.conflicts.join(", ")}`
      : res.message, "bad",
    res.conflicts.length ? h("button", { class: "btn", type: "button",
      "data-testid": "resolve-with-agent", onclick: (ev) => this._run(ev.currentTarget,
        () => this._resolve()) }, `Give the conflicts to the agent`) : null);
  }

  async _resolve() {
    const res = await api.worktreeOp(this.sessionId, "resolve", undefined);
    this._say(res.prompted ? "The agent resolves the conflicts; commit and merge once it is done."
      : "No conflict left: merge again.", "good");
    if (res.prompted) this.el.close();
  }

  async _push() {
    const openPr = this._openPr.checked;
    const s = this.session;
    const res = await api.worktreeOp(this.sessionId, "push", {
      open_pr: openPr, title: s ? s.title : "", body: this._message.value });
    this._say(res.pr_url ? `Pull request: ${res.pr_url}` : res.message ||
      `Pushed ${res.branch} to ${res.remote}.`, "good");
  }

  async _remove(force = false) {
    if (!force && !window.confirm("Remove this session's worktree? Its branch stays.")) return;
    try {
      const res = await api.worktreeOp(this.sessionId, "remove", { force });
      this._say(`Removed ${res.path}; its branch stays.`, "good");
    } catch (err) {
      if (!force && err.status === 409 && /uncommitted|not merged|unmerged|dirty/i.test(
        err.message) && window.confirm(`${err.message}\n\nRemove it anyway? What is not ` +
          "committed is lost.")) {
        await this._remove(true);
        return;
      }
      throw err;
    }
  }
}
