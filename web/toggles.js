// What changing a session's sandbox mode or network toggle does to the processes it runs:
// the server's rule (codey_server/core/toggles.py), here so the view can ask before a change
// that stops some. A process keeps the sandbox it started in; a change that takes away what
// a running process holds stops it, a change that only gives keeps it running without the
// new access. tests/unit/test_toggles.py holds this file to the server's answers.

const WRITES = { "read-only": 0, "workspace-write": 1, "full-access": 2 };
const MODE_WORDS = { "read-only": "read-only", "workspace-write": "workspace-write",
  "full-access": "full access (no sandbox)" };

/** What a mode and toggle let a command do (full access has the network, whatever the
 * toggle says). */
export function access(mode, network) {
  return { writes: WRITES[mode], network: Boolean(network) || mode === "full-access" };
}

/** Whether the change `before` → `after` takes away something `held` has. */
export function takenFrom(held, before, after) {
  return (after.writes < before.writes && held.writes > after.writes)
    || (before.network && !after.network && held.network);
}

/** Whether the change `before` → `after` gives something `held` lacks. */
export function shortOf(held, before, after) {
  return (after.writes > before.writes && held.writes < after.writes)
    || (after.network && !before.network && !held.network);
}

function held(p, before) {
  return p.sandbox === null || p.sandbox === undefined ? before : access(p.sandbox, p.network);
}

/** The change in words: "Network turned off", "Sandbox set to read-only, network turned on". */
export function changeWords(beforeMode, beforeNetwork, afterMode, afterNetwork) {
  const parts = [];
  if (beforeMode !== afterMode) parts.push(`sandbox set to ${MODE_WORDS[afterMode]}`);
  const was = access(beforeMode, beforeNetwork);
  const now = access(afterMode, afterNetwork);
  if (was.network !== now.network) {
    parts.push(now.network ? "network turned on" : "network turned off");
  }
  const text = parts.join(", ") || "sandbox settings changed";
  return text[0].toUpperCase() + text.slice(1);
}

/** Changing session `s` to `sandbox` / `network`: the running processes it `stop`s, those
 * that `keep` their narrower settings, and the change in `words`. */
export function toggleEffects(s, sandbox, network) {
  const before = access(s.sandbox, s.network);
  const after = access(sandbox, network);
  const running = s.processes.filter((p) => p.status === "running");
  const stop = running.filter((p) => takenFrom(held(p, before), before, after));
  const keep = running.filter((p) => !stop.includes(p)
    && shortOf(held(p, before), before, after));
  return { stop, keep, words: changeWords(s.sandbox, s.network, sandbox, network) };
}

/** A process's command on one line, cut after a word to at most 40 characters. */
function processName(p) {
  const name = p.argv.join(" ").split(/\s+/).filter(Boolean).join(" ");
  if (name.length <= 40) return name;
  let cut = "";
  for (const word of name.split(" ")) {
    const longer = cut ? `${cut} ${word}` : word;
    if (longer.length > 38) break;
    cut = longer;
  }
  return `${cut || name.slice(0, 38)} …`;
}

/** The processes' commands for a sentence, as the server's notices name them: three, then
 * how many more. */
export function processNames(processes) {
  const names = processes.slice(0, 3).map(processName);
  const more = processes.length - 3;
  return names.join(", ") + (more > 0 ? ` and ${more} more` : "");
}

/** What running process `p` lacks that session `s` gives a command started now (a restart
 * gets it): ["write access", "network"]; [] when nothing, or when not recorded. */
export function missing(s, p) {
  if (p.sandbox === null || p.sandbox === undefined) return [];
  const mine = access(p.sandbox, p.network);
  const now = access(s.sandbox, s.network);
  const gaps = [];
  if (mine.writes < now.writes) gaps.push(now.writes === 2 ? "full access" : "write access");
  if (!mine.network && now.network && now.writes < 2) gaps.push("network");
  return gaps;
}
