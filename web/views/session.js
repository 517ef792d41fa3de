// The session view (`#/session/<id>`): items, plan, approvals, prompt box, controls.
//
// Rendering is lazy and incremental:
// * only the last WINDOW items are built on open; "Show earlier" builds more on demand;
// * while the view follows the end, the oldest built items go again once more than
//   WINDOW + WINDOW_SLACK are built, so a session followed for days keeps a bounded page;
// * an appended item appends one node; an updated item re-renders one node at the next frame;
// * streamed command output is appended to the existing <pre> without re-rendering.

import { api } from "../api.js";
import { ChangesDialog } from "./changes.js";
import { NewSessionDialog } from "./newsession.js";
import { SlashMenu, parseSlash, reviewPrompt } from "./slash.js";
import { MoveDialog } from "./move.js";
import { fmtBytes, h, replaceChildren, showingErrors } from "../dom.js";
import { findItem, findProcess, updateFields } from "../store.js";
import { openRewind, rewoundBranch } from "./rewind.js";
import { memoryOfRepository, memoryPlaces, memoryText } from "../memory.js";
import { missing, processNames, toggleEffects } from "../toggles.js";
import {
  FrameBatch, activity, budgetBox, fmtDuration, fmtUsd, goalWords, isBusy, machineLabel,
  needsAttention, sessionWords,
  statusChip, titleNode, toolDisplay, workerUp,
} from "./common.js";
import {
  appendOutput, approvalNode, planSteps, processChip, renderItem, retryable,
} from "./items.js";

/** Items built when a session opens, and per "Show earlier" click. */
export const WINDOW = 200;

/** How many items past WINDOW a followed view builds before it drops its oldest (in one go,
 * not one per new item). */
export const WINDOW_SLACK = 50;

/** The layout of a phone (style.css says the same width). */
const NARROW = "(max-width: 860px)";

const POLICIES = ["suggest", "auto-edit", "full-auto", "reviewer"];
// "when nobody answers" presets (the attention ladder): remind after 2 min, act after 30
const LADDERS = {
  reject: { nudge_after_s: 120, act_after_s: 1800, on_approval: "reject", on_question: "answer" },
  park: { nudge_after_s: 120, act_after_s: 1800, on_approval: "park", on_question: "park" },
  reviewer: { nudge_after_s: 120, act_after_s: 1800, on_approval: "reviewer",
    on_question: "answer" },
  wait: { nudge_after_s: 120, act_after_s: null, on_approval: "reject", on_question: "answer" },
};
const LADDER_WORDS = [
  ["", "nobody answers: server default"], ["reject", "nobody answers in 30 min: reject"],
  ["park", "nobody answers in 30 min: park"], ["reviewer", "nobody answers in 30 min: reviewer"],
  ["wait", "nobody answers: remind, then wait"],
];

/** Which preset a session's own ladder is ("" : none of its own, or not a preset). */
function ladderPreset(s) {
  const own = s.attention_setting;
  if (!own) return "";
  const found = Object.entries(LADDERS).find(([, v]) => v.nudge_after_s === own.nudge_after_s &&
    v.act_after_s === own.act_after_s && v.on_approval === own.on_approval &&
    v.on_question === own.on_question);
  return found ? found[0] : "";
}
const SANDBOXES = [["workspace-write", "sandbox: workspace"], ["read-only", "sandbox: read-only"],
  ["full-access", "no sandbox"]];

// A session's reasoning effort (`null`: the model's own default).
const EFFORTS = [["", "effort: default"], ["minimal", "effort: minimal"], ["low", "effort: low"],
  ["medium", "effort: medium"], ["high", "effort: high"]];

// Events that change the header / side panel rather than one item.
const HEADER_EVENTS = new Set([
  "session_status_changed", "session_title_changed", "session_policy_changed", "plan_updated",
  "session_attention_changed",
  "session_sandbox_changed", "session_model_changed", "worktree_updated",
  "session_workspace_changed", "token_usage_recorded", "worker_connected", "worker_disconnected",
  "worker_revoked", "worker_paired", "approval_requested", "approval_resolved",
  "session_context_updated", "memory_updated", "session_archived", "session_moved",
  "question_asked", "question_answered", "compaction_requested", "session_deleted",
  "plan_approved", "process_started", "process_output", "process_stop_requested",
  "process_ended", "process_listening", "process_forward_requested", "process_forwarded",
  "goal_set", "goal_checked", "goal_met", "goal_given_up",
  "budget_set", "budget_reached",
  "agent_mode_updated", "agent_config_updated",
]);

// Keys that scroll the transcript (when no field has the focus), Tab moving to a control in it
const SCROLL_KEYS = new Set(["ArrowUp", "ArrowDown", "PageUp", "PageDown", "Home", "End", " ",
  "Tab"]);

const PROCESS_EVENTS = new Set(["process_started", "process_output", "process_stop_requested",
  "process_ended", "process_listening", "process_forward_requested", "process_forwarded"]);

export class SessionView {
  constructor(ctx, sessionId) {
    this.ctx = ctx;
    this.sessionId = sessionId;
    this._nodes = new Map(); // item id -> node
    this._dirty = new Set(); // item ids to re-render
    this._headerDirty = true;
    this._start = 0; // index of the first built item
    this._built = 0; // items built so far (items[_start.._built))
    this._batch = new FrameBatch(() => this._flush());
    this._stick = true; // follow new items while the user is at the bottom
    // when the connection to the server was lost (null: live), for the activity's clock
    this._cutAt = ctx.socket && ctx.socket.status !== "live" ? Date.now() / 1000 : null;
    this._userScrolled = false; // the user scrolled since the transcript was last at its end
    this._build();
    // processes' live output comes beside the events: written into the panel as it comes
    this._unTails = ctx.store.tails.subscribe((ids) => this._onTails(ids));
  }

  get session() {
    return this.ctx.store.state.sessions[this.sessionId] || null;
  }

  _build() {
    this._title = h("h2", { class: "s-title", "data-testid": "session-title" });
    this._meta = h("div", { class: "s-meta" });
    this._badges = h("span", { class: "s-badges" }); // beside the title: "archived"
    this._status = h("span", {});
    this._gone = h("span", {});
    this._policy = h("select", { id: "policy-select", class: "input compact",
      "data-testid": "policy-select", onchange: () => this._setPolicy() },
    POLICIES.map((p) => h("option", { value: p }, p)));
    this._ladder = h("select", { id: "attention-select", class: "input compact",
      "data-testid": "attention-select",
      title: "When nobody answers an approval or a question (the attention ladder)",
      onchange: () => this._setLadder() },
    LADDER_WORDS.map(([v, text]) => h("option", { value: v }, text)));
    this._sandbox = h("select", { id: "sandbox-select", class: "input compact",
      "data-testid": "sandbox-select", title: "The OS sandbox this session's commands run in",
      onchange: () => this._setSandbox() },
    SANDBOXES.map(([v, text]) => h("option", { value: v }, text)));
    this._network = h("input", { type: "checkbox", id: "network-toggle",
      "data-testid": "network-toggle", onchange: () => this._setSandbox() });
    // the provider and model (and effort) of the next turn, as Codex's /model switches them
    this._model = h("select", { id: "model-select", class: "input compact",
      "data-testid": "model-select", title: "The model this session's next turn uses",
      onchange: () => this._setModel() });
    this._effort = h("select", { id: "effort-select", class: "input compact",
      "data-testid": "effort-select", title: "How hard a reasoning model thinks",
      onchange: () => this._setModel() },
    EFFORTS.map(([v, text]) => h("option", { value: v }, text)));
    this._sandboxBadge = h("span", {});
    // A change that takes access away from running processes stops them (they keep the
    // sandbox they started in): asked here first, in two clicks as closing a terminal is.
    this._toggleText = h("span", { class: "small", "data-testid": "toggle-ask-text" });
    this._toggleAsk = h("div", { class: "s-ask", hidden: true, role: "group",
      "data-testid": "toggle-ask", "aria-label": "Stop running processes?" },
    this._toggleText,
    h("span", { class: "row gap" },
      h("button", { class: "btn danger", type: "button", "data-testid": "toggle-confirm",
        onclick: () => this._confirmSandbox() }, "Stop them and change"),
      h("button", { class: "btn", type: "button", "data-testid": "toggle-cancel",
        onclick: () => this._cancelSandbox() }, "Cancel")));
    // the policy, the sandbox and the network: in the header, or (on a phone, where they
    // do not fit beside the status and Interrupt) at the top of the session's menu
    // an ACP agent's own mode and config options (it picks its model: no model select)
    this._agentSettings = h("span", { class: "s-agent-settings", hidden: true,
      "data-testid": "agent-settings" });
    this._settings = h("div", { class: "s-settings", "data-testid": "session-settings" },
      this._agentSettings,
      h("label", { for: "model-select", class: "sr-only" }, "Model"), this._model,
      h("label", { for: "effort-select", class: "sr-only" }, "Reasoning effort"), this._effort,
      h("label", { for: "policy-select", class: "sr-only" }, "Approval policy"),
      this._policy,
      h("label", { for: "attention-select", class: "sr-only" }, "When nobody answers"),
      this._ladder,
      h("label", { for: "sandbox-select", class: "sr-only" }, "Sandbox"), this._sandbox,
      h("label", { for: "network-toggle", class: "check small",
        title: "Sandboxed commands may use the network" }, this._network, " network"));
    this._narrow = window.matchMedia("(max-width: 860px)");
    this._onNarrow = () => this._placeSettings();
    this._narrow.addEventListener("change", this._onNarrow);
    this._interrupt = h("button", { class: "btn danger", type: "button",
      "data-testid": "interrupt", onclick: () => this._doInterrupt() }, "Interrupt");
    this._download = h("a", { class: "btn subtle wide-only", "data-testid": "download-log",
      href: api.sessionLogUrl(this.sessionId), download: `session-${this.sessionId}.ndjson` },
    "Download log");
    // a shell on the session's machine, in its workdir (when the machine's owner allows it)
    this._terminal = h("button", { class: "btn subtle wide-only", type: "button", hidden: true,
      "data-testid": "open-terminal", title: "A shell on this machine, in this workdir",
      onclick: () => this._openTerminal() }, "Terminal");
    // the session's whole change in its worktree: review it, ship it
    this._changes = h("button", { class: "btn", type: "button", hidden: true,
      "data-testid": "open-changes", title: "Everything this session changed against its base",
      onclick: () => new ChangesDialog(this.ctx, this.sessionId).open() }, "Changes");
    this._title.addEventListener("click", () => this._startRename());
    this._title.title = "Click to rename";
    this._menu = h("details", { class: "menu", "data-testid": "session-menu" });
    this._earlier = h("button", { class: "btn subtle earlier", type: "button",
      "data-testid": "show-earlier", onclick: () => this._showEarlier() }, "Show earlier");
    this._list = h("div", { class: "s-list" });
    this._orphans = h("div", { class: "s-orphans" }); // approvals whose item is not built
    this._scroller = h("div", { class: "s-scroll", "data-testid": "session-items",
      tabindex: "-1" }, this._earlier, this._list, this._orphans);
    // Only the user stops the following, by scrolling up (wheel, touch, keys, the scrollbar).
    // A scroll event also comes when the browser moves or clamps scrollTop as items change
    // size, and it comes a frame late, measured against what was added meanwhile: read as
    // the user's, it stopped the following after an approval was decided.
    const byUser = () => { this._userScrolled = true; };
    this._scroller.addEventListener("wheel", byUser, { passive: true });
    this._scroller.addEventListener("touchmove", byUser, { passive: true });
    this._scroller.addEventListener("pointerdown", (ev) => {
      if (ev.target === this._scroller) byUser(); // its scrollbar
    });
    this._scroller.addEventListener("keydown", (ev) => {
      if (SCROLL_KEYS.has(ev.key) && !ev.target.closest("input, textarea, select")) byUser();
    });
    this._scroller.addEventListener("scroll", () => {
      const s = this._scroller;
      if (s.scrollHeight - s.scrollTop - s.clientHeight < 48) {
        this._stick = true;
        this._userScrolled = false;
      } else if (this._userScrolled) {
        this._stick = false;
      }
      if (this._jump) this._jump.hidden = this._stick;
    }, { passive: true });
    this._side = h("aside", { class: "s-side", "aria-label": "Plan and workspace" });
    this._input = h("textarea", { id: "prompt-input", class: "input prompt-input",
      "data-testid": "prompt-input", rows: 2, placeholder: "Ask Codey… (/ for commands)" });
    // before the Enter that sends: the menu's Enter picks its entry
    this._slash = new SlashMenu(this.ctx, this.sessionId, this._input, () => this.session,
      (entry, args) => this._runSlash(entry, args));
    this._send = h("button", { class: "btn primary", type: "submit",
      "data-testid": "prompt-send" }, "Send");
    this._attachments = []; // uploaded, waiting to be sent with the next message
    this._chips = h("div", { class: "attach-chips", "data-testid": "attach-chips" });
    this._fileInput = h("input", { type: "file", multiple: true, hidden: true,
      "data-testid": "attach-input", onchange: (ev) => {
        this._upload([...ev.target.files]);
        ev.target.value = "";
      } });
    const attach = h("button", { class: "btn subtle", type: "button", "data-testid": "attach",
      title: "Attach files or images (or paste / drop them here)",
      onclick: () => this._fileInput.click() }, "Attach");
    const form = h("form", { class: "s-prompt", onsubmit: (ev) => {
      ev.preventDefault();
      this._sendPrompt();
    } },
    this._slash.el, h("label", { for: "prompt-input", class: "sr-only" }, "Message to the agent"),
    h("div", { class: "prompt-col" }, this._chips, this._input), attach, this._fileInput,
    this._send);
    this._input.addEventListener("paste", (ev) => {
      const files = [...(ev.clipboardData ? ev.clipboardData.files : [])];
      if (files.length) {
        ev.preventDefault();
        this._upload(files);
      }
    });
    form.addEventListener("dragover", (ev) => {
      if (ev.dataTransfer && [...ev.dataTransfer.types].includes("Files")) ev.preventDefault();
    });
    form.addEventListener("drop", (ev) => {
      const files = [...(ev.dataTransfer ? ev.dataTransfer.files : [])];
      if (files.length) {
        ev.preventDefault();
        this._upload(files);
      }
    });
    this._input.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        form.requestSubmit();
      }
    });
    this._missing = h("p", { class: "muted s-missing", "data-testid": "session-missing" },
      "Waiting for this session…");
    this._budgetStop = h("div", { class: "budget-slot" });
    this._budgetForm = this._buildBudgetForm();
    this._activity = h("div", { class: "activity", "data-testid": "activity",
      role: "status", "aria-live": "polite", hidden: true });
    // (an error's own Retry, beside it, is "retry": see items.js)
    this._retry = h("button", { class: "btn small", type: "button", "data-testid": "retry-turn",
      hidden: true, onclick: () => this._doRetry() }, "Retry");
    this._jump = h("button", { class: "btn small jump", type: "button",
      "data-testid": "jump-latest", hidden: true, onclick: () => {
        this._stick = true;
        this._scrollToEnd();
        this._jump.hidden = true;
      } }, "↓ Jump to latest");
    this._ticker = setInterval(() => {
      this._renderActivity();
      tickRateLimits(this._side);
    }, 1000);
    this._closedNote = h("p", { class: "muted s-closed", "data-testid": "session-closed" },
      "This session is closed: fork it to go on from here.");
    // its worktree was removed: nothing runs there (a folder made again empty in its place
    // once ran the tests on nothing, "Ran 0 tests … OK"); the two ways on, in its place
    this._worktreeGone = h("div", { class: "s-ask s-worktree-gone", hidden: true,
      role: "group", "data-testid": "worktree-removed", "aria-label": "The worktree was removed" });
    this.el = h("section", { class: "session", "data-testid": "session-view",
      "data-session-id": this.sessionId },
    h("header", { class: "s-head" },
      h("div", { class: "s-head-main" },
        h("a", { href: "#/", class: "back", "aria-label": "Back to dashboard" }, "←"),
        h("div", { class: "s-head-text" },
          h("div", { class: "s-title-row" }, this._title, this._badges), this._meta)),
      h("div", { class: "s-controls" },
        this._status, this._gone, this._settings, this._sandboxBadge, this._interrupt,
        this._changes, this._terminal, this._download, this._menu)),
    this._toggleAsk,
    this._budgetForm,
    this._missing,
    h("div", { class: "s-body" }, h("div", { class: "s-main" }, this._scroller, this._jump,
      h("div", { class: "activity-row" }, this._activity, this._retry),
      this._budgetStop), this._side),
    this._closedNote, this._worktreeGone, form);
    this._form = form;
    // toasts sit above the prompt box (style.css), whatever its height
    this._formSize = new ResizeObserver(() => {
      document.documentElement.style.setProperty("--toast-bottom", `${form.offsetHeight}px`);
    });
    this._formSize.observe(form);
    // a rewound prompt's text comes back in the prompt box, to be edited and sent again
    this._onPromptText = (ev) => {
      if (ev.detail.sessionId !== this.sessionId) return;
      this._input.value = ev.detail.text;
      this._input.focus();
    };
    window.addEventListener("codey:prompt-text", this._onPromptText);
    this._renderAll();
  }

  /** Build the header and the last WINDOW items from scratch. */
  _renderAll() {
    const s = this.session;
    this._rendered = Boolean(s);
    this._missing.hidden = Boolean(s);
    this._nodes.clear();
    this._dirty.clear();
    this._list.replaceChildren();
    if (!s) {
      this._start = 0;
      this._built = 0;
      this._earlier.hidden = true;
      this._renderHeader();
      return;
    }
    const n = s.items.length;
    this._start = Math.max(0, n - WINDOW);
    this._built = n;
    const frag = document.createDocumentFragment();
    for (let i = this._start; i < n; i++) frag.append(this._node(s.items[i], s));
    this._list.append(frag);
    this._placeRewound(s);
    this._earlier.hidden = this._start === 0;
    this._earlier.textContent = `Show earlier (${this._start} more)`;
    this._renderHeader();
    this._orphans.dataset.sig = "";
    this._renderOrphans();
    this._scrollToEnd();
  }

  /** The branches rewinds took back, folded, each after the live item it followed (those
   * before the built window stay out of it, as the items there). */
  _placeRewound(s) {
    for (const branch of s.rewound || []) {
      const node = rewoundBranch(branch, this.ctx, s);
      const after = branch.after ? this._nodes.get(branch.after) : null;
      if (after) {
        // after the item and any branch already placed behind it
        let at = after;
        while (at.nextSibling && at.nextSibling.dataset &&
          at.nextSibling.dataset.testid === "rewound-branch") at = at.nextSibling;
        at.after(node);
      } else if (!branch.after && this._start === 0) {
        let at = null;
        for (const c of this._list.children) {
          if (c.dataset.testid === "rewound-branch") at = c;
          else break;
        }
        if (at) at.after(node);
        else this._list.prepend(node);
      }
    }
  }

  _node(item, s) {
    const node = renderItem(item, this.ctx, s);
    this._nodes.set(item.id, node);
    return node;
  }

  _showEarlier() {
    const s = this.session;
    if (!s || this._start === 0) return;
    const from = Math.max(0, this._start - WINDOW);
    const frag = document.createDocumentFragment();
    for (let i = from; i < this._start; i++) frag.append(this._node(s.items[i], s));
    const before = this._scroller.scrollHeight;
    this._list.prepend(frag);
    this._scroller.scrollTop += this._scroller.scrollHeight - before; // keep the view still
    this._start = from;
    this._earlier.hidden = from === 0;
    this._earlier.textContent = `Show earlier (${from} more)`;
    this._renderOrphans();
  }

  /** While the view follows the end, the items built above the last WINDOW go once more
   * than WINDOW + WINDOW_SLACK are built ("Show earlier" builds them again): followed for
   * hours, the page held every item streamed since it opened (issue 36). Not while the user
   * reads further up. */
  _dropOldest(s) {
    if (!this._stick || this._built - this._start <= WINDOW + WINDOW_SLACK) return;
    const from = this._built - WINDOW;
    for (let i = this._start; i < from; i++) {
      const id = s.items[i].id;
      const node = this._nodes.get(id);
      if (node) node.remove();
      this._nodes.delete(id);
      this._dirty.delete(id);
    }
    this._start = from;
    this._earlier.hidden = false;
    this._earlier.textContent = `Show earlier (${from} more)`;
  }

  /** Called by the router once `el` is in the document (scrolling needs layout). */
  mounted() {
    this._scrollToEnd();
  }

  _scrollToEnd() {
    this._scroller.scrollTop = this._scroller.scrollHeight;
  }

  /** Store changes: decide what to update; DOM work happens in `_flush` at the next frame. */
  onChange(change) {
    // the session came (a fork opened before its event arrived, a reconnect): build it all,
    // the "Waiting for this session…" line goes
    if (change.kind === "reset" || (!this._rendered && this.session)) {
      this._renderAll();
      return;
    }
    const env = change.env;
    const e = env.event;
    if (e.type === "worker_connected" || e.type === "worker_disconnected" ||
        e.type === "worker_revoked") {
      // a running command's card says "waiting for machine" while its worker is away
      const cur = this.session;
      for (const item of (cur && cur.worker_id === e.worker_id) ? cur.items : []) {
        if (item.kind === "tool_call" && item.status === "running") this._dirty.add(item.id);
      }
    }
    if (env.session_id !== this.sessionId) {
      const other = env.session_id && this.ctx.store.state.sessions[env.session_id];
      if (e.type === "approval_requested" && other && descendants(this.ctx.store.state,
        this.sessionId).includes(other)) this._reveal = e.approval_id; // asked here too
      if (other && other.parent_id === this.sessionId && other.parent_item) {
        this._dirty.add(other.parent_item); // a sub-agent's card shows its live status
        this._batch.schedule();
      }
      if (HEADER_EVENTS.has(e.type)) {
        this._headerDirty = true;
        this._batch.schedule();
      }
      return;
    }
    const s = this.session;
    switch (e.type) {
      case "session_created":
        this._renderAll();
        return;
      case "session_item_appended":
        // Built at flush time, in order, from `_built` on.
        break;
      case "session_item_updated": {
        const node = this._nodes.get(e.item_id);
        if (!node) break;
        // A chunk of command output and nothing else is appended to the node's <pre>; any
        // other change re-renders the node from the folded item.
        const carried = updateFields(e);
        const onlyOutput = carried.length === 1 && carried[0] === "output_delta";
        if (onlyOutput && !this._dirty.has(e.item_id) && appendOutput(node, e.output_delta)) {
          if (this._stick) this._batch.schedule();
          return;
        }
        this._dirty.add(e.item_id);
        break;
      }
      case "approval_requested":
        this._dirty.add(e.item_id);
        this._headerDirty = true;
        this._reveal = e.approval_id; // its buttons come into view, above the prompt box
        break;
      case "approval_resolved": {
        const a = s && s.approvals[e.approval_id];
        if (a) this._dirty.add(a.item_id);
        this._headerDirty = true;
        break;
      }
      case "approval_reviewed": // the reviewer's verdict shows on the approval
      case "attention_scheduled": // the ladder's countdown beside it
      case "attention_acted": {
        const a = s && s.approvals[e.approval_id || e.target_id];
        if (a) this._dirty.add(a.item_id);
        this._headerDirty = true;
        break;
      }
      case "question_asked":
        this._dirty.add(e.item_id);
        this._headerDirty = true;
        break;
      case "hook_ran": // shown on its item (a call's card, a prompt, an answer)
        if (e.item_id) this._dirty.add(e.item_id);
        break;
      case "question_answered": {
        const q = s && s.questions[e.question_id];
        if (q) this._dirty.add(q.item_id);
        this._headerDirty = true;
        break;
      }
      case "session_deleted":
      case "conversation_rewound": // items left the live branch: build it again
        this._renderAll();
        return;
      case "session_status_changed": {
        // the error the session stopped on carries Retry while it stays stopped there
        const last = s && [...s.items].reverse().find((i) => i.kind === "error_item");
        if (last) this._dirty.add(last.id);
        this._headerDirty = true;
        break;
      }
      default:
        if (PROCESS_EVENTS.has(e.type) && s) {
          // the exec call's card shows its process's state
          const p = findProcess(s, e.process_id);
          if (p) this._dirty.add(p.item_id);
        }
        if (HEADER_EVENTS.has(e.type)) this._headerDirty = true;
    }
    this._batch.schedule();
  }

  _flush() {
    const s = this.session;
    if (!s) {
      this._renderHeader();
      return;
    }
    if (s.items.length > this._built) {
      const frag = document.createDocumentFragment();
      for (let i = this._built; i < s.items.length; i++) {
        frag.append(this._node(s.items[i], s));
        this._dirty.delete(s.items[i].id);
      }
      this._built = s.items.length;
      this._list.append(frag);
      this._dropOldest(s);
    }
    for (const id of this._dirty) {
      const old = this._nodes.get(id);
      const item = findItem(s, id);
      if (!old || !item) continue;
      const fresh = this._node(item, s);
      keepOpenState(old, fresh);
      old.replaceWith(fresh);
      const out = fresh.querySelector("pre.output");
      if (out) out.scrollTop = out.scrollHeight; // output follows its tail

    }
    this._dirty.clear();
    if (this._headerDirty) {
      this._headerDirty = false;
      this._renderHeader();
    }
    this._renderOrphans();
    if (this._stick) this._scrollToEnd();
    if (this._reveal) this._revealApproval();
  }

  /** Scroll the approval just asked for into view (its buttons first). */
  _revealApproval() {
    const id = this._reveal;
    this._reveal = null;
    const node = this.el.querySelector(
      `[data-testid=approval][data-approval-id="${CSS.escape(id)}"]`);
    if (!node) return;
    (node.querySelector(".approval-actions") || node).scrollIntoView({ block: "nearest" });
  }

  _renderHeader() {
    const s = this.session;
    const state = this.ctx.store.state;
    this._closedNote.hidden = !s || s.status !== "closed";
    const removed = Boolean(s && s.status !== "closed" && s.worktree &&
      s.worktree.status === "removed");
    this._worktreeGone.hidden = !removed;
    if (removed) this._renderWorktreeGone(s);
    this._form.hidden = Boolean(s && (s.status === "closed" || removed));
    if (s) this._renderMenu(s);
    if (!s) {
      this._missing.textContent = this._seen ? "This session was deleted." : "Waiting for this session…";
      this._title.textContent = "Session";
      this._send.disabled = true;
      this._interrupt.hidden = true;
      this._policy.disabled = true;
      return;
    }
    this._seen = true;
    this._send.disabled = false;
    this._policy.disabled = false;
    if (!this._renaming) this._showTitle(s.title);
    document.title = `${s.title || "Session"} · Codey`;
    const w = state.workers[s.worker_id];
    const link = (id, testid, words) => {
      const other = state.sessions[id];
      return [h("a", { href: `#/session/${encodeURIComponent(id)}`, "data-testid": testid,
        title: other ? other.title : id }, words, other ? ` “${other.title}”` : ""), " · "];
    };
    // where it comes from first (the line is cut at its end when the screen is narrow)
    replaceChildren(this._meta,
      s.parent_id ? link(s.parent_id, "parent-link", "sub-agent of") : null,
      s.forked_from ? link(s.forked_from, "forked-from", "forked from") : null,
      h("span", {}, w ? machineLabel(state, w) : s.worker_id), " · ",
      s.worktree ? [h("span", { class: "chip mono", "data-testid": "worktree-branch",
        title: worktreeWords(s.worktree) }, `⎇ ${s.worktree.branch}`,
      s.worktree.files ? ` +${s.worktree.added} −${s.worktree.deleted}` : ""), " · "] : null,
      h("span", { class: "mono", title: s.workdir }, s.workdir), " · ",
      h("span", { "data-testid": "session-model" }, modelWords(s, this.ctx.config)),
      s.usage.turns ? h("span", { class: "muted", "data-testid": "session-usage" },
        ` · ${s.usage.total_tokens.toLocaleString()} tokens · ${fmtUsd(s.usage.cost_micros)}`)
        : null,
      s.budget ? h("span", { class: "muted", "data-testid": "session-budget" },
        ` · budget ${[s.budget.max_tokens != null ? `${s.budget.max_tokens.toLocaleString()} tokens`
          : "", s.budget.max_micros != null ? fmtUsd(s.budget.max_micros) : ""]
          .filter(Boolean).join(" or ")}`) : null);
    replaceChildren(this._budgetStop, budgetBox(s, this.ctx.socket, this.ctx.toast));
    replaceChildren(this._badges, s.archived
      ? h("span", { class: "chip", "data-testid": "archived" }, "archived") : null);
    const status = statusChip(s.status, "session-status", sessionWords(s));
    if (s.status_reason) status.title = s.status_reason;
    // the words are in the chip; the badge only marks it (no status said twice)
    this._status.replaceChildren(status, needsAttention(s.status)
      ? h("span", { class: "badge attention dot", "data-testid": "attention-badge",
        "aria-label": "needs you", title: "needs you" }) : "");
    // an error's Retry is beside it (items.js); here for a stopped turn, or an error that
    // left no item to put it beside. (A removed worktree: its bar offers the ways on, and a
    // retry would be refused.)
    this._retry.hidden = removed || !(s.status === "interrupted" || (s.status === "error" &&
      !s.items.some((i) => i.kind === "error_item" && retryable(i, s))));
    this._renderActivity();
    this._gone.replaceChildren(workerUp(state, s.worker_id) ? "" : h("span", {
      class: "chip gone", "data-testid": "worker-gone" }, "machine offline"));
    this._terminal.hidden = !(w && w.capabilities && w.capabilities.terminal && !w.revoked);
    this._renderModel(s);
    this._changes.hidden = !(s.worktree && s.worktree.status === "ready");
    if (this._policy.value !== s.policy) this._policy.value = s.policy;
    if (this._ladder.value !== ladderPreset(s)) this._ladder.value = ladderPreset(s);
    if (this._asking) {
      this._askSandbox(); // the processes it would stop may have changed meanwhile
    } else if (!this._sendingSandbox) {
      // (while a change is on its way the controls keep it: a render from the state before
      // it, with a running process's output, turned a just-ticked box off again)
      if (this._sandbox.value !== s.sandbox) this._sandbox.value = s.sandbox;
      this._network.checked = Boolean(s.network);
    }
    this._network.disabled = this._sandbox.value === "full-access";
    this._sandboxBadge.replaceChildren(sandboxBadge(s, w));
    const proposed = s.plan_status === "proposed";
    const busy = isBusy(s.status) && !proposed;
    const running = s.processes.some((p) => p.status === "running");
    // only while there is something to stop: a turn, or processes the agent left running
    // (an interrupt stops them too)
    this._interrupt.hidden = !busy && !running;
    this._interrupt.disabled = false;
    this._interrupt.title = running ? "Stop the agent and the processes it started" : "";
    this._input.placeholder = proposed ? "Feedback on the plan (the agent revises it)…"
      : busy ? "Steer the agent — sent before its next step…" : "Ask Codey… (/ for commands)";
    this._renderSide(s);
  }

  _renderSide(s) {
    const parts = [];
    if (s.goal) parts.push(goalBox(s.goal, () => this._clearGoal()));
    if (s.processes.length) parts.push(this._processesBox(s));
    parts.push(this._planBox(s));
    if (s.changed_paths.length) {
      parts.push(h("section", { class: "side-box", "aria-label": "Changed files",
        "data-testid": "changed-files" },
        h("h3", {}, "Changed files"),
        h("ul", { class: "paths" }, s.changed_paths.slice(-30).reverse().map((p) =>
          h("li", { class: "mono ellipsis", title: p }, p)))));
    }
    parts.push(this._contextBox(s), this._memoryBox(s));
    const u = s.usage;
    parts.push(h("section", { class: "side-box", "aria-label": "Usage" },
      h("h3", {}, "Usage"),
      contextGauge(u),
      h("dl", { class: "facts" },
        h("dt", {}, "Turns"), h("dd", {}, String(u.turns)),
        h("dt", {}, "Input"), h("dd", {}, u.input_tokens.toLocaleString()),
        h("dt", {}, "Cached"), h("dd", { "data-testid": "cached-tokens" },
          (u.cached_tokens || 0).toLocaleString()),
        h("dt", {}, "Cache writes"), h("dd", { "data-testid": "cache-write-tokens" },
          (u.cache_write_tokens || 0).toLocaleString()),
        h("dt", {}, "Output"), h("dd", {}, u.output_tokens.toLocaleString()),
        h("dt", {}, "Reasoning"), h("dd", {}, u.reasoning_tokens.toLocaleString())),
      rateLimits(this.ctx.store.state.rate_limits[s.provider]),
      h("button", { class: "btn small", type: "button", "data-testid": "compact",
        disabled: s.compaction_requested || !s.items.length,
        title: "Summarize the older conversation into one item, to free the context",
        onclick: () => this._compact() },
      s.compaction_requested ? "Compacting…" : "Compact")));
    replaceChildren(this._side, parts);
  }

  /** Live output of this session's processes came: their panels' text is replaced in place
   * (no re-render: a selection or a scrolled-back view stays), following the end when the
   * view was at it. */
  _onTails(ids) {
    const s = this.session;
    if (!s) return;
    for (const id of ids) {
      const p = findProcess(s, id);
      const pre = p && this._side.querySelector(
        `pre[data-testid=process-output][data-process-id="${CSS.escape(id)}"]`);
      if (!pre) continue;
      const { text, label } = processOutput(p, this.ctx.store.tails.get(id));
      const atEnd = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
      pre.textContent = text;
      pre.classList.toggle("empty", !text);
      const summary = pre.parentElement && pre.parentElement.querySelector("summary");
      if (summary) summary.textContent = label;
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
  }

  /** What a process listens on inside its sandbox's own network, and the forwards asked
   * for: a sentence saying why no one can reach it, a Forward button per port (when its
   * machine's worker can), and where a forwarded one is. */
  _portsNote(s, p) {
    const forwards = new Map(p.forwards.map((f) => [f.port, f]));
    const shown = [...new Set([...p.ports, ...p.forwards.filter((f) => f.status === "open" ||
      f.status === "opening").map((f) => f.port)])].sort((a, b) => a - b);
    if (p.status !== "running" || !shown.length) return null;
    const w = this.ctx.store.state.workers[p.worker_id];
    const canForward = Boolean(w && w.capabilities.executors.includes("exec_forward"));
    const where = w ? machineLabel(this.ctx.store.state, w) : "its machine";
    const ports = shown.length === 1 ? `port ${shown[0]} is` : `ports ${shown.join(", ")} are`;
    const rows = shown.map((port) => {
      const f = forwards.get(port);
      let what;
      if (f && f.status === "open") {
        what = h("span", { "data-testid": "process-forwarded" }, "forwarded to ",
          h("a", { href: `http://${f.address}/`, target: "_blank", rel: "noopener noreferrer",
            class: "mono" }, f.address), ` on ${where}`);
      } else if (f && f.status === "opening") {
        what = h("span", { class: "muted", "data-testid": "process-forwarding" }, "forwarding…");
      } else if (canForward) {
        what = [f && f.status === "failed" ? h("span", { class: "bad",
          "data-testid": "process-forward-error" }, `not forwarded: ${f.error} `) : null,
        h("button", { class: "btn small", type: "button", "data-testid": "process-forward",
          "data-port": String(port),
          title: `Make port ${port} reachable at 127.0.0.1 on ${where} (only there)`,
          onclick: async (ev) => {
            ev.currentTarget.disabled = true;
            try {
              await this.ctx.socket.forwardPort(s.session_id, p.process_id, port);
            } catch (err) {
              this.ctx.toast(`Not forwarded: ${err.message}`, "error");
            }
          } }, `Forward ${port}`)];
      } else {
        what = null;
      }
      return h("li", { "data-port": String(port) }, h("span", { class: "mono" }, String(port)),
        what ? " " : null, what);
    });
    const open = shown.every((port) => (forwards.get(port) || {}).status === "open");
    const how = open ? " inside the sandbox, and on this machine through its forward:"
      : " only inside the sandbox. Turn the network on and restart it to reach it" +
        (canForward ? ", or forward it to this machine's loopback:" : ".");
    return h("div", { class: "small process-ports", "data-testid": "process-isolated" },
      h("p", {}, `Network off: ${ports} reachable${how}`), h("ul", { class: "plain" }, rows));
  }

  /** The processes the agent started (`exec`), newest first: each with its live output
   * (what was read from it when the server has none), and a Stop button while it runs. */
  _processesBox(s) {
    // open while it lives, unless the user folded it; what the user chose stays
    this._processOpen = this._processOpen || new Map();
    const rows = [...s.processes].reverse().map((p) => {
      const stop = p.status === "running" ? h("button", { class: "btn small danger",
        type: "button", "data-testid": "process-stop",
        "aria-label": `Stop ${p.argv.join(" ")}`, onclick: async (ev) => {
          ev.currentTarget.disabled = true;
          try {
            await this.ctx.socket.stopProcess(s.session_id, p.process_id);
          } catch (err) {
            this.ctx.toast(`Not stopped: ${err.message}`, "error");
          }
        } }, "Stop") : null;
      const { text, label } = processOutput(p, this.ctx.store.tails.get(p.process_id));
      const out = h("pre", { class: "output", "data-testid": "process-output", tabindex: "0",
        "aria-label": "Process output", "data-process-id": p.process_id }, text);
      if (!text) out.classList.add("empty");
      const live = p.status === "running" || p.status === "stopping";
      // shown open while it lives, and after it ended too (until the user folds it); on a
      // phone, above the transcript, folded until opened (as the plan is)
      if (live && !this._processOpen.has(p.process_id)) {
        this._processOpen.set(p.process_id, !matchMedia(NARROW).matches);
      }
      const chosen = this._processOpen.get(p.process_id);
      const details = h("details", { class: "fold", open: chosen ?? live },
        h("summary", { class: "muted small", onclick: () => {
          // the user's choice (a click toggles it after this handler)
          this._processOpen.set(p.process_id, !details.open);
        } }, label), out);
      // it keeps the sandbox it started in: say what a restart would give it
      const gaps = p.status === "running" ? missing(s, p) : [];
      const old = gaps.length ? h("p", { class: "small process-old",
        "data-testid": "process-old-settings" },
      `Started with the old settings: no ${gaps.join(" and no ")} until it is restarted.`)
        : null;
      return h("div", { class: "process", "data-testid": "process",
        "data-process-id": p.process_id, "data-status": p.status },
      h("div", { class: "process-head" },
        h("span", { class: "mono", title: p.process_id }, p.argv.join(" ")),
        processChip(p), stop), old, this._portsNote(s, p), details);
    });
    this.ctx.store.tails.prune(s.session_id, s.processes.map((p) => p.process_id));
    const box = h("section", { class: "side-box", "data-testid": "processes",
      "aria-label": "Processes" }, h("h3", {}, "Processes"), rows);
    requestAnimationFrame(() => {
      for (const pre of box.querySelectorAll("pre.output")) pre.scrollTop = pre.scrollHeight;
    });
    return box;
  }

  /** The plan; in plan mode, the proposed plan's approval (as it is, or edited). */
  _planBox(s) {
    // On a phone the plan sits above the transcript: folded to one line unless opened (or
    // proposed, when it waits for the user); on a wide screen it is open.
    const proposed = s.plan_status === "proposed";
    const narrow = matchMedia(NARROW).matches;
    const done = s.plan.filter((p) => p.status === "done").length;
    const current = s.plan.find((p) => p.status === "in_progress");
    const box = h("details", { class: `side-box plan-box${!s.plan.length && !s.plan_mode
      ? " plan-empty" : ""}`, "data-testid": "plan", "aria-label": "Plan",
    open: proposed || (this._planOpen ?? !narrow) },
    h("summary", {}, h("h3", {}, s.plan_mode ? "Plan (plan mode)" : "Plan"),
      s.plan.length ? h("span", { class: "muted small plan-progress" },
        `${done}/${s.plan.length} done${current ? ` · ${current.step}` : ""}`) : null),
    s.plan_explanation ? h("p", { class: "muted small" }, s.plan_explanation) : null);
    box.addEventListener("toggle", () => { this._planOpen = box.open; });
    if (this._editingPlan && s.plan_status === "proposed") {
      const area = h("textarea", { class: "input", rows: Math.max(4, s.plan.length + 1),
        "data-testid": "plan-input", "aria-label": "Plan steps, one per line" });
      area.value = s.plan.map((p) => p.step).join("\n");
      const approve = h("button", { class: "btn small primary", type: "button",
        "data-testid": "plan-approve-edited", onclick: () => this._approvePlan(
          area.value.split("\n").map((l) => l.trim()).filter(Boolean)) },
      "Approve as edited");
      const cancel = h("button", { class: "btn small", type: "button", onclick: () => {
        this._editingPlan = false;
        this._renderSide(s);
      } }, "Cancel");
      box.append(area, h("div", { class: "row gap" }, approve, cancel));
      return box;
    }
    box.append(s.plan.length ? planSteps(s.plan)
      : h("p", { class: "muted small" }, s.plan_mode ? "The agent is drafting a plan…"
        : "No plan yet."));
    if (s.plan_status === "proposed") {
      box.append(h("p", { class: "small", "data-testid": "plan-proposed" },
        "Nothing has changed yet: approve the plan to start, edit it, or send feedback."),
      h("div", { class: "row gap" },
        h("button", { class: "btn small primary", type: "button", "data-testid": "plan-approve",
          onclick: () => this._approvePlan(null) }, "Approve plan"),
        h("button", { class: "btn small", type: "button", "data-testid": "plan-edit",
          onclick: () => {
            this._editingPlan = true;
            this._renderSide(s);
          } }, "Edit")));
    }
    return box;
  }

  async _approvePlan(steps) {
    try {
      await this.ctx.socket.approvePlan(this.sessionId, steps);
      this._editingPlan = false;
    } catch (err) {
      this.ctx.toast(`Plan not approved: ${err.message}`, "error");
    }
  }

  /** What applies to the workdir: environment, AGENTS.md files, skills (loaded or not). */
  _contextBox(s) {
    const ctx = s.context;
    if (!ctx) {
      return h("section", { class: "side-box", "aria-label": "Project", "data-testid": "context" },
        h("h3", {}, "Project"), h("p", { class: "muted small" },
          "Read from the machine when the session works."));
    }
    const env = ctx.environment || {};
    const read = new Set(s.items.filter((i) => i.kind === "tool_call" &&
      toolDisplay(i).result === "file" && i.path).map((i) => i.path));
    const loaded = (skill) => [...read].some((p) => skill.path === p ||
      skill.path.endsWith(`/${p.replace(/^\.\//, "")}`));
    return h("section", { class: "side-box", "aria-label": "Project", "data-testid": "context" },
      h("h3", {}, "Project"),
      h("p", { class: "muted small", "data-testid": "environment" },
        [env.os && `${env.os} ${env.os_version || ""}`.trim(), env.shell,
          env.git_branch && `${env.git_branch}${env.git_dirty ? " (changes)" : ""}`]
          .filter(Boolean).join(" · ")),
      ctx.instructions.length ? h("ul", { class: "paths", "data-testid": "instructions" },
        ctx.instructions.map((f) => h("li", { class: "mono ellipsis", title: f.path },
          f.scope === "user" ? "your AGENTS.md (~/.codey)" : relativeTo(s.workdir, f.path),
          f.truncated ? h("span", { class: "muted" }, " (cut)") : null)))
        : h("p", { class: "muted small" }, "No AGENTS.md applies."),
      ctx.skills.length ? h("ul", { class: "skills", "data-testid": "skills" },
        ctx.skills.map((k) => h("li", { title: `${k.description}\n${k.path}`,
          "data-testid": "skill", "data-skill": k.name },
        h("strong", {}, k.name), " ",
        loaded(k) ? h("span", { class: "chip good", "data-testid": "skill-loaded" }, "loaded")
          : null,
        h("div", { class: "muted small ellipsis" }, k.description)))) : null,
      ctx.warnings.length ? h("details", { class: "fold warnings" },
        h("summary", {}, `${ctx.warnings.length} skipped`),
        h("ul", { class: "small" }, ctx.warnings.map((w) => h("li", {}, w)))) : null);
  }

  /** The project's memory (per machine and repository, else folder), viewable and
   * editable. */
  _memoryBox(s) {
    const text = memoryText(this.ctx.store.state, s);
    const [place] = memoryPlaces(s);
    const box = h("section", { class: "side-box", "aria-label": "Memory",
      "data-testid": "memory" }, h("h3", {}, "Memory"),
    // (the folder's name: a long path cut at its end would hide it; the whole on hover)
    h("p", { class: "muted small ellipsis", "data-testid": "memory-scope", title: place },
      `${memoryOfRepository(s) ? "For the repository" : "For the folder"} ` +
      `${place.split("/").filter(Boolean).pop() || place}`));
    if (this._editingMemory) {
      const area = h("textarea", { class: "input", rows: 6, "data-testid": "memory-input",
        "aria-label": "Project memory" });
      area.value = this._memoryDraft ?? text;
      area.addEventListener("input", () => { this._memoryDraft = area.value; });
      const save = h("button", { class: "btn small primary", type: "button",
        "data-testid": "memory-save", onclick: async () => {
          save.disabled = true;
          try {
            // (the session's memory: the server keeps it for its repository)
            await this.ctx.socket.setMemory(s.worker_id, place, area.value, s.session_id);
            this._editingMemory = false;
            this._memoryDraft = null;
            this._headerDirty = true;
            this._batch.schedule();
          } catch (err) {
            this.ctx.toast(`Memory not saved: ${err.message}`, "error");
            save.disabled = false;
          }
        } }, "Save");
      const cancel = h("button", { class: "btn small", type: "button", onclick: () => {
        this._editingMemory = false;
        this._memoryDraft = null;
        this._renderSide(s);
      } }, "Cancel");
      box.append(area, h("div", { class: "row gap" }, save, cancel));
      return box;
    }
    box.append(text ? h("pre", { class: "memory-text", "data-testid": "memory-text" }, text)
      : h("p", { class: "muted small" }, "Nothing remembered for this project yet."),
    h("button", { class: "btn small", type: "button", "data-testid": "memory-edit",
      onclick: () => {
        this._editingMemory = true;
        this._renderSide(s);
      } }, "Edit"));
    return box;
  }

  // Session operations ----------------------------------------------------------------------

  _showTitle(title) {
    this._title.replaceChildren();
    titleNode(title, this._title);
  }

  _startRename() {
    const s = this.session;
    if (!s || this._renaming) return;
    this._renaming = true;
    const input = h("input", { class: "input", value: s.title, "data-testid": "rename-input",
      "aria-label": "Session title" });
    const done = async (save) => {
      if (!this._renaming) return;
      this._renaming = false;
      const title = input.value.trim();
      this._showTitle(s.title);
      if (save && title && title !== s.title) {
        try {
          await this.ctx.socket.renameSession(this.sessionId, title);
        } catch (err) {
          this.ctx.toast(`Not renamed: ${err.message}`, "error");
        }
      }
    };
    input.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter") done(true);
      else if (ev.key === "Escape") done(false);
    });
    input.addEventListener("blur", () => done(true));
    this._title.replaceChildren(input);
    input.focus();
    input.select();
  }

  /** The session's own budget (menu → Budget…): tokens and/or dollars, or none. */
  _buildBudgetForm() {
    const tokens = h("input", { type: "number", min: "1", step: "1", class: "input compact",
      id: "session-budget-tokens", "data-testid": "session-budget-tokens",
      placeholder: "no limit" });
    const usd = h("input", { type: "number", min: "0.01", step: "0.01", class: "input compact",
      id: "session-budget-usd", "data-testid": "session-budget-usd", placeholder: "no limit" });
    const error = h("span", { class: "bad small", role: "alert", hidden: true });
    const form = h("form", { class: "s-ask budget-edit", hidden: true,
      "data-testid": "session-budget-form", "aria-label": "This session's budget" },
    h("span", { class: "small" }, "This session's budget (the day's applies too):"),
    h("label", { for: "session-budget-tokens", class: "small" }, "tokens"), tokens,
    h("label", { for: "session-budget-usd", class: "small" }, "US dollars"), usd,
    h("button", { class: "btn primary", type: "submit", "data-testid": "session-budget-save" },
      "Save"),
    h("button", { class: "btn", type: "button", onclick: () => { form.hidden = true; } },
      "Cancel"), error);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      showingErrors(error, async () => {
        await this.ctx.socket.setBudget(this.sessionId,
          tokens.value ? Number(tokens.value) : null,
          usd.value ? Math.round(Number(usd.value) * 1e6) : null);
        form.hidden = true;
      });
    });
    form._fill = (budget) => {
      tokens.value = budget && budget.max_tokens != null ? String(budget.max_tokens) : "";
      usd.value = budget && budget.max_micros != null ? String(budget.max_micros / 1e6) : "";
    };
    return form;
  }

  _openBudget() {
    const s = this.session;
    this._budgetForm._fill(s ? s.budget : null);
    this._budgetForm.hidden = false;
    this._budgetForm.querySelector("input").focus();
  }

  _renderMenu(s) {
    const state = this.ctx.store.state;
    const act = (testid, label, fn, cls = "") => h("button", { class: `btn menu-item ${cls}`,
      type: "button", "data-testid": testid, onclick: async () => {
        this._menu.open = false;
        try {
          await fn();
        } catch (err) {
          this.ctx.toast(`${label} failed: ${err.message}`, "error");
        }
      } }, label);
    const others = Object.values(state.workers).filter((o) => !o.revoked &&
      o.worker_id !== s.worker_id);
    const w = state.workers[s.worker_id];
    const terminal = Boolean(w && w.capabilities && w.capabilities.terminal && !w.revoked);
    const items = [
      // on a phone these two live here rather than in the header (narrow-only)
      terminal ? act("menu-terminal", "Terminal", () => this._openTerminal(), "narrow-only")
        : null,
      h("a", { class: "btn menu-item narrow-only", "data-testid": "menu-download-log",
        href: api.sessionLogUrl(this.sessionId), download: `session-${this.sessionId}.ndjson`,
        onclick: () => { this._menu.open = false; } }, "Download log"),
      act("menu-budget", "Budget…", () => this._openBudget()),
      act("menu-rename", "Rename", () => this._startRename()),
      act("menu-fork", "Fork", () => this._fork(null)),
      act("menu-archive", s.archived ? "Unarchive" : "Archive",
        () => this.ctx.socket.archiveSession(this.sessionId, !s.archived)),
      others.length && s.status !== "closed" ? act("menu-move-dialog", "Move to…",
        () => new MoveDialog(this.ctx, this.sessionId).open()) : null,
      ...others.map((o) => act(`menu-move-${o.worker_id}`, `Move to ${machineLabel(state, o)}`,
        () => this.ctx.socket.moveSession(this.sessionId, o.worker_id))),
      s.status === "closed" ? null
        : act("menu-close", "Close", async () => {
          await this.ctx.socket.closeSession(this.sessionId);
          await this._offerWorktreeRemoval();
        }),
      this._confirmDelete ? act("menu-delete-confirm", "Confirm delete", async () => {
        this._confirmDelete = false;
        await this._offerWorktreeRemoval(); // (while the session is there to say which)
        await this.ctx.socket.deleteSession(this.sessionId);
        location.hash = "#/";
      }, "danger") : act("menu-delete", "Delete…", () => {
        this._confirmDelete = true;
        this._renderMenu(s);
        this._menu.open = true;
      }, "danger"),
    ];
    const sig = JSON.stringify([s.archived, s.status, this._confirmDelete, terminal,
      others.map((o) => o.worker_id)]);
    if (this._menu.dataset.sig === sig) return;
    this._menu.dataset.sig = sig;
    const open = this._menu.open;
    this._menu.replaceChildren(h("summary", { class: "btn subtle", "aria-label": "More",
      "data-testid": "session-menu-button" }, "⋯"),
    h("div", { class: "menu-list" }, items));
    this._menu.open = open;
    this._placeSettings();
  }

  /** The settings where they fit: the header, or the top of the menu on a narrow screen. */
  _placeSettings() {
    const list = this._menu.querySelector(".menu-list");
    if (this._narrow.matches && list) {
      if (this._settings.parentNode !== list) list.prepend(this._settings);
    } else if (this._settings.parentNode !== this._sandboxBadge.parentNode) {
      this._sandboxBadge.before(this._settings);
    }
  }

  async _fork(itemId, worktree = null) {
    const ack = await this.ctx.socket.forkSession(this.sessionId, itemId, null, worktree);
    if (ack && ack.session_id) location.hash = `#/session/${encodeURIComponent(ack.session_id)}`;
  }

  /** The bar of a session whose worktree was removed: why nothing runs, and the two ways
   * on — the worktree made again from its branch (while it has one), or a fork of the
   * session in a new worktree. */
  _renderWorktreeGone(s) {
    const w = s.worktree;
    const sig = JSON.stringify([w.path, w.branch, w.branch_deleted, w.base, this._goingOn]);
    if (this._worktreeGone.dataset.sig === sig) return; // (no rebuild under the pointer)
    this._worktreeGone.dataset.sig = sig;
    const busy = Boolean(this._goingOn);
    const go = (what, fn) => async () => {
      this._goingOn = what;
      this._headerDirty = true;
      this._batch.schedule();
      try {
        await fn();
      } catch (err) {
        this.ctx.toast(`${what === "recreate" ? "Not made again" : "Not forked"}: ` +
          `${err.message}`, "error");
      } finally {
        this._goingOn = null;
        this._headerDirty = true;
        this._batch.schedule();
      }
    };
    const from = w.base || "the base";
    replaceChildren(this._worktreeGone,
      h("div", { class: "small" },
        h("strong", {}, "This session's worktree was removed"),
        w.path ? [" (", h("span", { class: "mono" }, w.path), ")"] : null,
        ": nothing runs there any more. ",
        w.branch_deleted
          ? `Its branch ${w.branch} was deleted too: go on in a fork, in a new worktree from ` +
            `${from}.`
          : `Its branch ${w.branch} keeps what was committed: make the worktree again from ` +
            "it, or go on in a fork with a worktree of its own."),
      h("span", { class: "row gap" },
        w.branch_deleted ? null : h("button", { class: "btn primary", type: "button",
          "data-testid": "worktree-recreate", disabled: busy,
          title: `A new worktree at ${w.path || "its old place"}, on ${w.branch}`,
          onclick: go("recreate", () => api.worktreeOp(this.sessionId, "recreate")) },
        this._goingOn === "recreate" ? "Making it again…" : "Recreate from the branch"),
        h("button", { class: "btn", type: "button", "data-testid": "worktree-fork",
          disabled: busy, title: w.branch_deleted ? `A new session, on a new branch from ${from}`
            : `A new session, on a new branch from ${w.branch}`,
          onclick: go("fork", () => this._fork(null, {})) },
        this._goingOn === "fork" ? "Forking…" : "Fork into a new worktree")));
  }

  /** The connection to the server changed ("live", "reconnecting", "offline"). */
  onConn(status) {
    if (status !== "live") this._cutAt ??= Date.now() / 1000;
    else this._cutAt = null;
    this._renderActivity();
  }

  /** The live activity line: what the agent does now and for how long (ticks each second).
   * Cut off from the server, it shows what was known then, and says so: the agent may have
   * finished or moved on meanwhile, so its clock does not run on. */
  _renderActivity() {
    const s = this.session;
    const now = s ? activity(s, this.ctx.store.state) : null;
    if (!now) {
      this._activity.hidden = true;
      return;
    }
    this._activity.hidden = false;
    const cut = this._cutAt ?? null;
    const secs = (cut ?? Date.now() / 1000) - now.since;
    this._activity.classList.toggle("stale", cut !== null);
    replaceChildren(this._activity,
      cut === null ? h("span", { class: "spinner", "aria-hidden": "true" }) : null,
      h("span", { "data-testid": "activity-text" }, now.text),
      secs >= 1 ? h("span", { class: "muted", "data-testid": "activity-time" },
        ` ${fmtDuration(secs)}`) : null,
      cut === null ? null : h("span", { class: "muted", "data-testid": "activity-cut" },
        " · as last known: the server is unreachable"));
  }

  async _doRetry() {
    this._retry.disabled = true;
    try {
      await this.ctx.socket.retryTurn(this.sessionId);
    } catch (err) {
      this.ctx.toast(`Not retried: ${err.message}`, "error");
    } finally {
      this._retry.disabled = false;
    }
  }

  /** Reopen this session's running terminal, or start one in its workdir. */
  async _openTerminal() {
    const s = this.session;
    if (!s) return;
    const open = Object.values(this.ctx.store.state.terminals || {}).find(
      (t) => t.session_id === s.session_id && !t.closed);
    if (open) {
      this.ctx.navigate(`#/terminal/${encodeURIComponent(open.terminal_id)}`);
      return;
    }
    this._terminal.disabled = true;
    try {
      const made = await api.createTerminal(s.worker_id, s.workdir, s.session_id);
      this.ctx.navigate(`#/terminal/${encodeURIComponent(made.terminal_id)}`);
    } catch (err) {
      this.ctx.toast(`No terminal: ${err.message}`, "error");
    } finally {
      this._terminal.disabled = false;
    }
  }

  async _compact() {
    try {
      await this.ctx.socket.compact(this.sessionId);
    } catch (err) {
      this.ctx.toast(`Not compacted: ${err.message}`, "error");
    }
  }

  // Pending approvals whose item is not on screen (older than the built window, or missing).
  _renderOrphans() {
    const s = this.session;
    if (!s) return;
    const pending = Object.values(s.approvals).filter((a) => a.status === "pending" &&
      !this._nodes.has(a.item_id)).map((a) => [s, a]);
    // a sub-agent's approvals are asked here too: the user watches the parent
    for (const child of descendants(this.ctx.store.state, s.session_id)) {
      for (const a of Object.values(child.approvals)) {
        if (a.status === "pending") pending.push([child, a]);
      }
    }
    // project hook files not trusted in their current content (issue 39): shown with their
    // commands, trusted by the user's click
    const untrusted = (s.hook_files || []).filter((f) => f.scope === "project" && f.sha256
      && !f.error && f.hooks.length && !(s.trusted_hooks || []).includes(f.sha256));
    const sig = pending.map(([x, a]) => `${x.session_id}/${a.approval_id}`).join(",")
      + untrusted.map((f) => `|${f.sha256}`).join("");
    if (sig === this._orphans.dataset.sig) return;
    this._orphans.dataset.sig = sig;
    replaceChildren(this._orphans, untrusted.map((f) => this._hookTrust(f)), pending.map(([x, a]) => x === s
      ? approvalNode(a, this.ctx, this.sessionId, true)
      : h("div", { class: "child-approval", "data-testid": "child-approval" },
        h("p", { class: "muted small" }, "Asked by the sub-agent ",
          h("a", { href: `#/session/${encodeURIComponent(x.session_id)}` }, x.title)),
        approvalNode(a, this.ctx, x.session_id, true))));
  }

  /** A project's hook file that does not run until trusted: its commands, and Trust. */
  _hookTrust(f) {
    const button = h("button", { class: "btn primary", type: "button",
      "data-testid": "hook-trust-button", onclick: async () => {
        button.disabled = true;
        try {
          await this.ctx.socket.trustHooks(this.sessionId, f.path, f.sha256);
        } catch (err) {
          button.disabled = false;
          this.ctx.toast?.(String(err.message || err));
        }
      } }, "Trust and run these hooks");
    return h("div", { class: "hook-trust", role: "group", "data-testid": "hook-trust",
      "aria-label": "Project hooks waiting for trust" },
      h("p", {}, h("strong", {}, "This project has hooks that have not run: "),
        h("span", { class: "mono" }, f.path)),
      h("p", { class: "muted small" }, "They come with the repository and run on your "
        + "machine (in the session's sandbox) only once you trust this exact file. A change "
        + "to the file asks again."),
      f.hooks.map((c) => h("div", { class: "small" },
        h("span", { class: "muted" }, `${c.event}${c.matcher ? ` (${c.matcher})` : ""}`),
        h("pre", { class: "command", "data-testid": "hook-trust-command" }, c.command_line))),
      button);
  }

  /** Upload files for the next message (10 MiB each; the server says so beyond that). */
  async _upload(files) {
    for (const file of files) {
      const chip = h("span", { class: "chip attach-chip uploading" }, `${file.name} …`);
      this._chips.append(chip);
      try {
        const a = await api.uploadBlob(file);
        this._attachments.push(a);
        chip.replaceWith(this._chip(a));
      } catch (err) {
        chip.remove();
        this.ctx.toast(`${file.name} not attached: ${err.message}`, "error");
      }
    }
  }

  _chip(a) {
    const chip = h("span", { class: "chip attach-chip", "data-testid": "attach-chip" },
      `${a.name} (${fmtBytes(a.size)})`,
      h("button", { type: "button", class: "chip-x", "aria-label": `Remove ${a.name}`,
        onclick: () => {
          this._attachments = this._attachments.filter((x) => x !== a);
          chip.remove();
        } }, "×"));
    return chip;
  }

  async _sendPrompt() {
    const text = this._input.value.trim();
    const attachments = this._attachments;
    if (!text && !attachments.length) return;
    if (/^\/rewind\s*$/.test(text) && !attachments.length) {
      // the built-in: the rewind dialog at the newest prompt (another can be picked there)
      if (openRewind(this.ctx, this.sessionId) && this._input.value.trim() === text) {
        this._input.value = "";
      }
      return;
    }
    const slash = attachments.length ? null : parseSlash(text);
    if (slash && slash[0] !== "goal") {
      // a known command, or maybe a prompt file not listed yet; else the text goes as it is
      const entry = this._slash.find(slash[0]) ||
        (this._slash.files === null ? { name: slash[0], source: "unknown" } : null);
      if (entry && await this._runSlash(entry, slash[1], text)) return;
    }
    const goal = /^\/goal(?:\s+([\s\S]*))?$/.exec(text);
    if (goal && !attachments.length) {
      await this._setGoal(text, (goal[1] || "").trim());
      return;
    }
    this._send.disabled = true;
    try {
      await this.ctx.socket.sendPrompt(this.sessionId, text, attachments);
      if (this._input.value.trim() === text) this._input.value = "";
      this._attachments = [];
      this._chips.replaceChildren();
      this._stick = true;
      this._userScrolled = false;
    } catch (err) {
      this.ctx.toast(`Message not sent: ${err.message}`, "error");
    } finally {
      this._send.disabled = !this.session;
    }
  }

  /** Carry out a slash command (see slash.js): a built-in, an ACP agent's own command (sent
   * to it as typed), or a prompt file (expanded and sent by the server). False: `/name` is
   * no command after all (the caller sends the text as it is). */
  async _runSlash(entry, args, typed = "") {
    const s = this.session;
    if (!s) return true;
    const done = () => {
      if (typed && this._input.value.trim() === typed) this._input.value = "";
      this._slash.close();
    };
    if (entry.source === "built-in") {
      if (entry.name === "goal") {
        this._input.value = "/goal ";
        this._input.focus();
        return true;
      }
      done();
      if (entry.name === "compact") {
        await this._compact();
      } else if (entry.name === "model") {
        this._pickModel(args);
      } else if (entry.name === "rewind") {
        openRewind(this.ctx, this.sessionId);
      } else if (entry.name === "review") {
        await this._sendText(reviewPrompt(args));
      } else if (entry.name === "new") {
        const dialog = new NewSessionDialog(this.ctx);
        dialog.open(s.worker_id);
        if (dialog._workdir) dialog._workdir.value = s.workdir;
      }
      return true;
    }
    if (entry.source === "agent") {
      await this._sendText(`/${entry.name}${args ? ` ${args}` : ""}`);
      done();
      return true;
    }
    this._send.disabled = true;
    try {
      const ran = await api.runSlash(this.sessionId, entry.name, args);
      done();
      this._stick = true;
      if (ran.model) this.ctx.toast(`/${entry.name}: model ${ran.model} for this turn`, "good");
      for (const note of ran.notes) this.ctx.toast(`/${entry.name}: ${note}`, "warn");
    } catch (err) {
      if (err.status === 404 && entry.source === "unknown") return false;
      this.ctx.toast(`/${entry.name} not run: ${err.message}`, "error");
    } finally {
      this._send.disabled = !this.session;
    }
    return true;
  }

  async _sendText(text) {
    try {
      await this.ctx.socket.sendPrompt(this.sessionId, text, []);
      this._stick = true;
    } catch (err) {
      this.ctx.toast(`Message not sent: ${err.message}`, "error");
    }
  }

  /** `/model <name>`: the first model of the picker whose name has it; bare: the picker. */
  _pickModel(name) {
    if (this._model.hidden) {
      this.ctx.toast("This session's agent picks its own model", "warn");
      return;
    }
    if (!name) {
      if (this._narrow.matches) this._menu.open = true;
      this._model.focus();
      return;
    }
    const want = name.toLowerCase();
    const option = [...this._model.options].find((o) => o.textContent.toLowerCase() === want) ||
      [...this._model.options].find((o) => o.textContent.toLowerCase().includes(want));
    if (!option) {
      this.ctx.toast(`No model like ${name}`, "error");
      return;
    }
    this._model.value = option.value;
    this._setModel();
  }

  /** `/goal <condition>` typed in the prompt box (`/goal clear` drops it). */
  async _setGoal(typed, condition) {
    if (!condition) {
      this.ctx.toast("Give the goal: /goal $ pytest -q, or /goal <what must hold>", "error");
      return;
    }
    this._send.disabled = true;
    try {
      await this.ctx.socket.setGoal(this.sessionId, condition);
      if (this._input.value.trim() === typed) this._input.value = "";
      this._stick = true;
    } catch (err) {
      this.ctx.toast(`Goal not set: ${err.message}`, "error");
    } finally {
      this._send.disabled = !this.session;
    }
  }

  async _clearGoal() {
    try {
      await this.ctx.socket.setGoal(this.sessionId, "clear");
    } catch (err) {
      this.ctx.toast(`Goal not cleared: ${err.message}`, "error");
    }
  }

  /** Closing or deleting a session in a worktree offers to remove the worktree: never
   * silently, and a dirty or unmerged one only after a second question (its branch stays). */
  async _offerWorktreeRemoval() {
    const s = this.session;
    const w = s && s.worktree;
    if (!w || w.status !== "ready") return;
    if (!window.confirm(`Remove this session's worktree too (${w.path})? Its branch ` +
      `${w.branch} stays.`)) return;
    try {
      await api.worktreeOp(this.sessionId, "remove", { force: false });
    } catch (err) {
      if (err.status !== 409 || !window.confirm(`${err.message}\n\nRemove it anyway? What ` +
        "is not committed is lost.")) {
        this.ctx.toast(`The worktree stays: ${err.message}`, "warn");
        return;
      }
      await api.worktreeOp(this.sessionId, "remove", { force: true });
    }
    this.ctx.toast(`Worktree removed; ${w.branch} stays`, "good");
  }

  /** The model picker: every model of every provider, and the session's own even when its
   * provider is gone (so the select never shows another than the one in use). */
  _renderModel(s) {
    const acp = Boolean(s.agent); // an ACP agent picks its own model
    this._model.hidden = acp;
    this._effort.hidden = acp;
    this._renderAgentSettings(s);
    if (acp) return;
    const choices = modelChoices(this.ctx.config, s);
    const sig = JSON.stringify(choices);
    if (sig !== this._modelSig) {
      this._modelSig = sig;
      this._model.replaceChildren(...choices.map(([value, text]) => h("option", { value }, text)));
    }
    const current = JSON.stringify([s.provider, s.model]);
    if (this._model.value !== current) this._model.value = current;
    if (this._effort.value !== (s.effort || "")) this._effort.value = s.effort || "";
  }

  /** An ACP agent's mode and config options, as it last confirmed them: a select for the
   * mode, one control per option. A choice is sent to the agent; the control shows what it
   * confirms (folded from its answer), and goes back when it refuses. */
  _renderAgentSettings(s) {
    const modes = s.agent ? s.agent_modes : [];
    const options = s.agent ? s.agent_config : [];
    this._agentSettings.hidden = !modes.length && !options.length;
    const sig = JSON.stringify([modes, s.agent_mode, options]);
    if (sig === this._agentSig) return;
    this._agentSig = sig;
    const send = async (body, words) => {
      try {
        await api.setAgentConfig(this.sessionId, body);
        this.ctx.toast(words, "good");
      } catch (err) {
        this.ctx.toast(`Not changed: ${err.message}`, "error");
        this._agentSig = null; // back to what the agent has
        this._renderAgentSettings(this.session || s);
      }
    };
    const controls = [];
    if (modes.length) {
      const select = h("select", { class: "input compact", "data-testid": "agent-mode",
        "aria-label": "The agent's mode", title: "The agent's mode",
        onchange: () => send({ mode: select.value },
          `Mode: ${modes.find((m) => m.id === select.value).name}`) },
      modes.map((m) => h("option", { value: m.id, title: m.description || m.name },
        `mode: ${m.name}`)));
      select.value = s.agent_mode;
      controls.push(select);
    }
    for (const o of options) {
      if (o.type === "boolean") {
        const box = h("input", { type: "checkbox", "data-testid": `agent-option-${o.id}`,
          onchange: () => send({ option: o.id, value: box.checked },
            `${o.name}: ${box.checked ? "on" : "off"}`) });
        box.checked = Boolean(o.current);
        controls.push(h("label", { class: "check small", title: o.description || o.name },
          box, ` ${o.name}`));
        continue;
      }
      const select = h("select", { class: "input compact", "data-testid": `agent-option-${o.id}`,
        "aria-label": o.name, title: o.description || o.name,
        onchange: () => send({ option: o.id, value: select.value },
          `${o.name}: ${o.choices.find((c) => c.value === select.value).name}`) },
      o.choices.map((c) => h("option", { value: c.value },
        `${o.name.toLowerCase()}: ${c.group ? `${c.group} / ` : ""}${c.name}`)));
      select.value = o.current;
      controls.push(select);
    }
    this._agentSettings.replaceChildren(...controls);
  }

  /** The server's provider list changed (Settings → Models). */
  onConfig() {
    const s = this.session;
    if (s) this._renderModel(s);
    this._headerDirty = true; // the model's words ("no model provider is set up")
    this._batch.schedule();
  }

  async _setModel() {
    const s = this.session;
    if (!s) return;
    const [provider, model] = JSON.parse(this._model.value);
    const effort = this._effort.value || null;
    if (provider === s.provider && model === s.model && effort === (s.effort || null)) return;
    try {
      await this.ctx.socket.setSessionModel(this.sessionId, provider, model, effort);
      this.ctx.toast(`Next turn: ${provider} / ${model}${effort ? ` (${effort})` : ""}`, "good");
    } catch (err) {
      this.ctx.toast(`Model not changed: ${err.message}`, "error");
      this._renderModel(s);
    }
  }

  /** The sandbox and network the controls show (what the user chose, maybe not sent). */
  _chosenSandbox() {
    const sandbox = this._sandbox.value;
    return [sandbox, this._network.checked && sandbox !== "full-access"];
  }

  async _setSandbox() {
    const s = this.session;
    if (!s) return;
    this._network.disabled = this._sandbox.value === "full-access";
    const [sandbox, network] = this._chosenSandbox();
    if (sandbox === s.sandbox && network === Boolean(s.network)) {
      this._cancelSandbox(); // back to what it is: nothing to ask or send
      return;
    }
    if (toggleEffects(s, sandbox, network).stop.length) {
      this._asking = true;
      this._askSandbox();
      return;
    }
    this._hideAsk();
    await this._sendSandbox(sandbox, network);
  }

  /** Show (or refresh) the question: which running processes the chosen change stops. */
  _askSandbox() {
    const s = this.session;
    const [sandbox, network] = this._chosenSandbox();
    const { stop, words } = toggleEffects(s, sandbox, network);
    const one = stop.length === 1;
    this._toggleText.textContent = stop.length
      ? `${words}: ${stop.length} running process${one ? "" : "es"} will be stopped ` +
        `(${processNames(stop)}) — ${one ? "it runs" : "they run"} with the old settings.`
      : `${words}: no running process needs to stop now.`;
    const wasHidden = this._toggleAsk.hidden;
    this._toggleAsk.hidden = false;
    if (wasHidden) {
      this._menu.open = false; // on a phone the settings are in the menu, over the question
      this._toggleAsk.querySelector("[data-testid=toggle-cancel]").focus();
    }
  }

  _hideAsk() {
    this._asking = false;
    this._toggleAsk.hidden = true;
  }

  async _confirmSandbox() {
    const [sandbox, network] = this._chosenSandbox();
    this._hideAsk();
    await this._sendSandbox(sandbox, network);
  }

  _cancelSandbox() {
    const s = this.session;
    this._hideAsk();
    if (!s) return;
    this._sandbox.value = s.sandbox;
    this._network.checked = Boolean(s.network);
    this._network.disabled = s.sandbox === "full-access";
  }

  async _sendSandbox(sandbox, network) {
    const sending = this._sendingSandbox = {};
    try {
      await this.ctx.socket.setSandbox(this.sessionId, sandbox, network);
    } catch (err) {
      this.ctx.toast(`Sandbox not changed: ${err.message}`, "error");
      this._cancelSandbox();
    } finally {
      // answered: the state holds the change (or the refusal put the controls back)
      if (this._sendingSandbox === sending) this._sendingSandbox = null;
    }
  }

  async _setLadder() {
    const s = this.session;
    const preset = LADDERS[this._ladder.value];
    if (!s || !preset) return;
    try {
      await this.ctx.socket.setAttention(this.sessionId, preset);
    } catch (err) {
      this.ctx.toast(`Not changed: ${err.message}`, "error");
      this._ladder.value = ladderPreset(s);
    }
  }

  async _setPolicy() {
    const s = this.session;
    const policy = this._policy.value;
    if (!s || policy === s.policy) return;
    try {
      await this.ctx.socket.setApprovalPolicy(this.sessionId, policy);
    } catch (err) {
      this.ctx.toast(`Policy not changed: ${err.message}`, "error");
      this._policy.value = s.policy;
    }
  }

  async _doInterrupt() {
    this._interrupt.disabled = true;
    try {
      await this.ctx.socket.interrupt(this.sessionId);
    } catch (err) {
      this.ctx.toast(`Interrupt failed: ${err.message}`, "error");
      this._interrupt.disabled = !(this.session && isBusy(this.session.status));
    }
  }

  destroy() {
    window.removeEventListener("codey:prompt-text", this._onPromptText);
    this._batch.cancel();
    this._unTails();
    clearInterval(this._ticker);
    this._formSize.disconnect();
    document.documentElement.style.removeProperty("--toast-bottom");
    this._narrow.removeEventListener("change", this._onNarrow);
  }
}

/** A process's output in its panel: the live tail the server sent (all it wrote, whoever
 * read it), else what was read from it (an older server, or before the tail came). */
export function processOutput(p, tail) {
  const [text, cut] = tail ? [tail.text, tail.cut] : [p.output || "", p.output_cut];
  return { text, label: cut ? "Output (its newest part)" : "Output" };
}

// A re-rendered item keeps the open/closed state of its <details> (reasoning, diffs, results).
function keepOpenState(old, fresh) {
  const before = old.querySelectorAll("details");
  if (!before.length) return;
  const after = fresh.querySelectorAll("details");
  for (let i = 0; i < Math.min(before.length, after.length); i++) after[i].open = before[i].open;
}


/** How full the model's context is: the last call's input + output over the window. */
/** The session's goal: its condition, how it is checked, its attempts and the last check's
 * output (what the next turn was told), and a button that drops it while it is active. */
function goalBox(g, clear) {
  const exit = g.last_exit_code === null || g.last_exit_code === undefined ? ""
    : ` · exit ${g.last_exit_code}`;
  return h("section", { class: `side-box goal-box goal-${g.status}`, "aria-label": "Goal",
    "data-testid": "goal-box", "data-goal-status": g.status },
  h("h3", {}, "Goal"),
  h("p", { class: "goal-condition mono", "data-testid": "goal-condition" }, g.condition),
  h("p", { class: "small goal-state", "data-testid": "goal-status" }, goalWords(g)),
  h("dl", { class: "facts" },
    h("dt", {}, "Checked by"), h("dd", {}, g.command ? "its command, in the sandbox"
      : "a reviewer (goal_met)"),
    h("dt", {}, "Attempts"), h("dd", { "data-testid": "goal-attempts" },
      `${g.attempts} of ${g.max_turns}`)),
  g.reason ? h("p", { class: "small muted", "data-testid": "goal-reason" }, g.reason) : null,
  g.attempts ? h("details", { class: "goal-check", open: true },
    h("summary", { class: "small" }, `Last check: ${g.last_met ? "met" : "not met"}${exit}`),
    h("pre", { class: "code goal-output", "data-testid": "goal-output" },
      g.last_output || "(no output)")) : null,
  g.status === "active" ? h("button", { class: "btn small", type: "button",
    "data-testid": "goal-clear", title: "Stop checking the goal and starting turns for it",
    onclick: clear }, "Clear goal") : null);
}

function contextGauge(u) {
  if (!u.context_window) return null;
  const share = Math.min(1, (u.context_tokens || 0) / u.context_window);
  const pct = Math.round(share * 100);
  return h("div", { class: "gauge", "data-testid": "context-gauge", role: "meter",
    "aria-label": "Context used", "aria-valuemin": "0", "aria-valuemax": "100",
    "aria-valuenow": String(pct),
    title: `${(u.context_tokens || 0).toLocaleString()} of ` +
      `${u.context_window.toLocaleString()} tokens` },
  h("div", { class: "gauge-label" }, h("span", {}, "Context"),
    h("span", { class: "muted" }, `${pct}% of ${Math.round(u.context_window / 1000)}k`)),
  h("div", { class: "gauge-track" }, h("div", {
    class: `gauge-fill${share >= 0.85 ? " high" : ""}`, style: `width: ${pct}%` })));
}


/** `path` as seen from `dir` when it is there or above it ("AGENTS.md", "../../AGENTS.md"). */
function relativeTo(dir, path) {
  const d = dir.replace(/\/+$/, "").split("/");
  const p = path.split("/");
  const name = p.pop();
  for (let up = 0; up < d.length; up++) {
    const base = d.slice(0, d.length - up).join("/");
    if (p.join("/") === base) return `${"../".repeat(up)}${name}`;
  }
  return path;
}


/** The sub-agents of `sessionId`, and theirs. */
export function descendants(state, sessionId) {
  const out = [];
  for (const child of Object.values(state.sessions)) {
    if (child.parent_id === sessionId) out.push(child, ...descendants(state, child.session_id));
  }
  return out;
}


const NUM = String.raw`(\d+(?:\.\d+)?)`;
const RESET = new RegExp(`^(?:${NUM}h)?(?:${NUM}m(?!s))?(?:${NUM}s)?(?:${NUM}ms)?$`);

/**
 * Seconds in a provider's reset header: OpenAI's "20ms", "35.2s", "6m0s", "1h2m3s", or a
 * plain number of seconds; null when it is none of these.
 */
export function resetSeconds(text) {
  const t = String(text ?? "").trim();
  if (/^\d+(\.\d+)?$/.test(t)) return Number(t);
  const m = RESET.exec(t);
  if (!t || !m) return null;
  const [, hours, minutes, seconds, ms] = m.map((x) => Number(x || 0));
  return hours * 3600 + minutes * 60 + seconds + ms / 1000;
}

/** "resets in 35 s" until `at` (epoch seconds), then "reset". */
function resetWords(at, now = Date.now() / 1000) {
  const left = at - now;
  return left >= 1 ? `resets in ${fmtDuration(left)}` : left > 0 ? "resets now" : "reset";
}

/**
 * The provider's rate limits, as its last answer reported them. A reset time counts down
 * (from when the answer came): `tickRateLimits` updates it every second.
 */
function rateLimits(rl) {
  if (!rl || (rl.remaining_requests == null && rl.remaining_tokens == null)) return null;
  const part = (left, limit, reset, what) => {
    if (left == null) return null;
    const secs = reset ? resetSeconds(reset) : null;
    const when = secs === null ? (reset ? h("span", {}, `resets in ${reset}`) : null)
      : h("span", { "data-reset-at": String(rl.updated_at + secs),
        "data-testid": "rate-limit-reset" }, resetWords(rl.updated_at + secs));
    return h("div", {}, `${left.toLocaleString()}${limit ? ` / ${limit.toLocaleString()}` : ""} ` +
      what, when ? [" (", when, ")"] : null);
  };
  return h("div", { class: "small muted rate-limits", "data-testid": "rate-limits" },
    h("div", {}, "Rate limit left:"),
    part(rl.remaining_requests, rl.limit_requests, rl.reset_requests, "requests"),
    part(rl.remaining_tokens, rl.limit_tokens, rl.reset_tokens, "tokens"));
}

/** Count the rate limits' reset times down (called every second). */
function tickRateLimits(root) {
  for (const el of root.querySelectorAll("[data-reset-at]")) {
    el.textContent = resetWords(Number(el.dataset.resetAt));
  }
}

/** A warning chip when the session's commands run bare, or cannot run at all. */
/** A session's worktree, in words (the branch chip's title). */
function worktreeWords(w) {
  const status = { creating: "being made", ready: "ready", in_place: "not a git repository: " +
    "working in the folder", failed: `could not be made: ${w.error}`, removed: "removed" };
  return `Worktree ${status[w.status] || w.status}${w.path ? ` at ${w.path}` : ""}, from ` +
    `${w.base || "the current branch"}${w.merged ? "; merged" : ""}` +
    `${w.pr_url ? `; pull request ${w.pr_url}` : ""}`;
}

/** The session's provider and model in words; when the server has none (a session started
 * before one was set up names none, or the "default" an older server named), says so. */
export function modelWords(s, config) {
  const none = !s.agent && (!s.provider || Boolean(config && !(config.providers || []).length));
  if (none) return "no model provider is set up";
  return `${s.provider} / ${s.model}${s.effort ? ` · ${s.effort}` : ""}`;
}

/** [value, label] of each model a session may switch to: `value` is JSON [provider, model]. */
export function modelChoices(config, s) {
  const out = [];
  for (const p of (config && config.providers) || []) {
    const models = p.models.length ? p.models : [p.default_model].filter(Boolean);
    for (const m of models) out.push([JSON.stringify([p.name, m]), `${p.name} / ${m}`]);
  }
  const current = JSON.stringify([s.provider, s.model]);
  if (!out.some(([v]) => v === current)) {
    const known = ((config && config.providers) || []).some((p) => p.name === s.provider);
    out.unshift([current, !out.length || !s.provider ? modelWords(s, config)
      : `${s.provider} / ${s.model}${known ? "" : " (not configured)"}`]);
  }
  return out;
}

function sandboxBadge(s, worker) {
  if (s.sandbox === "full-access") {
    return h("span", { class: "chip bad", "data-testid": "sandbox-badge",
      title: "This session's commands run outside any sandbox, with all your rights" },
    "⚠ no sandbox");
  }
  const info = worker && worker.capabilities && worker.capabilities.sandbox;
  if (worker && (!info || info.kind === "none")) {
    return h("span", { class: "chip bad", "data-testid": "sandbox-badge",
      title: `The machine has no sandbox (${(info && info.reason) || "not reported"}): ` +
        "its commands are refused unless you choose no sandbox" },
    "⚠ machine has no sandbox");
  }
  return "";
}
