// One DOM node per session item (user/assistant message, reasoning, tool call, error, plan).
//
// `renderItem(item, ctx)` builds the node from scratch; the session view calls it again when
// the item changes, except for streamed command output, which it appends chunk by chunk
// through the node's AnsiStream (see `appendOutput`).

import { AnsiStream } from "../ansi.js";
import { renderDiff } from "../diff.js";
import { h, shellJoin } from "../dom.js";
import { renderMarkdown } from "../markdown.js";

const streams = new WeakMap(); // output <pre> -> AnsiStream

function markdown(text, cls) {
  const div = h("div", { class: `md ${cls || ""}` });
  div.innerHTML = renderMarkdown(text); // safe: renderMarkdown escapes everything first
  return div;
}

function outputBlock(text) {
  const pre = h("pre", { class: "output", "data-testid": "tool-output", tabindex: "0",
    "aria-label": "Command output" });
  const stream = new AnsiStream();
  streams.set(pre, stream);
  if (text) pre.append(stream.feed(text));
  else pre.classList.add("empty");
  return pre;
}

/** Append streamed output to an item node; false if the node has no output block. */
export function appendOutput(node, delta) {
  const pre = node.querySelector("pre.output");
  const stream = pre && streams.get(pre);
  if (!stream) return false;
  pre.classList.remove("empty");
  const nearEnd = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
  pre.append(stream.feed(delta));
  if (nearEnd) pre.scrollTop = pre.scrollHeight;
  return true;
}

function toolTitle(item) {
  if (item.mcp_server || item.name.startsWith("mcp__")) {
    const server = item.mcp_server || item.name.split("__")[1] || "";
    const tool = item.mcp_tool || item.name.split("__").slice(2).join("__");
    return ["mcp", `${server} · ${tool}`];
  }
  switch (item.name) {
    case "shell": return ["shell", "Command"];
    case "apply_patch": return ["patch", "Edit files"];
    case "read_file": return ["file", "Read file"];
    case "write_file": return ["file", "Write file"];
    case "list_dir": return ["file", "List folder"];
    case "update_plan": return ["plan", "Update plan"];
    default: return ["tool", item.name];
  }
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

function toolBody(item) {
  const parts = [];
  const [kind] = toolTitle(item);
  if (item.name === "shell") {
    const argv = item.command || argvFromArguments(item);
    if (argv) parts.push(h("pre", { class: "command", "data-testid": "tool-command" },
      h("span", { class: "prompt-sign", "aria-hidden": "true" }, "$ "), shellJoin(argv)));
    parts.push(outputBlock(item.output));
    if (item.truncated) parts.push(h("p", { class: "muted small" }, "Output truncated."));
  } else if (item.name === "apply_patch" || item.diff || item.patch) {
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
  } else if (kind === "mcp") {
    parts.push(collapsible("Arguments", h("pre", { class: "code" }, prettyJson(item.arguments))));
    if (item.output) parts.push(outputBlock(item.output));
    if (item.result !== null) {
      parts.push(collapsible("Result", h("pre", { class: "code" }, item.result), true));
    }
  } else {
    if (item.path) parts.push(h("div", { class: "mono path" }, item.path));
    else if (item.name !== "update_plan") {
      parts.push(collapsible("Arguments", h("pre", { class: "code" }, prettyJson(item.arguments))));
    }
    if (item.output) parts.push(outputBlock(item.output));
    if (item.result !== null && item.name !== "update_plan") {
      parts.push(collapsible("Result", h("pre", { class: "code" }, item.result)));
    }
  }
  if (item.error) parts.push(h("p", { class: "tool-error", role: "alert" }, item.error));
  return parts;
}

/** The approval card for a tool call (pending: buttons; decided: one line). */
export function approvalNode(approval, ctx, sessionId, standalone = false) {
  if (approval.status !== "pending") {
    return h("div", { class: `approval-done status-${approval.status}`,
      "data-testid": "approval-decided", "data-approval-id": approval.approval_id },
    `${approval.status === "approved" ? "✓" : "✗"} ${approval.kind} ${approval.status}` +
      (approval.message ? ` — ${approval.message}` : ""));
  }
  const msgId = `reject-msg-${approval.approval_id}`;
  const message = h("input", { id: msgId, class: "input", "data-testid": "reject-message",
    placeholder: "Tell the agent why (optional)", autocomplete: "off" });
  const buttons = [];
  const decide = async (decision) => {
    for (const b of buttons) b.disabled = true;
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
  const what = approval.kind === "command" && approval.command
    ? h("pre", { class: "command" }, h("span", { class: "prompt-sign" }, "$ "),
      shellJoin(approval.command))
    : approval.path ? h("div", { class: "mono path" }, approval.path) : null;
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
    h("strong", {}, `Approve this ${approval.kind}?`),
    approval.reason ? h("span", { class: "muted" }, ` ${approval.reason}`) : null),
  standalone || approval.kind === "command" ? what : null,
  standalone && approval.patch ? renderDiff(approval.patch) : null,
  h("div", { class: "approval-actions" },
    button("approve", "Approve", "approve", "primary"),
    button("approve-session", "Approve for session", "approve_for_session", ""),
    h("label", { for: msgId, class: "sr-only" }, "Reason for rejecting"),
    message, reject));
}

function toolCall(item, ctx, session) {
  const [kind, title] = toolTitle(item);
  const approvals = Object.values(session.approvals).filter((a) => a.item_id === item.id);
  const exit = item.exit_code !== null && item.exit_code !== undefined
    ? h("span", { class: `chip ${item.exit_code === 0 ? "good" : "bad"}`,
      "data-testid": "exit-code" }, `exit ${item.exit_code}`)
    : null;
  return [
    h("div", { class: "tool-head" },
      h("span", { class: `tool-icon icon-${kind}`, "aria-hidden": "true" }),
      h("span", { class: "tool-title" }, title),
      h("span", { class: `chip tool-status status-${item.status}`, "data-testid": "tool-status" },
        item.status),
      exit),
    toolBody(item),
    approvals.map((a) => approvalNode(a, ctx, session.session_id)),
  ];
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

/** A fresh node for `item` of `session`. */
export function renderItem(item, ctx, session) {
  let body;
  switch (item.kind) {
    case "user_message":
      body = [
        h("div", { class: "who" }, "You",
          item.queued ? h("span", { class: "chip queued", "data-testid": "queued" }, "queued")
            : null),
        h("div", { class: "user-text" }, item.text)];
      break;
    case "assistant_message":
      body = [markdown(item.text, item.streaming ? "streaming" : "")];
      break;
    case "reasoning":
      body = [h("details", { class: "fold reasoning-fold" },
        h("summary", {}, item.streaming ? "Thinking…" : "Reasoning"),
        markdown(item.text, "reasoning-text"))];
      break;
    case "tool_call":
      body = toolCall(item, ctx, session);
      break;
    case "error_item":
      body = [h("div", { class: "error-text", role: "alert" },
        h("strong", {}, item.code === "error" ? "Error" : `Error (${item.code})`), " ",
        item.message)];
      break;
    case "plan_item":
      body = [h("div", { class: "who" }, "Plan"), item.explanation
        ? h("p", { class: "muted" }, item.explanation) : null, planSteps(item.steps)];
      break;
    default:
      body = [h("pre", { class: "code" }, JSON.stringify(item, null, 2))];
  }
  return h("div", { class: `item item-${item.kind}`, "data-testid": "item",
    "data-kind": item.kind, "data-item-id": item.id }, body);
}
