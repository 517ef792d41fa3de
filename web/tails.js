// Processes' live output, beside the store: the server sends it outside the event log
// (`process_tails` frames: every tail it keeps, whole, once the catch-up is sent, then what
// each process writes). Not part of the state — it is a view of the worker's processes, like
// the terminal's screen — so the fold and the server's state stay equal without it.

import { PROCESS_TAIL_KEPT } from "./fold_constants.js";

/** Keep the newest PROCESS_TAIL_KEPT characters of `text` (whether it was cut, too). */
export function keepTail(text) {
  if (text.length <= PROCESS_TAIL_KEPT) return [text, false];
  let cut = text.slice(-PROCESS_TAIL_KEPT);
  // not half of a surrogate pair at the start
  if (/^[\uDC00-\uDFFF]/.test(cut)) cut = cut.slice(1);
  return [cut, true];
}

/** The tails, by process id: `{session_id, text, cut}`; listeners get the ids that changed. */
export class Tails {
  constructor() {
    this._tails = new Map();
    this._listeners = new Set();
  }

  /** The tail of process `processId`, or null when the server sent none. */
  get(processId) {
    return this._tails.get(processId) || null;
  }

  /** Call `fn(processIds)` after a frame changed those tails; returns the unsubscriber. */
  subscribe(fn) {
    this._listeners.add(fn);
    return () => this._listeners.delete(fn);
  }

  /** Take a `process_tails` frame. */
  apply(frame) {
    const changed = [];
    for (const t of frame.tails) {
      const have = this._tails.get(t.process_id);
      const whole = t.reset || !have;
      const [text, cut] = keepTail(whole ? t.text : have.text + t.text);
      this._tails.set(t.process_id, { session_id: t.session_id, text,
        cut: cut || (!whole && have.cut) });
      changed.push(t.process_id);
    }
    for (const fn of this._listeners) {
      try {
        fn(changed);
      } catch (err) {
        console.error("tails listener failed", err);
      }
    }
  }

  /** The tails of a session's processes that are no longer listed go (it was deleted, or
   * they left its list of ended processes). */
  prune(sessionId, processIds) {
    const keep = new Set(processIds);
    for (const [id, t] of this._tails) {
      if (t.session_id === sessionId && !keep.has(id)) this._tails.delete(id);
    }
  }
}
