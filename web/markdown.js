// A small, safe Markdown subset renderer for assistant messages.
//
// Safety by construction: every piece of source text is HTML-escaped FIRST, and the only tags in
// the output are the ones this file writes (p, br, pre, code, strong, em, ul, ol, li, h3–h6,
// blockquote, a). Links are kept only for http(s) URLs and get rel="noopener noreferrer".
// Raw HTML in the source is shown as text, never interpreted.
//
// Subset: paragraphs, ``` code fences, `inline code`, **bold**, *italic* / _italic_,
// - / * / 1. lists, # headings, > quotes, [text](https://…) links and bare https:// URLs.

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Escape text for use in HTML content and in double-quoted attributes. */
export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

// Inline transforms run on ALREADY-ESCAPED text, so `<`, `>` and quotes cannot appear in it.
function inlineEscaped(escaped) {
  // Split off code spans first so nothing inside them is transformed.
  const parts = escaped.split(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/);
  let out = "";
  for (let i = 0; i < parts.length; i += 3) {
    out += emphasis(parts[i]);
    if (i + 2 < parts.length) out += `<code>${parts[i + 2]}</code>`;
  }
  return out;
}

const LINK = /\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g;
const BARE_URL = /(^|[\s(])(https?:\/\/[^\s<)]+[^\s<).,;:!?'"])/g;

function anchor(href, label) {
  // `href` is escaped text (entities decode back to the URL); the scheme was checked by the regex.
  return `<a href="${href}" target="_blank" rel="noopener noreferrer">${label}</a>`;
}

function emphasis(text) {
  if (!text) return text;
  const links = [];
  // Replace links with placeholders so emphasis markers inside URLs are left alone.
  let s = text.replace(LINK, (_, label, href) => {
    links.push(anchor(href, label));
    return `\u0000${links.length - 1}\u0000`;
  });
  s = s.replace(BARE_URL, (_, lead, href) => {
    links.push(anchor(href, href));
    return `${lead}\u0000${links.length - 1}\u0000`;
  });
  s = s
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>")
    .replace(/__(?=\S)([\s\S]*?\S)__/g, "<strong>$1</strong>")
    .replace(/(^|[^*\w])\*(?=\S)([^*]*?\S)\*(?![*\w])/g, "$1<em>$2</em>")
    .replace(/(^|[^_\w])_(?=\S)([^_]*?\S)_(?![_\w])/g, "$1<em>$2</em>");
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => links[Number(i)]);
}

/** Render inline Markdown (no blocks) of raw text to safe HTML. */
export function renderInline(text) {
  // NUL is our placeholder marker; it has no business in text anyway.
  return inlineEscaped(escapeHtml(String(text).replace(/\u0000/g, "")));
}

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+.#-]*)\s*$/;
const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
const ORDERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const INDENTED = /^(\s{2,}|\t)(\S.*)$/;

/**
 * Render Markdown source to an HTML string that is safe to assign to `innerHTML`.
 * Unfinished constructs (a fence still streaming) render as if closed.
 */
export function renderMarkdown(source) {
  const lines = String(source ?? "").replace(/\r\n?/g, "\n").split("\n");
  const out = [];
  let para = [];
  let list = null; // {tag, items: [string]}
  let quote = [];

  const flushPara = () => {
    if (para.length) out.push(`<p>${para.map(renderInline).join("<br>")}</p>`);
    para = [];
  };
  const flushList = () => {
    if (list) {
      const start = list.tag === "ol" && list.start !== 1 ? ` start="${list.start}"` : "";
      const items = list.items.map((t) => `<li>${t.map(renderInline).join("<br>")}</li>`);
      out.push(`<${list.tag}${start}>${items.join("")}</${list.tag}>`);
    }
    list = null;
  };
  const flushQuote = () => {
    if (quote.length) out.push(`<blockquote>${renderMarkdown(quote.join("\n"))}</blockquote>`);
    quote = [];
  };
  const flushAll = () => {
    flushPara();
    flushList();
    flushQuote();
  };

  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      flushAll();
      const marker = fence[1];
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trimStart().startsWith(marker)) {
        body.push(lines[i]);
        i += 1;
      }
      const lang = fence[2] ? ` data-lang="${escapeHtml(fence[2])}"` : "";
      out.push(`<pre class="code"${lang}><code>${escapeHtml(body.join("\n"))}</code></pre>`);
      continue;
    }
    if (!line.trim()) {
      flushAll();
      continue;
    }
    const q = QUOTE.exec(line);
    if (q) {
      flushPara();
      flushList();
      quote.push(q[1]);
      continue;
    }
    flushQuote();
    const h = HEADING.exec(line);
    if (h) {
      flushAll();
      const level = Math.min(6, h[1].length + 2); // h3..h6: headings inside a message stay small
      out.push(`<h${level}>${renderInline(h[2])}</h${level}>`);
      continue;
    }
    const b = BULLET.exec(line);
    const o = b ? null : ORDERED.exec(line);
    if (b || o) {
      flushPara();
      const tag = b ? "ul" : "ol";
      if (!list || list.tag !== tag) {
        flushList();
        list = { tag, start: o ? Number(o[1]) : 1, items: [] };
      }
      list.items.push([b ? b[1] : o[2]]);
      continue;
    }
    if (list && INDENTED.test(line)) {
      list.items[list.items.length - 1].push(line.trim());
      continue;
    }
    flushList();
    para.push(line);
  }
  flushAll();
  return out.join("");
}
