// REST calls to codey-server (same origin; the auth cookie is sent by the browser).

/** An HTTP error; `status` is the code and `message` the server's `detail` when it sent one. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function request(method, path, body) {
  const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!res.ok) {
    const detail = data && typeof data === "object" && data.detail ? data.detail : null;
    throw new ApiError(res.status, detail ? String(detail) : `${res.status} ${res.statusText}`);
  }
  return data;
}

export const api = {
  config: () => request("GET", "/api/config"),
  prices: () => request("GET", "/api/prices"),
  viewing: (session_ids) => request("POST", "/api/viewing", { session_ids }),
  about: () => request("GET", "/api/about"),
  webTools: () => request("GET", "/api/web-tools"),
  setWebTools: (body) => request("PUT", "/api/web-tools", body),
  bootstrap: () => request("GET", "/api/state/bootstrap"),
  pairRequests: () => request("GET", "/api/pairing/requests"),
  pairByCode: (code) => request("GET", `/api/pairing/code/${encodeURIComponent(code)}`),
  approvePair: (id, code) =>
    request("POST", `/api/pairing/requests/${encodeURIComponent(id)}/approve`, { code }),
  localTools: () => request("GET", "/api/pairing/local-tools"),
  denyPair: (id) => request("POST", `/api/pairing/requests/${encodeURIComponent(id)}/deny`),
  createTerminal: (worker_id, workdir, session_id) =>
    request("POST", "/api/terminals", { worker_id, workdir, session_id }),
  closeTerminal: (id) => request("POST", `/api/terminals/${encodeURIComponent(id)}/close`),
  createTask: (body) => request("POST", "/api/tasks", body),
  moveTask: (id, status, before) =>
    request("POST", `/api/tasks/${encodeURIComponent(id)}/move`, { status, before }),
  deleteTask: (id) => request("DELETE", `/api/tasks/${encodeURIComponent(id)}`),
  runTask: (id, body) => request("POST", `/api/tasks/${encodeURIComponent(id)}/run`, body),
  createSchedule: (body) => request("POST", "/api/schedules", body),
  updateSchedule: (id, body) => request("POST", `/api/schedules/${encodeURIComponent(id)}`, body),
  deleteSchedule: (id) => request("DELETE", `/api/schedules/${encodeURIComponent(id)}`),
  runSchedule: (id) => request("POST", `/api/schedules/${encodeURIComponent(id)}/run`),
  createTrigger: (body) => request("POST", "/api/triggers", body),
  updateTrigger: (id, body) => request("POST", `/api/triggers/${encodeURIComponent(id)}`, body),
  deleteTrigger: (id) => request("DELETE", `/api/triggers/${encodeURIComponent(id)}`),
  replayDelivery: (id, delivery) => request("POST",
    `/api/triggers/${encodeURIComponent(id)}/deliveries/${encodeURIComponent(delivery)}/replay`),
  mcpTokens: () => request("GET", "/api/mcp/tokens"),
  createMcpToken: (name, scope, maxPolicy) => request("POST", "/api/mcp/tokens",
    { name, scope, max_policy: maxPolicy }),
  revokeMcpToken: (id) => request("DELETE", `/api/mcp/tokens/${encodeURIComponent(id)}`),
  workerLog: (id) => request("GET", `/api/workers/${encodeURIComponent(id)}/log`),
  revokeWorker: (id) => request("POST", `/api/workers/${encodeURIComponent(id)}/revoke`),
  authStatus: () => request("GET", "/api/auth/status"),
  loginLink: (provider) => request("POST", "/api/auth/login-link", { provider }),
  deviceLogin: (provider) => request("POST", "/api/auth/device", { provider }),
  apiKey: (provider, api_key) => request("POST", "/api/auth/api-key", { provider, api_key }),
  logout: (provider) => request("POST", "/api/auth/logout", { provider }),
  changes: (id) => request("GET", `/api/sessions/${encodeURIComponent(id)}/changes`),
  /** A git operation on the session's worktree: commit, merge, resolve, push, remove. */
  worktreeOp: (id, op, body) =>
    request("POST", `/api/sessions/${encodeURIComponent(id)}/worktree/${op}`, body),
  draftCommitMessage: (id) =>
    request("POST", `/api/sessions/${encodeURIComponent(id)}/worktree/draft-message`),
  saveProvider: (body) => request("POST", "/api/providers", body),
  removeProvider: (name) => request("DELETE", `/api/providers/${encodeURIComponent(name)}`),
  testProvider: (name) => request("POST", `/api/providers/${encodeURIComponent(name)}/test`),
  listModels: (query) => request("POST", "/api/providers/models", query),
  push: () => request("GET", "/api/push"),
  pushPreview: () => request("GET", "/api/push/preview"),
  addPushDevice: (body) => request("POST", "/api/push/devices", body),
  changePushDevice: (id, body) =>
    request("PUT", `/api/push/devices/${encodeURIComponent(id)}`, body),
  removePushDevice: (id) => request("DELETE", `/api/push/devices/${encodeURIComponent(id)}`),
  testPushDevice: (id) => request("POST", `/api/push/devices/${encodeURIComponent(id)}/test`),
  telegram: () => request("GET", "/api/telegram"),
  setTelegramToken: (token) => request("PUT", "/api/telegram/token", { token }),
  clearTelegramToken: () => request("DELETE", "/api/telegram/token"),
  telegramPairingCode: () => request("POST", "/api/telegram/pairing-code"),
  removeTelegramChat: (id) =>
    request("DELETE", `/api/telegram/chats/${encodeURIComponent(id)}`),
  workerWheels: () => request("GET", "/dl/index.json"),
  sessionLogUrl: (id) => `/api/sessions/${encodeURIComponent(id)}/log`,
  /** Rewind to just before the prompt `turn`: {turn, mode: both|files|conversation, keep}. */
  rewind: (id, body) => request("POST", `/api/sessions/${encodeURIComponent(id)}/rewind`, body),
  /** The files a rewind to `turn` would change, with their diffs (the checkpoints'). */
  rewindPreview: (id, turn) => request("GET", `/api/sessions/${encodeURIComponent(id)}` +
    `/checkpoints/${encodeURIComponent(turn)}/preview`),
  restoreFile: (id, turn, path) => request("POST", `/api/sessions/${encodeURIComponent(id)}` +
    `/checkpoints/${encodeURIComponent(turn)}/restore-file`, { path }),
  turnDiff: (id, from, to) => request("GET", `/api/sessions/${encodeURIComponent(id)}/diff?` +
    new URLSearchParams({ from, to })),
  /** Store a file for a prompt; resolves with its attachment {hash, name, mime, size}. */
  uploadBlob: async (file) => {
    const q = new URLSearchParams({ name: file.name || "pasted", mime: file.type ||
      "application/octet-stream" });
    const res = await fetch(`/api/blobs?${q}`, { method: "POST", body: file,
      credentials: "same-origin", headers: { "Content-Type": "application/octet-stream" } });
    const data = await res.json().catch(() => ({}));
    if (!res.ok) throw new ApiError(res.status, data.detail || `${res.status} ${res.statusText}`);
    return data;
  },
  blobUrl: (a) => `/api/blobs/${encodeURIComponent(a.hash)}?mime=${encodeURIComponent(a.mime)}`,
  slashCommands: (id) => request("GET", `/api/sessions/${encodeURIComponent(id)}/commands`),
  runSlash: (id, name, args) => request("POST",
    `/api/sessions/${encodeURIComponent(id)}/commands/run`, { name, arguments: args }),
  // an ACP agent's mode ({mode}) or one of its config options ({option, value})
  setAgentConfig: (id, body) => request("POST",
    `/api/sessions/${encodeURIComponent(id)}/agent/config`, body),
  moveSession: (id, worker_id, workdir) =>
    request("POST", `/api/sessions/${encodeURIComponent(id)}/move`, { worker_id, workdir }),
};
