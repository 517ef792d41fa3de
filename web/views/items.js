// One DOM node per session item (user/assistant message, reasoning, tool call, error, plan).
//
// `renderItem(item, ctx)` builds the node from scratch; the session view calls it again when
// the item changes, except for streamed command output, which it appends chunk by chunk
// through the node's AnsiStream (see `appendOutput`).

import { AnsiStream } from "../ansi.js";
import { renderDiff } from "../diff.js";
import { api } from "../api.js";
import { fmtBytes, h, shellJoin, svgIcon } from "../dom.js";
import {
  TOOL_WORDS, countdownNode, reviewWords, sessionWords, statusChip, toolDisplay, workerUp,
} from "./common.js";
import { highlightCode, languageForPath, renderMarkdown } from "../markdown.js";
import { openRewind } from "./rewind.js";
import { turnIndex } from "../store.js";

const streams = new WeakMap(); // output <pre> -> {stream: AnsiStream, lines: its line count}
const IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

// A message still streaming is rendered again for every chunk: coloured once it is complete.
function markdown(text, cls, { streaming = false } = {}) {
  const div = h("div", { class: `md ${cls || ""}` });
  // safe: raw HTML off, links checked, everything escaped (see markdown.js)
  div.innerHTML = renderMarkdown(text, { highlight: !streaming });
  return div;
}

/** Code in `lang` (null: plain), coloured. */
function codeView(text, lang, attrs = {}) {
  const code = h("code", { class: `hljs${lang ? ` language-${lang}` : ""}` });
  code.innerHTML = highlightCode(text, lang); // escaped by highlight.js, or by us
  return h("pre", { class: "code", ...attrs }, code);
}

/** A file's text, coloured by the language its name says (`app.py`: Python). */
function fileView(text, path) {
  const lang = languageForPath(path);
  return codeView(text, lang, { class: "code file-view", "data-testid": "file-view",
    "data-lang": lang || "" });
}

/** How many lines `text` shows ("a\nb\n" is two). */
function lineCount(text) {
  return text ? text.replace(/\n$/, "").split("\n").length : 0;
}

function outputSummary(lines) {
  return lines ? `Output (${lines} line${lines === 1 ? "" : "s"})` : "Output";
}

/** Long finished output is folded to its head and tail; "Show all" unfolds it. */
const FOLD_LINES = 60;
const FOLD_KEEP = 20;

function foldedOutput(text) {
  const lines = text.replace(/\n$/, "").split("\n");
  if (lines.length <= FOLD_LINES) return outputBlock(text);
  const hidden = lines.length - 2 * FOLD_KEEP;
  const pre = outputBlock(`${lines.slice(0, FOLD_KEEP).join("\n")}\n`);
  const gap = h("button", { class: "btn small fold-gap", type: "button",
    "data-testid": "output-unfold" }, `Show all ${lines.length} lines (${hidden} hidden)`);
  const tail = outputBlock(`${lines.slice(-FOLD_KEEP).join("\n")}\n`);
  const box = h("div", { class: "folded", "data-testid": "output-folded" }, pre, gap, tail);
  gap.addEventListener("click", () => box.replaceWith(outputBlock(text)));
  return box;
}

function outputBlock(text) {
  const pre = h("pre", { class: "output", "data-testid": "tool-output", tabindex: "0",
    "aria-label": "Command output" });
  const stream = new AnsiStream();
  streams.set(pre, { stream, text: text || "" });
  if (text) pre.append(stream.feed(text));
  else pre.classList.add("empty");
  return pre;
}

/** Append streamed output to an item node; false if the node has no output block. */
export function appendOutput(node, delta) {
  const pre = node.querySelector("pre.output");
  const out = pre && streams.get(pre);
  if (!out) return false;
  pre.classList.remove("empty");
  const nearEnd = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
  pre.append(out.stream.feed(delta));
  out.text += delta;
  // the summary counts the lines on screen, chunk by chunk
  const summary = node.querySelector("[data-testid=output-summary]");
  if (summary) summary.textContent = outputSummary(lineCount(out.text));
  if (nearEnd) pre.scrollTop = pre.scrollHeight;
  return true;
}

// The first line of a command's result, as agent/tools/shell.py `reads` writes it.
const RESULT_HEAD = /^(exit code: -?\d+|the command timed out and was killed|the command was cancelled|the command was killed by signal \S+|the command did not finish: the worker stopped \(.*?\) while it ran, and stopped it)( \(output truncated\))?(\n|$)/;

/**
 * The output to show for a finished command: the streamed output, or the output in the
 * item's result when that holds more. Chunks streamed while the server was away are lost,
 * but the result (what the model was given) carries the whole output.
 */
function shownOutput(item) {
  const streamed = item.output || "";
  if (item.status === "running" || item.status === "pending" || !item.result) return streamed;
  const m = RESULT_HEAD.exec(item.result);
  if (!m) return streamed;
  const full = item.result.slice(m[0].length);
  const size = (t) => t.replace(/\s+/g, "").length;
  return size(full) > size(streamed) ? `${full}\n` : streamed;
}

/** A tool call's title: its tool's label, an MCP tool's server and name, else its name. */
function toolTitle(item, display) {
  if (display.body === "mcp") {
    const server = item.mcp_server || item.name.split("__")[1] || "";
    const tool = item.mcp_tool || item.name.split("__").slice(2).join("__");
    return `${server} · ${tool}`;
  }
  return display.label || item.name;
}

function prettyJson(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function collapsible(summary, body, open = false) {
  return h("details", { class: "fold", open }, h("summary", {}, summary), body);
}

function argvFromArguments(item) {
  try {
    const args = JSON.parse(item.arguments);
    if (Array.isArray(args.command)) return args.command;
    if (Array.isArray(args.argv)) return args.argv;
  } catch {
    // still streaming or not JSON: show nothing
  }
  return null;
}

function parsedArguments(item) {
  try {
    const args = JSON.parse(item.arguments);
    return args && typeof args === "object" ? args : {};
  } catch {
    return {};
  }
}

/** The model's question, and (while it waits) the buttons and box to answer it. */
function questionBody(item, ctx, session) {
  const args = parsedArguments(item);
  const q = Object.values(session.questions || {}).find((x) => x.item_id === item.id);
  const parts = [h("p", { class: "question-text", "data-testid": "question-text" },
    (q && q.question) || args.question || "")];
  if (q && q.status === "pending") {
    const send = async (answer, controls) => {
      if (!answer.trim()) return;
      for (const c of controls) c.disabled = true;
      try {
        await ctx.socket.answerQuestion(session.session_id, q.question_id, answer);
      } catch (err) {
        ctx.toast(`Answer not sent: ${err.message}`, "error");
        for (const c of controls) c.disabled = false;
      }
    };
    const controls = [];
    const input = h("input", { class: "input", "data-testid": "answer-input",
      placeholder: q.choices.length ? "Or answer in your words…" : "Your answer…",
      "aria-label": "Your answer", autocomplete: "off" });
    const button = h("button", { class: "btn primary", type: "button",
      "data-testid": "answer-send", onclick: () => send(input.value, controls) }, "Answer");
    input.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter") {
        ev.preventDefault();
        button.click();
      }
    });
    const choices = q.choices.map((c) => h("button", { class: "btn", type: "button",
      "data-testid": "answer-choice", onclick: () => send(c, controls) }, c));
    controls.push(input, button, ...choices);
    parts.push(h("div", { class: "question", "data-testid": "question", role: "group",
      "aria-label": "The agent asks you" },
    choices.length ? h("div", { class: "row gap wrap" }, choices) : null,
    h("div", { class: "row gap" }, input, button)));
  } else if (q) {
    parts.push(h("p", { class: "muted", "data-testid": "question-answer" },
      q.status === "answered" ? `You answered: ${q.answer}` : "Not answered (cancelled)."));
  }
  return parts;
}

/** A delegation: the role, the task, and the sub-agent's session with its live status. */
function delegateBody(item, ctx, session) {
  const args = parsedArguments(item);
  const child = Object.values(ctx.store.state.sessions).find((x) =>
    x.parent_id === session.session_id && x.parent_item === item.id);
  // where it works, when the model chose: another folder or machine is what approval grants
  const machine = args.worker_id && args.worker_id !== session.worker_id
    ? (ctx.store.state.workers[args.worker_id] || {}).hostname || args.worker_id : null;
  // the folder as the server resolved it (`..` folded): the child's, or the approval's
  const asked = Object.values(session.approvals).find((a) => a.item_id === item.id && a.path);
  const where = child ? child.workdir : asked ? asked.path : args.workdir;
  return [
    h("p", {}, h("strong", {}, args.role || "?"), " ", h("span", { class: "muted" },
      args.task || "")),
    args.workdir || machine ? h("p", { class: "small", "data-testid": "delegate-where" },
      "in ", h("span", { class: "mono" }, where || session.workdir),
      machine ? ` on ${machine}` : "") : null,
    child ? h("p", { class: "small", "data-testid": "child-session" },
      h("a", { href: `#/session/${encodeURIComponent(child.session_id)}` }, "Open its session"),
      " · ", statusChip(child.status, "child-status", sessionWords(child))) : null,
    item.result !== null && item.result !== undefined
      ? collapsible("Its answer", markdown(item.result)) : null,
  ];
}

const STOPPED_WORDS = {
  user: "stopped by you", exec_kill: "stopped by the agent", interrupt: "stopped: interrupted",
  close: "stopped: session closed", timeout: "stopped: timed out", cancel: "stopped: cancelled",
  detach: "stopped: session closed", worker_exit: "stopped: its worker exited",
  settings: "stopped: sandbox changed",
};

/** What a process's state is, in words: running, stopping, exit 0, stopped by you, gone. */
export function processWords(p) {
  if (p.status === "running") return "running";
  if (p.status === "stopping") return "stopping…";
  if (p.status === "gone") return "gone (its worker restarted)";
  if (STOPPED_WORDS[p.stopped_by]) return STOPPED_WORDS[p.stopped_by];
  return p.exit_code !== null && p.exit_code !== undefined ? `exit ${p.exit_code}`
    : `killed by signal ${p.signal}`;
}

export function processChip(p) {
  const failed = p.status === "ended" && !p.stopped_by && p.exit_code !== 0;
  const cls = p.status === "running" ? "good" : p.status === "stopping" || p.status === "gone"
    ? "gone" : failed ? "bad" : "";
  return h("span", { class: `chip ${cls}`, "data-testid": "process-status",
    "data-status": p.status, title: p.process_id }, processWords(p));
}

/**
 * A call on a process (exec, write_stdin, kill): the command that started it or what was
 * typed into it (`display.content`), the process's state, what was read. The process is the
 * one the call names (`process_id`), else the one it started.
 */
function processBody(item, session, display) {
  const args = parsedArguments(item);
  const parts = [];
  const pid = args.process_id
    || (session.processes.find((p) => p.item_id === item.id) || {}).process_id;
  const p = pid && session.processes.find((x) => x.process_id === pid);
  const argv = item.command || argvFromArguments(item);
  if (argv) {
    parts.push(h("pre", { class: "command", "data-testid": "tool-command" },
      h("span", { class: "prompt-sign", "aria-hidden": "true" }, "$ "), shellJoin(argv)));
  } else if (display.content) {
    const typed = args[display.content];
    parts.push(h("p", { class: "small" }, typed
      ? h("code", { class: "mono", "data-testid": "process-input" }, JSON.stringify(typed))
      : h("span", { class: "muted" }, "read its new output")));
  }
  if (pid) {
    parts.push(h("p", { class: "small process-line" },
      h("span", { class: "mono muted" }, pid), " ", p ? processChip(p) : null));
  }
  if (item.output) parts.push(foldedOutput(item.output));
  if (item.truncated) parts.push(h("p", { class: "muted small" }, "Output truncated."));
  return parts;
}

/** grep and glob: what was searched for, where, and the answer. */
function searchBody(item, display) {
  const args = parsedArguments(item);
  const where = [`in ${args.path && args.path !== "." ? args.path : "the workdir"}`];
  if (args.include) where.push([].concat(args.include).join(", "));
  if (args.exclude) where.push(`not ${[].concat(args.exclude).join(", ")}`);
  return [
    h("p", { class: "small" }, h("code", { class: "mono", "data-testid": "search-pattern" },
      args.pattern || ""), h("span", { class: "muted" }, ` · ${where.join(" · ")}`)),
    item.result !== null && item.result !== undefined
      ? collapsible(display.result_label,
        h("pre", { class: "code", "data-testid": "search-result" }, item.result)) : null,
  ];
}

/** The card's body, as the call's tool's display says (web/tool_display.js). */
function toolBody(item, ctx, session, display) {
  const parts = [];
  if (display.body === "question") return questionBody(item, ctx, session);
  if (display.body === "delegate") return delegateBody(item, ctx, session);
  if (display.body === "process") {
    return [...processBody(item, session, display),
      item.error ? h("p", { class: "tool-error", role: "alert" }, item.error) : null];
  }
  if (display.body === "search") return searchBody(item, display);
  if (display.body === "image") {
    const image = item.image;
    return [h("div", { class: "mono path" }, item.path || parsedArguments(item).path || ""),
      image ? h("a", { href: api.blobUrl(image), target: "_blank", rel: "noopener" },
        h("img", { src: api.blobUrl(image), alt: image.name, class: "thumb",
          "data-testid": "tool-image" })) : null,
      item.error ? h("p", { class: "tool-error", role: "alert" }, item.error) : null];
  }
  if (display.body === "memory") {
    return [h("p", { class: "memory-note" }, parsedArguments(item).note || ""),
      (item.result || "").startsWith("already in the project memory")
        ? h("p", { class: "muted small", "data-testid": "memory-already" },
          "Already in the project memory: not added again.") : null,
      item.error ? h("p", { class: "tool-error", role: "alert" }, item.error) : null];
  }
  // an ACP agent's command (its argv in the call's raw input) shows as Codey's own does
  if (display.body === "command" || (item.command && item.command.length)) {
    const argv = item.command || argvFromArguments(item);
    if (argv) parts.push(h("pre", { class: "command", "data-testid": "tool-command" },
      h("span", { class: "prompt-sign", "aria-hidden": "true" }, "$ "), shellJoin(argv)));
    const text = shownOutput(item);
    const output = item.status === "running" || item.status === "pending"
      ? outputBlock(text) : foldedOutput(text);
    // collapsible, open by default: the output is what the user came to see
    parts.push(h("details", { class: "fold output-fold", open: true },
      h("summary", { class: "muted small", "data-testid": "output-summary" },
        outputSummary(lineCount(text))), output));
    if (item.truncated) parts.push(h("p", { class: "muted small" }, "Output truncated."));
  } else if (display.body === "patch" || item.diff || item.patch) {
    if (display.path_over_diff && item.path && !(item.files && item.files.length)) {
      parts.push(h("div", { class: "mono path" }, item.path));
    }
    if (item.files && item.files.length) {
      parts.push(h("ul", { class: "file-list" }, item.files.map((f) => h("li", {},
        h("span", { class: `op op-${f.op}` }, f.op), " ",
        h("span", { class: "mono" }, f.moved_to ? `${f.path} → ${f.moved_to}` : f.path), " ",
        h("span", { class: "d-add" }, `+${f.added}`), " ",
        h("span", { class: "d-del" }, `−${f.removed}`)))));
    }
    const text = item.diff || item.patch;
    if (text) parts.push(renderDiff(text));
    if (item.output) parts.push(outputBlock(item.output));
  } else if (display.body === "mcp") {
    parts.push(collapsible("Arguments", codeView(prettyJson(item.arguments), "json")));
    if (item.output) parts.push(outputBlock(item.output));
    if (item.result !== null) {
      parts.push(collapsible("Result", h("pre", { class: "code" }, item.result), true));
    }
  } else {
    if (item.path) parts.push(h("div", { class: "mono path" }, item.path));
    else if (display.arguments) {
      parts.push(collapsible("Arguments", codeView(prettyJson(item.arguments), "json")));
    }
    // a write that asked nothing has no diff: what it writes is still on its card
    const content = display.content ? parsedArguments(item)[display.content] : undefined;
    if (typeof content === "string") {
      parts.push(collapsible("Content", fileView(content, item.path)));
    }
    if (item.output) parts.push(outputBlock(item.output));
    if (item.result !== null && display.result === "file" && !item.error) {
      parts.push(collapsible(display.result_label, fileView(item.result, item.path)));
    } else if (item.result !== null && display.result !== "none") {
      parts.push(collapsible(display.result_label, h("pre", { class: "code" }, item.result)));
    }
  }
  if (item.error) parts.push(h("p", { class: "tool-error", role: "alert" }, item.error));
  return parts;
}

/** An error item's head, by code (others: "Error (code)"). */
const ERROR_HEADS = { error: "Error", worker_lost: "Interrupted:" };

/** What an approval asks, by kind (others: "Approve this <kind>?"). */
const APPROVAL_HEADS = {
  acp: "The agent asks:",
  escalate: "Run without the sandbox?",
  delegate: "Give a sub-agent another folder or machine?",
  web: "Let the server reach the web?",
};

/** What approving lets through, where it is more than the call itself. */
const APPROVAL_WARNINGS = {
  escalate: "Outside the sandbox this command can write anywhere you can, read your "
    + "credentials and reach the network. Approve for session lets commands starting "
    + "with the same words leave the sandbox too.",
  delegate: "The sub-agent can read and change the files in that folder, under this "
    + "session's approval policy, sandbox mode and network: as a session you started there.",
};

/** The approval card for a tool call (pending: buttons; decided: one line). */
export function approvalNode(approval, ctx, sessionId, standalone = false) {
  const verdict = reviewWords(approval);
  if (approval.status !== "pending") {
    return h("div", { class: `approval-done status-${approval.status}`,
      "data-testid": "approval-decided", "data-approval-id": approval.approval_id },
    `${approval.status === "approved" ? "✓" : "✗"} ${approval.kind} ${approval.status}` +
      (approval.message ? ` — ${approval.message}` : ""),
    approval.review && approval.review.approved ? reverseReviewer(ctx, sessionId) : null);
  }
  const msgId = `reject-msg-${approval.approval_id}`;
  const message = h("input", { id: msgId, class: "input", "data-testid": "reject-message",
    placeholder: "Tell the agent why (optional)", autocomplete: "off" });
  const buttons = [];
  const queuedNote = h("p", { class: "small queued-note", "data-testid": "approval-queued",
    hidden: true }, "Sent: it applies when the connection to the server is back.");
  const decide = async (decision) => {
    for (const b of buttons) b.disabled = true;
    // offline, the command waits in the socket's queue: say so instead of seeming stuck
    if (ctx.socket.status !== "live") queuedNote.hidden = false;
    try {
      await ctx.socket.decideApproval(sessionId, approval.approval_id, decision,
        decision === "reject" ? message.value : "");
    } catch (err) {
      ctx.toast(`Decision not recorded: ${err.message}`, "error");
      for (const b of buttons) b.disabled = false;
    }
  };
  const button = (testid, text, decision, cls) => {
    const b = h("button", { class: `btn ${cls}`, type: "button", "data-testid": testid,
      onclick: () => decide(decision) }, text);
    buttons.push(b);
    return b;
  };
  const what = (approval.kind === "command" || approval.kind === "escalate") && approval.command
    ? h("pre", { class: "command" }, h("span", { class: "prompt-sign" }, "$ "),
      shellJoin(approval.command))
    : approval.path ? h("div", { class: "mono path", "data-testid": "approval-path" },
      approval.path) : null;
  const reject = button("reject", "Reject", "reject", "danger");
  message.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") {
      ev.preventDefault();
      reject.click();
    }
  });
  return h("div", { class: "approval", "data-testid": "approval", role: "group",
    "aria-label": "Approval needed", "data-approval-id": approval.approval_id },
  h("div", { class: "approval-head" },
    h("strong", {}, APPROVAL_HEADS[approval.kind] ?? `Approve this ${approval.kind}?`),
    approval.reason ? h("span", { class: "muted" }, ` ${approval.reason}`) : null),
  APPROVAL_WARNINGS[approval.kind]
    ? h("p", { class: "warn small", "data-testid": "approval-warning" },
      APPROVAL_WARNINGS[approval.kind]) : null,
  verdict ? h("p", { class: `small reviewer-verdict verdict-${approval.review.decision}`,
    "data-testid": "reviewer-verdict" }, verdict) : null,
  ladderOf(ctx, sessionId, approval.approval_id),
  // a delegation's folder is what is granted: shown in the session's view too
  standalone || approval.kind === "delegate" ? what : null,
  standalone && approval.patch ? renderDiff(approval.patch) : null,
  h("div", { class: "approval-actions" },
    button("approve", "Approve", "approve", "primary"),
    button("approve-session", "Approve for session", "approve_for_session", ""),
    h("label", { for: msgId, class: "sr-only" }, "Reason for rejecting"),
    message, reject),
  queuedNote);
}

/** The ladder's countdown beside the approval it runs for (null: none). */
function ladderOf(ctx, sessionId, approvalId) {
  const s = ctx.store.state.sessions[sessionId];
  return s && s.attention && s.attention.target_id === approvalId ? countdownNode(s) : null;
}

/**
 * "Stop auto-approving": the user reverses the reviewer for the rest of the session (its
 * policy goes back to `suggest`); shown while the session's policy is still `reviewer`.
 */
function reverseReviewer(ctx, sessionId) {
  const s = ctx.store.state.sessions[sessionId];
  if (!s || s.policy !== "reviewer") return null;
  const b = h("button", { class: "btn subtle compact", type: "button",
    "data-testid": "reverse-reviewer",
    title: "From now on every action of this session asks you (policy: suggest)" },
  "Ask me instead from now on");
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      await ctx.socket.setApprovalPolicy(sessionId, "suggest");
    } catch (err) {
      ctx.toast(`Policy not changed: ${err.message}`, "error");
      b.disabled = false;
    }
  });
  return h("span", {}, " ", b);
}

function toolCall(item, ctx, session) {
  const display = toolDisplay(item);
  const approvals = Object.values(session.approvals).filter((a) => a.item_id === item.id);
  const offline = item.status === "running" && !workerUp(ctx.store.state, session.worker_id);
  const words = offline ? "waiting for machine" : (TOOL_WORDS[item.status] || item.status);
  const exit = item.exit_code !== null && item.exit_code !== undefined
    ? h("span", { class: `chip ${item.exit_code === 0 ? "good" : "bad"}`,
      "data-testid": "exit-code" }, `exit ${item.exit_code}`)
    : null;
  return [
    h("div", { class: "tool-head" },
      h("span", { class: `tool-icon icon-${display.icon}`, "aria-hidden": "true" }),
      h("span", { class: "tool-title" }, toolTitle(item, display)),
      h("span", { class: `chip tool-status status-${offline ? "offline" : item.status}`,
        "data-testid": "tool-status", "data-status": item.status }, words),
      exit),
    toolBody(item, ctx, session, display),
    hookRunsNode((session.hook_runs || []).filter((r) => r.item_id === item.id)),
    approvals.map((a) => approvalNode(a, ctx, session.session_id)),
  ];
}

/** The hooks that ran for a call (or a turn), folded: one line each (its moment, decision,
 * exit code, time), its command, reason and output inside. */
export function hookRunsNode(runs) {
  if (!runs.length) return null;
  const said = (r) => r.decision || (r.problem ? "problem" : "ok");
  return h("div", { class: "hook-runs", "data-testid": "hook-runs" }, runs.map((r) => {
    const exit = r.timed_out ? "timed out" : r.exit_code === null ? "killed" : `exit ${r.exit_code}`;
    return h("details", { class: "fold hook-run", "data-testid": "hook-run",
      "data-decision": r.decision || "" },
      h("summary", { class: "small" },
        h("span", { class: "muted" }, `hook ${r.event}`), " ",
        h("span", { class: `chip ${["deny", "block"].includes(r.decision) ? "bad"
          : r.problem ? "warn" : "good"}`, "data-testid": "hook-decision" }, said(r)), " ",
        h("span", { class: "muted" }, `${exit} · ${r.duration_ms} ms`),
        r.reason ? h("span", { class: "hook-reason", "data-testid": "hook-reason" },
          ` — ${r.reason}`) : null),
      h("pre", { class: "command", "data-testid": "hook-command" }, r.command_line),
      h("div", { class: "muted small mono" }, r.path),
      r.problem ? h("p", { class: "warn small" }, r.problem) : null,
      r.output ? h("pre", { class: "output" }, r.output) : null);
  }));
}

function planSteps(steps) {
  return h("ol", { class: "plan-steps" }, steps.map((s) => h("li", {
    class: `plan-step step-${s.status}`, "data-status": s.status },
  h("span", { class: "step-mark", "aria-hidden": "true" },
    s.status === "done" ? "✓" : s.status === "in_progress" ? "▸" : "○"),
  h("span", { class: "sr-only" }, `${s.status.replace("_", " ")}: `),
  s.step)));
}

export { planSteps };

/** "Fork from here": a new session with the conversation up to this item. */
function forkButton(item, ctx, session) {
  // no text content (the icon is an inline SVG, the label is drawn by CSS): an item's text
  // stays exactly its message
  return h("button", { class: "item-action fork", type: "button", "data-testid": "fork-here",
    "aria-label": "Fork from here",
    title: "A new session with the conversation up to here", onclick: async (ev) => {
      ev.currentTarget.disabled = true;
      try {
        const ack = await ctx.socket.forkSession(session.session_id, item.id);
        if (ack && ack.session_id) {
          location.hash = `#/session/${encodeURIComponent(ack.session_id)}`;
        }
      } catch (err) {
        ctx.toast(`Not forked: ${err.message}`, "error");
      }
    } }, svgIcon("fork"));
}

/** "Rewind…" on a prompt of the live conversation: the rewind dialog at that prompt. */
function rewindButton(item, ctx, session) {
  // no text content, as the fork's: the label is drawn by CSS
  return h("button", { class: "item-action rewind", type: "button", "data-testid": "rewind-here",
    "aria-label": "Rewind…", title: "Take the files and/or the conversation back to just " +
      "before this prompt", onclick: () => openRewind(ctx, session.session_id, item.id) },
  svgIcon("rewind"));
}

/** One of the worker's git operations on the session's worktree (made, committed, merged,
 * pushed, removed): its title, how it went, and a setup script's output. */
function gitOp(item) {
  const running = item.status === "running";
  return [
    h("div", { class: "row gap" },
      h("span", { class: "who" }, "⎇ ", item.title),
      h("span", { class: `chip status-${item.status}`, "data-testid": "git-op-status" },
        running ? "working…" : item.status === "done" ? "done" : "failed")),
    item.output ? h("details", { class: "fold", open: running || item.exit_code > 0 },
      h("summary", {}, `Setup output${item.exit_code != null ? ` (exit ${item.exit_code})` : ""}`),
      h("pre", { class: "code", "data-testid": "git-op-output" }, item.output)) : null,
    item.result ? h("p", { class: "small", "data-testid": "git-op-result" }, item.result) : null,
    item.error ? h("p", { class: "bad small", role: "alert" }, item.error) : null,
  ];
}

/** Whether `item` is the error the session stopped on (its newest, nothing said since):
 * the one that carries Retry. */
export function retryable(item, session) {
  if (session.status !== "error") return false;
  for (let i = session.items.length - 1; i >= 0; i--) {
    const it = session.items[i];
    if (it.kind === "error_item") return it.id === item.id;
    if (it.kind === "user_message") return false;
  }
  return false;
}

/** Retry, beside the error it retries (the turn runs again; a gone provider takes the
 * server's default). */
function retryButton(ctx, session) {
  const button = h("button", { class: "btn retry", type: "button", "data-testid": "retry",
    onclick: async () => {
      button.disabled = true;
      try {
        await ctx.socket.retryTurn(session.session_id);
      } catch (err) {
        ctx.toast(`Not retried: ${err.message}`, "error");
        button.disabled = false;
      }
    } }, "↻ Retry");
  return button;
}

/** What the slash command that wrote a prompt set for its turn: its name, the model,
 * the tools it allowed (the session's own model and tools are unchanged). */
function forTurn(t) {
  if (!t) return null;
  const parts = [`/${t.slash}`];
  if (t.model) parts.push(`model ${t.model}`);
  if (t.tools) parts.push(t.tools.length ? `tools: ${t.tools.join(", ")}` : "no tools");
  return h("span", { class: "chip muted small for-turn", "data-testid": "for-turn",
    title: "Set by the slash command for this turn only" }, parts.join(" · "));
}

/** A fresh node for `item` of `session`. */
export function renderItem(item, ctx, session) {
  let body;
  switch (item.kind) {
    case "user_message":
      body = [
        h("div", { class: "who" }, item.origin === "goal"
          ? h("span", { "data-testid": "goal-prompt", title: "Written by the session's goal: " +
            "what its last check said" }, "Goal")
          : item.origin === "hook" ? h("span", { "data-testid": "hook-prompt", title:
            "Written by a hook for the model (its context, or why a Stop hook kept the " +
            "turn going)" }, "Hook") : "You",
          item.queued ? h("span", { class: "chip queued", "data-testid": "queued" }, "queued")
            : null, forTurn(item.for_turn),
          item.blocked ? h("span", { class: "chip bad", "data-testid": "prompt-blocked",
            title: `Not sent to the model: ${item.blocked}` }, "blocked by a hook") : null),
        h("div", { class: "user-text" }, item.text),
        (item.attachments || []).length ? h("div", { class: "attachments",
          "data-testid": "attachments" }, item.attachments.map((a) => IMAGES.has(a.mime)
          ? h("a", { href: api.blobUrl(a), target: "_blank", rel: "noopener" },
            h("img", { src: api.blobUrl(a), alt: a.name, class: "thumb",
              "data-testid": "attachment-image" }))
          : h("a", { class: "chip", href: api.blobUrl(a), download: a.name,
            "data-testid": "attachment-file" }, `${a.name} (${fmtBytes(a.size)})`)))
          : null,
        item.queued ? null : forkButton(item, ctx, session),
        item.queued || turnIndex(session, item.id) < 0 ? null : rewindButton(item, ctx, session)];
      break;
    case "assistant_message":
      body = [
        item.refusal ? h("div", { class: "who refusal", "data-testid": "refusal" },
          "The model declined") : null,
        markdown(item.text, item.streaming ? "streaming" : "", { streaming: item.streaming }),
        item.partial ? h("p", { class: "muted small", "data-testid": "partial" },
          "This answer was cut off before it was complete; the model did not keep it.")
          : null,
        item.streaming ? null : forkButton(item, ctx, session)];
      break;
    case "reasoning":
      if (!item.text && !item.streaming) {
        // encrypted reasoning only: nothing to read, but say it is there
        body = [h("div", { class: "muted small" }, "Reasoned (kept encrypted for the model)")];
        break;
      }
      body = [h("details", { class: "fold reasoning-fold" },
        h("summary", {}, item.streaming ? "Thinking…" : "Reasoning"),
        markdown(item.text, "reasoning-text", { streaming: item.streaming }))];
      break;
    case "notice":
      body = [h("div", { class: `notice notice-${item.code}`, role: "status",
        "data-testid": "notice", "data-code": item.code }, item.text)];
      break;
    case "git_op":
      body = gitOp(item);
      break;
    case "summary":
      body = [h("details", { class: "fold summary-fold", "data-testid": "summary" },
        h("summary", {},
          h("strong", {}, "Conversation compacted"), " ",
          h("span", { class: "muted" }, `${item.items_replaced} earlier items summarized` +
            (item.tokens_before ? ` (context was ${item.tokens_before.toLocaleString()} ` +
              "tokens)" : "") + ({ manual: ", as you asked",
              context_exceeded: ": the model's window was full" }[item.reason] || ""))),
        markdown(item.text, "summary-text"))];
      break;
    case "tool_call":
      body = toolCall(item, ctx, session);
      break;
    case "error_item":
      body = [h("div", { class: "error-text", role: "alert" },
        h("span", { class: "error-words" },
          h("strong", {}, ERROR_HEADS[item.code] ?? `Error (${item.code})`), " ", item.message),
        retryable(item, session) ? retryButton(ctx, session) : null)];
      break;
    case "plan_item":
      body = [h("div", { class: "who" }, "Plan"), item.explanation
        ? h("p", { class: "muted" }, item.explanation) : null, planSteps(item.steps)];
      break;
    default:
      body = [h("pre", { class: "code" }, JSON.stringify(item, null, 2))];
  }
  // hooks of the turn's moments (issue 39), on the item they were about: a prompt's
  // (SessionStart, UserPromptSubmit), an answer's (Stop); a call's are on its card
  const runs = item.kind === "tool_call" ? []
    : ((session && session.hook_runs) || []).filter((r) => r.item_id === item.id);
  return h("div", { class: `item item-${item.kind}`, "data-testid": "item",
    "data-kind": item.kind, "data-item-id": item.id }, body, hookRunsNode(runs));
}
