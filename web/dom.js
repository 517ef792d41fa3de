// Tiny DOM helpers: build elements without innerHTML, format times.

/**
 * `h("button", {class: "x", "data-testid": "y", onclick: fn}, "text", child…)`.
 * Attributes: `on*` functions become listeners, `true` sets a boolean attribute, `false`,
 * `null` and `undefined` are skipped. Children: strings (as text), nodes, arrays, null.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === false || value === null || value === undefined) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "value") {
      el.value = value;
    } else if (value === true) {
      el.setAttribute(key, "");
    } else {
      el.setAttribute(key, String(value));
    }
  }
  appendChildren(el, children);
  return el;
}

function appendChildren(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) appendChildren(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** Replace every child of `el` with `children`. */
export function replaceChildren(el, ...children) {
  el.replaceChildren();
  appendChildren(el, children);
  return el;
}

/** "14:03" today, "3 Mar 14:03" otherwise; "—" for null. `ts` in seconds. */
export function fmtTime(ts) {
  if (ts === null || ts === undefined || !ts) return "—";
  const d = new Date(ts * 1000);
  const now = new Date();
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (d.toDateString() === now.toDateString()) return time;
  return `${d.toLocaleDateString([], { day: "numeric", month: "short" })} ${time}`;
}

/** "just now", "5 min ago", "3 h ago", or a date. `ts` in seconds. */
export function fmtAgo(ts) {
  if (!ts) return "never";
  const s = Date.now() / 1000 - ts;
  if (s < 45) return "just now";
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return fmtTime(ts);
}

/** Quote argv for display the way a POSIX shell would accept it. */
export function shellJoin(argv) {
  return (argv || [])
    .map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${String(a).replace(/'/g, "'\\''")}'`))
    .join(" ");
}

/** A human label for a status like "waiting_approval". */
export function label(status) {
  return String(status || "").replace(/_/g, " ");
}

/** `url` if it is http(s), else null: nothing from outside becomes a `javascript:` link. */
export function safeUrl(url) {
  return typeof url === "string" && /^https?:\/\//i.test(url) ? url : null;
}

// Run `fn`; a failure's message shows in `errorEl` (hidden again before the next try).
export async function showingErrors(errorEl, fn) {
  errorEl.hidden = true;
  try {
    await fn();
  } catch (err) {
    errorEl.textContent = err.message;
    errorEl.hidden = false;
  }
}

/** Copy `text`; the Clipboard API needs a secure context, so plain http falls back. */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = h("textarea", { class: "offscreen", readonly: true }, text);
  document.body.append(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  if (!ok) throw new Error("the browser refused to copy; select the line instead");
}
