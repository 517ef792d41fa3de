// Diffs, coloured with CSS: unified diffs (`diff --git`, `--- a/x`) and Codex patches
// (`*** Update File: x`). Split per file; every line is text (textContent), never HTML.

import { h } from "./dom.js";

const GIT_HEADER = /^diff --git a\/(.+?) b\/(.+)$/;
const CODEX_HEADER = /^\*\*\* (?:Update|Add|Delete) File: (.+)$/;

/** Split diff text into `[{path, lines: [string]}]`; text before any header goes to path "". */
export function splitDiff(text) {
  const lines = String(text).replace(/\r\n/g, "\n").split("\n");
  const files = [];
  let current = null;
  const start = (path, git) => {
    current = { path, lines: [], git, sawHunk: false };
    files.push(current);
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line === "*** Begin Patch" || line === "*** End Patch") continue;
    let m;
    if ((m = GIT_HEADER.exec(line))) start(m[2], true);
    else if ((m = CODEX_HEADER.exec(line))) start(m[1], false);
    else if (line.startsWith("--- ") && (lines[i + 1] || "").startsWith("+++ ") &&
             !(current && current.git && !current.sawHunk)) {
      // A plain unified diff: "--- a/x" then "+++ b/x" starts a file (unless it is the header
      // of the "diff --git" block just opened).
      const plus = lines[i + 1].slice(4).split("\t")[0];
      const minus = line.slice(4).split("\t")[0];
      const path = plus === "/dev/null" ? minus : plus;
      start(path.replace(/^[ab]\//, ""), false);
    } else if (!current) start("", false);
    if (line.startsWith("@@")) current.sawHunk = true;
    current.lines.push(line);
  }
  return files
    .map((f) => {
      while (f.lines.length && f.lines[f.lines.length - 1] === "") f.lines.pop();
      return { path: f.path, lines: f.lines };
    })
    .filter((f) => f.lines.length);
}

/** A diff line's CSS class: d-meta, d-hunk, d-add, d-del or d-ctx. */
export function lineClass(line) {
  if (line.startsWith("+++ ") || line.startsWith("--- ") || line.startsWith("*** ") ||
      line.startsWith("diff ") || line.startsWith("index ")) return "d-meta";
  if (line.startsWith("@@")) return "d-hunk";
  if (line.startsWith("+")) return "d-add";
  if (line.startsWith("-")) return "d-del";
  return "d-ctx";
}

/** Count added and removed lines of one file's diff lines. */
export function countChanges(lines) {
  let added = 0;
  let removed = 0;
  for (const l of lines) {
    const c = lineClass(l);
    if (c === "d-add") added += 1;
    else if (c === "d-del") removed += 1;
  }
  return { added, removed };
}

/** A `<div data-testid="diff">` with one collapsible block per file. */
export function renderDiff(text) {
  const root = h("div", { class: "diff", "data-testid": "diff" });
  const files = splitDiff(text);
  for (const f of files) {
    const { added, removed } = countChanges(f.lines);
    const pre = h("pre", { class: "diff-body" });
    for (const line of f.lines) {
      pre.append(h("span", { class: `d-line ${lineClass(line)}` }, `${line}\n`));
    }
    const summary = h("summary", { class: "diff-file" },
      h("span", { class: "diff-path" }, f.path || "patch"),
      h("span", { class: "d-count d-add" }, `+${added}`),
      h("span", { class: "d-count d-del" }, `−${removed}`));
    root.append(h("details", { class: "diff-filebox", open: files.length <= 8 }, summary, pre));
  }
  return root;
}
