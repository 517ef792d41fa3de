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

/** "48 B", "1.5 KiB", "3.2 MiB": a size in bytes, the same wherever it is shown. */
export function fmtBytes(n) {
  const size = Math.max(0, Number(n) || 0);
  if (size < 1024) return `${size} B`;
  const units = ["KiB", "MiB", "GiB"];
  let value = size / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

const SVG = "http://www.w3.org/2000/svg";

// Icons the page ships (drawn, not a font's glyph: a missing glyph is an empty box).
const ICONS = {
  // a branch: two tips joining into one stem
  fork: [["circle", { cx: 6, cy: 5, r: 2 }], ["circle", { cx: 18, cy: 5, r: 2 }],
    ["circle", { cx: 12, cy: 19, r: 2 }], ["path", { d: "M6 7v2a4 4 0 0 0 4 4h4a4 4 0 0 0 4-4V7" }],
    ["path", { d: "M12 13v4" }]],
  // a counter-clockwise arrow: back to an earlier point
  rewind: [["path", { d: "M3 12a9 9 0 1 0 3-6.7" }], ["path", { d: "M3 4v5h5" }]],
};

/** An inline SVG icon (`fork`), decorative: hidden from screen readers, in the text colour. */
export function svgIcon(name) {
  const svg = document.createElementNS(SVG, "svg");
  for (const [k, v] of Object.entries({ viewBox: "0 0 24 24", width: "14", height: "14",
    fill: "none", stroke: "currentColor", "stroke-width": "2", "stroke-linecap": "round",
    "stroke-linejoin": "round", "aria-hidden": "true", focusable: "false",
    class: `icon icon-svg-${name}`, "data-icon": name })) svg.setAttribute(k, v);
  for (const [tag, attrs] of ICONS[name] || []) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    svg.append(el);
  }
  return svg;
}
