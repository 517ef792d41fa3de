// The live connection to codey-server: `WS /ws/client`.
//
// Order on a socket (codey_protocol.client): we send `subscribe{after_seq}` first, then the
// server answers `snapshot` or catch-up `events`, then live `events`. Commands may follow at any
// time; each gets an `ack` or an `error` carrying its `request_id`.
//
// Reconnects with backoff (0.25 s doubling to 5 s, with jitter) and resumes from the last folded
// seq, so nothing is lost or folded twice. Close code 4008 is the server asking us to resume
// now (we were a slow subscriber, or must resync); other 4000-range codes are refusals (bad
// subscribe, no login) and get the normal backoff. "live" is shown once the server answers.

const MIN_DELAY = 250;
const MAX_DELAY = 5000;
const OFFLINE_AFTER = 8; // failed attempts (about 25 s) before "reconnecting" becomes "offline"

let counter = 0;
function requestId() {
  counter += 1;
  const rnd = Math.random().toString(36).slice(2, 8);
  return `web-${Date.now().toString(36)}-${counter}-${rnd}`;
}

/**
 * One reconnecting socket feeding a Store.
 *
 * `onStatus(status)` is called with "offline" | "live" | "reconnecting";
 * `onError({code, message, request_id})` for error frames without a waiting request, and
 * `onShutdown(reason)` when the server says it is going away.
 */
export class Socket {
  constructor(store, { url = null, onStatus = () => {}, onError = () => {},
    onUnauthorized = () => {},
    onShutdown = () => {} } = {}) {
    this.store = store;
    this.url = url || Socket.defaultUrl();
    this.status = "offline";
    this._onStatus = onStatus;
    this._onUnauthorized = onUnauthorized;
    this._onError = onError;
    this._onShutdown = onShutdown;
    this._ws = null;
    this._subscribed = false;
    this._queue = []; // frames waiting for an open, subscribed socket
    this._pending = new Map(); // request_id -> {resolve, reject}
    this._attempt = 0;
    this._timer = null;
    this._stopped = true;
    this._lastFastResume = 0;
    this._shutdown = false;
  }

  static defaultUrl() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    return `${proto}//${location.host}/ws/client`;
  }

  /** Open the socket (and keep it open until `stop()`). */
  start() {
    this._stopped = false;
    this._connect();
  }

  /** Close for good; pending commands are rejected. */
  stop() {
    this._stopped = true;
    clearTimeout(this._timer);
    if (this._ws) this._ws.close(1000, "bye");
    this._ws = null;
    this._failPending("stopped", true);
    this._queue = [];
    this._setStatus("offline");
  }

  _setStatus(status) {
    if (status === this.status) return;
    this.status = status;
    this._onStatus(status);
  }

  _connect() {
    clearTimeout(this._timer);
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (err) {
      this._scheduleReconnect(null);
      return;
    }
    this._ws = ws;
    this._subscribed = false;
    ws.onopen = () => {
      if (ws !== this._ws) return;
      this._subscribe();
    };
    ws.onmessage = (msg) => {
      if (ws !== this._ws) return;
      let frame;
      try {
        frame = JSON.parse(msg.data);
      } catch (err) {
        console.error("bad frame from server", err);
        return;
      }
      this._handle(frame);
    };
    ws.onclose = (ev) => {
      if (ws !== this._ws) return;
      this._ws = null;
      this._subscribed = false;
      this._failPending("connection closed");
      if (ev.code === 4401) {
        this._onUnauthorized(); // no access (any more): reconnecting will not help
        return;
      }
      if (!this._stopped) this._scheduleReconnect(ev.code);
    };
    ws.onerror = () => {}; // onclose follows and does the work
  }

  _subscribe() {
    this._rawSend({ type: "subscribe", after_seq: this.store.seq });
    this._subscribed = true;
    this._confirmed = false; // "live" once the server answers the subscribe
    this._shutdown = false;
    const queued = this._queue;
    this._queue = [];
    for (const frame of queued) this._sendTracked(frame);
  }

  // Status: "live" while subscribed; "reconnecting" after a drop; "offline" before the first
  // connection, after the server said it is shutting down, or after many failed attempts
  // (we keep trying in the background either way).
  _scheduleReconnect(code) {
    if (this.status === "live" && !this._shutdown) this._setStatus("reconnecting");
    else if (this._attempt >= OFFLINE_AFTER) this._setStatus("offline");
    let delay;
    const now = Date.now();
    if (code === 4008 && now - this._lastFastResume > 1000) {
      // 4008: we fell behind (or must resync) — resume at once; once per second at most.
      // Other 4000-range codes (4400, 4401, 4403) are refusals: back off like any failure.
      this._lastFastResume = now;
      delay = 0;
    } else {
      const base = Math.min(MAX_DELAY, MIN_DELAY * 2 ** this._attempt);
      delay = base / 2 + Math.random() * (base / 2);
      this._attempt += 1;
    }
    this._timer = setTimeout(() => this._connect(), delay);
  }

  _handle(frame) {
    if (!this._confirmed && (frame.type === "events" || frame.type === "snapshot")) {
      this._confirmed = true;
      this._attempt = 0;
      this._setStatus("live");
    }
    switch (frame.type) {
      case "events":
        for (const env of frame.events) this.store.apply(env); // skips seq <= store.seq
        break;
      case "snapshot":
        this.store.replace(frame.seq, frame.state);
        break;
      case "resync":
        this.store.reset();
        if (this._ws) this._rawSend({ type: "subscribe", after_seq: 0 });
        break;
      case "ack": {
        const p = this._pending.get(frame.request_id);
        if (p) {
          this._pending.delete(frame.request_id);
          p.resolve(frame);
        }
        break;
      }
      case "error": {
        const p = frame.request_id != null ? this._pending.get(frame.request_id) : undefined;
        if (p) {
          this._pending.delete(frame.request_id);
          const err = new Error(frame.message);
          err.code = frame.code;
          p.reject(err);
        } else {
          this._onError(frame);
        }
        break;
      }
      case "process_tails":
        this.store.tails.apply(frame); // beside the state: not folded
        break;
      case "shutdown":
        this._shutdown = true;
        this._setStatus("offline");
        this._onShutdown(frame.reason);
        break;
      default:
        console.warn("unknown frame", frame.type);
    }
  }

  _rawSend(frame) {
    this._ws.send(JSON.stringify(frame));
  }

  _sendTracked(frame) {
    const p = this._pending.get(frame.request_id);
    if (p) p.sent = true;
    this._rawSend(frame);
  }

  // A command already sent on a socket that closed may or may not have been applied: reject it
  // and let the user look at the state. Commands still queued wait for the next socket.
  _failPending(reason, all = false) {
    for (const [id, p] of this._pending) {
      if (all || p.sent) {
        this._pending.delete(id);
        p.reject(new Error(reason));
      }
    }
  }

  /** Send a command; resolves with the ack frame, rejects with the error (err.code set). */
  command(type, fields) {
    const frame = { type, request_id: requestId(), ...fields };
    return new Promise((resolve, reject) => {
      this._pending.set(frame.request_id, { resolve, reject, sent: false });
      if (this._ws && this._subscribed && this._ws.readyState === WebSocket.OPEN) {
        this._sendTracked(frame);
      } else {
        this._queue.push(frame);
      }
    });
  }

  /** Start a session. `provider`/`model` null or omitted mean the server's defaults. */
  createSession({ worker_id, workdir, prompt = "", provider = null, model = null,
    policy = "suggest", plan_mode = false, agent = null, sandbox = null, network = false,
    worktree = null, goal = "" }) {
    const fields = { worker_id, workdir, prompt, policy };
    if (plan_mode) fields.plan_mode = true;
    if (agent) fields.agent = agent;
    if (provider) fields.provider = provider;
    if (model) fields.model = model;
    // (the dialog's sandbox and network choices were dropped here before: every session
    // from the dialog got the default sandbox, whatever it said)
    if (sandbox) fields.sandbox = sandbox;
    if (network) fields.network = true;
    if (worktree) fields.worktree = worktree;
    if (goal && goal.trim()) fields.goal = goal.trim();
    return this.command("create_session", fields);
  }

  sendPrompt(session_id, text, attachments = []) {
    const fields = { session_id, text };
    if (attachments.length) fields.attachments = attachments;
    return this.command("send_prompt", fields);
  }

  /** `/goal <condition>`: `$ argv` (a command that must exit 0), a condition the model
   * proves with `goal_met`, or `clear`. */
  setGoal(session_id, condition) {
    return this.command("set_goal", { session_id, condition });
  }

  /** `decision`: "approve" | "approve_for_session" | "reject". */
  decideApproval(session_id, approval_id, decision, message = "") {
    return this.command("decide_approval", { session_id, approval_id, decision, message });
  }

  setApprovalPolicy(session_id, policy) {
    return this.command("set_approval_policy", { session_id, policy });
  }

  /** The session's own "when nobody answers" (the attention ladder; null: that step off). */
  setAttention(session_id, { nudge_after_s, act_after_s, on_approval, on_question }) {
    return this.command("set_attention",
      { session_id, nudge_after_s, act_after_s, on_approval, on_question });
  }

  /** The OS sandbox the session's commands run in, and whether they may use the network. */
  setSessionModel(session_id, provider, model, effort) {
    return this.command("set_session_model", { session_id, provider, model, effort });
  }

  setSandbox(session_id, sandbox, network) {
    return this.command("set_sandbox", { session_id, sandbox, network });
  }

  interrupt(session_id) {
    return this.command("interrupt", { session_id });
  }

  /** Stop a process the agent started (`exec`): the worker kills it. */
  stopProcess(session_id, process_id) {
    return this.command("stop_process", { session_id, process_id });
  }

  /** Make `port` of a process that listens inside its sandbox's own network reachable on
   * its machine's loopback. */
  forwardPort(session_id, process_id, port) {
    return this.command("forward_port", { session_id, process_id, port });
  }

  /** Summarize the session's older conversation into one summary item. */
  compact(session_id) {
    return this.command("compact_session", { session_id });
  }

  retryTurn(session_id) {
    return this.command("retry_turn", { session_id });
  }

  /** A session's budget (`session_id`), or the day's (`session_id` null); money in micros. */
  setBudget(session_id, max_tokens, max_micros) {
    return this.command("set_budget", { session_id, max_tokens, max_micros });
  }

  /** "Raise by …" on a session stopped at a budget: `by` tokens, or micros for money. */
  raiseBudget(session_id, by) {
    return this.command("raise_budget", { session_id, by });
  }

  setPrices(prices) {
    return this.command("set_prices", { prices });
  }

  answerQuestion(session_id, question_id, answer) {
    return this.command("answer_question", { session_id, question_id, answer });
  }

  renameSession(session_id, title) {
    return this.command("rename_session", { session_id, title });
  }

  /** Trust a project hook file of the session in this exact content (issue 39). */
  trustHooks(session_id, path, sha256) {
    return this.command("trust_hooks", { session_id, path, sha256 });
  }

  /** Name a machine; "" gives it back its hostname. */
  renameWorker(worker_id, name) {
    return this.command("rename_worker", { worker_id, name });
  }

  archiveSession(session_id, archived) {
    return this.command("archive_session", { session_id, archived });
  }

  closeSession(session_id, reason = "") {
    return this.command("close_session", { session_id, reason });
  }

  deleteSession(session_id) {
    return this.command("delete_session", { session_id });
  }

  /** A new session with this one's conversation up to `item_id` (the end when null);
   * `worktree` (`{base?, setup?}`): in a git worktree of its own. */
  forkSession(session_id, item_id = null, title = null, worktree = null) {
    const fields = { session_id };
    if (item_id) fields.item_id = item_id;
    if (title) fields.title = title;
    if (worktree) fields.worktree = worktree;
    return this.command("fork_session", fields);
  }

  moveSession(session_id, worker_id) {
    return this.command("move_session", { session_id, worker_id });
  }

  /** Approve the proposed plan; `steps` (strings) when the user edited it. */
  approvePlan(session_id, steps = null, note = "") {
    const fields = { session_id, note };
    if (steps) fields.steps = steps;
    return this.command("approve_plan", fields);
  }

  /** The project memory of `workdir` on `worker_id`; with `session_id`, that session's
   * (its repository's: the server moves the folders' older notes into it). */
  setMemory(worker_id, workdir, text, session_id = "") {
    const fields = { worker_id, workdir, text };
    if (session_id) fields.session_id = session_id;
    return this.command("set_memory", fields);
  }
}
