// A session's project memory, as the server's codey_server/core/memory.py finds it: kept per
// repository (its main checkout's folder), with the folders it used to be kept for (the folder
// picked for the worktree, the workdir) as the fallback. A test runs both on the same sessions.

/** The folders whose memory is the session's, each once, the one it is kept for first. */
export function memoryPlaces(s) {
  const w = s.worktree;
  const env = s.context ? s.context.environment : null;
  const places = [w ? w.repo_root : null, env ? env.repo_root : null, w ? w.repo : null,
    s.workdir];
  return [...new Set(places.filter((p) => p))];
}

/** What the session remembers: the first place's text, then the lines of the others' it
 * lacks. */
export function memoryText(state, s) {
  let text = "";
  const seen = new Set();
  for (const place of memoryPlaces(s)) {
    const memory = state.memories[`${s.worker_id}:${place}`];
    const more = memory ? memory.text : "";
    const lines = more.split(/\r\n|\r|\n/).filter((line) => line.trim());
    if (!text.trim()) {
      if (lines.length) text = more;
    } else {
      const extra = lines.filter((line) => !seen.has(line.trim()));
      if (extra.length) text = `${text.replace(/\n+$/, "")}\n${extra.join("\n")}`;
    }
    for (const line of lines) seen.add(line.trim());
  }
  return text;
}

/** Whether the session's memory is kept for its repository (else for its folder). */
export function memoryOfRepository(s) {
  const w = s.worktree;
  const env = s.context ? s.context.environment : null;
  return Boolean((w && w.repo_root) || (env && env.repo_root));
}
