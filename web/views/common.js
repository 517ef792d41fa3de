// Helpers shared by the views.

import { h } from "../dom.js";

/**
 * Batch DOM work to one animation frame: `schedule()` many times, `fn` runs once.
 * `flushNow()` runs it synchronously (tests, or before reading the DOM).
 */
export class FrameBatch {
  constructor(fn) {
    this._fn = fn;
    this._handle = null;
  }

  schedule() {
    if (this._handle !== null) return;
    // rAF does not run in hidden tabs; a timeout keeps the DOM fresh for when they come back.
    const run = () => this.flushNow();
    this._handle = document.hidden ? setTimeout(run, 100) : requestAnimationFrame(run);
  }

  flushNow() {
    if (this._handle !== null) {
      cancelAnimationFrame(this._handle);
      clearTimeout(this._handle);
    }
    this._handle = null;
    this._fn();
  }

  cancel() {
    if (this._handle !== null) {
      cancelAnimationFrame(this._handle);
      clearTimeout(this._handle);
    }
    this._handle = null;
  }
}

/**
 * Reconcile `container`'s children with `values` by key: a child whose signature is unchanged
 * is kept as is (so focus and open <details> survive), others are re-rendered.
 */
export function keyedList(container, values, key, signature, render) {
  const old = new Map();
  for (const child of container.children) {
    if (child.dataset.key !== undefined) old.set(child.dataset.key, child);
  }
  let index = 0;
  for (const value of values) {
    const k = key(value);
    const sig = signature(value);
    let node = old.get(k);
    if (!node || node.dataset.sig !== sig) {
      const fresh = render(value);
      fresh.dataset.key = k;
      fresh.dataset.sig = sig;
      if (node) node.replaceWith(fresh);
      node = fresh;
    }
    old.delete(k);
    const at = container.children[index];
    if (at !== node) container.insertBefore(node, at || null);
    index += 1;
  }
  for (const node of old.values()) node.remove();
}

/** A status chip. `testid` names it for tests; the text is the raw status value. */
export function statusChip(status, testid) {
  return h("span", { class: `chip status-${status}`, "data-testid": testid,
    "data-status": status }, status);
}

/** Statuses that need the user. */
export function needsAttention(status) {
  return status === "waiting_approval" || status === "waiting_user";
}

/** Statuses in which a turn is under way and can be interrupted. */
export function isBusy(status) {
  return status === "running" || status === "waiting_approval" || status === "waiting_worker" ||
    status === "waiting_user";
}

/** Whether a session's worker is connected (and not revoked). */
export function workerUp(state, workerId) {
  const w = state.workers[workerId];
  return Boolean(w && w.connected && !w.revoked);
}
