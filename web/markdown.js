// Markdown for the model's answers, and syntax highlighting for code blocks and file views.
//
// markdown-it parses (CommonMark plus tables and strikethrough) and highlight.js colours code;
// both are vendored from the npm registry under web/vendor/ (see their README.md). Neither is
// allowed to make live HTML out of the model's text:
// * `html: false`: raw HTML in the source is shown as text, never interpreted;
// * links are kept only for http(s) and mailto URLs (`validateLink`), and open in a new tab
//   with rel="noopener noreferrer";
// * images are never loaded (a picture's URL is a way to send data out): an image becomes a
//   link to it, with its alt text;
// * markdown-it escapes every text and attribute it writes, and highlight.js escapes the code
//   it colours (it only adds <span class="hljs-…">).
// The output is safe to assign to `innerHTML`; e2e/test_markdown.py feeds it hostile input.

import markdownit from "./vendor/markdown-it/markdown-it.min.js";
import hljs from "./vendor/highlight.js/core.min.js";
import bash from "./vendor/highlight.js/languages/bash.min.js";
import c from "./vendor/highlight.js/languages/c.min.js";
import cpp from "./vendor/highlight.js/languages/cpp.min.js";
import css from "./vendor/highlight.js/languages/css.min.js";
import diff from "./vendor/highlight.js/languages/diff.min.js";
import dockerfile from "./vendor/highlight.js/languages/dockerfile.min.js";
import go from "./vendor/highlight.js/languages/go.min.js";
import ini from "./vendor/highlight.js/languages/ini.min.js";
import java from "./vendor/highlight.js/languages/java.min.js";
import javascript from "./vendor/highlight.js/languages/javascript.min.js";
import json from "./vendor/highlight.js/languages/json.min.js";
import makefile from "./vendor/highlight.js/languages/makefile.min.js";
import markdown from "./vendor/highlight.js/languages/markdown.min.js";
import plaintext from "./vendor/highlight.js/languages/plaintext.min.js";
import python from "./vendor/highlight.js/languages/python.min.js";
import rust from "./vendor/highlight.js/languages/rust.min.js";
import shell from "./vendor/highlight.js/languages/shell.min.js";
import sql from "./vendor/highlight.js/languages/sql.min.js";
import typescript from "./vendor/highlight.js/languages/typescript.min.js";
import xml from "./vendor/highlight.js/languages/xml.min.js";
import yaml from "./vendor/highlight.js/languages/yaml.min.js";

const LANGUAGES = {
  bash, c, cpp, css, diff, dockerfile, go, ini, java, javascript, json, makefile, markdown,
  plaintext, python, rust, shell, sql, typescript, xml, yaml,
};
for (const [name, grammar] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, grammar);
// the grammars' own aliases cover js, ts, py, sh, html, yml, toml, console, patch…; these too
hljs.registerAliases(["jsonc", "json5"], { languageName: "json" });
hljs.registerAliases(["text", "txt", "log", "output"], { languageName: "plaintext" });
hljs.registerAliases(["mjs", "cjs", "jsx"], { languageName: "javascript" });
hljs.registerAliases(["tsx", "mts", "cts"], { languageName: "typescript" });
hljs.registerAliases(["h", "hpp", "cc", "cxx"], { languageName: "cpp" });
hljs.registerAliases(["cfg", "conf"], { languageName: "ini" });
hljs.registerAliases(["svg"], { languageName: "xml" });

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Escape text for use in HTML content and in double-quoted attributes. */
export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (ch) => ESCAPES[ch]);
}

/** The language highlight.js knows by `name` (a fence's info word, an alias), or null. */
export function knownLanguage(name) {
  const key = String(name || "").trim().toLowerCase();
  return key && hljs.getLanguage(key) ? key : null;
}

/** Code as HTML: coloured when `lang` is known, plain (escaped) otherwise. */
export function highlightCode(code, lang) {
  const known = knownLanguage(lang);
  if (!known) return escapeHtml(code);
  try {
    return hljs.highlight(String(code), { language: known, ignoreIllegals: true }).value;
  } catch {
    return escapeHtml(code);
  }
}

const FILE_NAMES = { dockerfile: "dockerfile", makefile: "makefile", gnumakefile: "makefile" };

/** The language of a file, from its name (`src/app.py` → python), or null. */
export function languageForPath(path) {
  const name = String(path || "").split("/").pop().toLowerCase();
  if (FILE_NAMES[name]) return FILE_NAMES[name];
  const dot = name.lastIndexOf(".");
  return dot > 0 ? knownLanguage(name.slice(dot + 1)) : null;
}

const SAFE_LINK = /^(https?:|mailto:)/i;

function makeRenderer({ highlight }) {
  const md = markdownit({
    html: false, // raw HTML is text
    linkify: true, // bare https:// URLs become links
    breaks: true, // a line break in a message is a line break on screen
    typographer: false,
  });
  md.linkify.set({ fuzzyLink: false, fuzzyEmail: false, fuzzyIP: false });
  // markdown-it's own check refuses javascript:, vbscript:, file: and most data:; ours keeps
  // only what a person can follow
  md.validateLink = (url) => SAFE_LINK.test(url.trim());
  const rules = md.renderer.rules;
  const esc = md.utils.escapeHtml;

  rules.link_open = (tokens, idx, options, env, self) => {
    const token = tokens[idx];
    token.attrSet("target", "_blank");
    token.attrSet("rel", "noopener noreferrer");
    return self.renderToken(tokens, idx, options);
  };
  // headings inside a message stay small: # is <h3>, ## is <h4>…
  rules.heading_open = (tokens, idx) => `<h${Math.min(6, Number(tokens[idx].tag.slice(1)) + 2)}>`;
  rules.heading_close = (tokens, idx) =>
    `</h${Math.min(6, Number(tokens[idx].tag.slice(1)) + 2)}>\n`;
  // an image is never loaded: a link to it, labelled with its alt text
  rules.image = (tokens, idx) => {
    const token = tokens[idx];
    const src = token.attrGet("src") || "";
    const alt = token.content || "image";
    return `<a href="${esc(src)}" target="_blank" rel="noopener noreferrer" class="md-image">` +
      `${esc(`image: ${alt}`)}</a>`;
  };
  const code = (text, lang) => {
    const known = knownLanguage(lang);
    const attr = lang ? ` data-lang="${esc(lang)}"` : "";
    const body = highlight && known ? highlightCode(text, known) : esc(text);
    return `<pre class="code"${attr}><code class="hljs${known ? ` language-${esc(known)}` : ""}">` +
      `${body}</code></pre>\n`;
  };
  rules.fence = (tokens, idx) => {
    const token = tokens[idx];
    const lang = (token.info || "").trim().split(/\s+/)[0];
    return code(token.content.replace(/\n$/, ""), lang);
  };
  rules.code_block = (tokens, idx) => code(tokens[idx].content.replace(/\n$/, ""), "");
  return md;
}

const RENDERERS = {
  highlighted: makeRenderer({ highlight: true }),
  plain: makeRenderer({ highlight: false }),
};

/**
 * Markdown source as HTML that is safe to assign to `innerHTML`. Unfinished constructs (a
 * fence still streaming) render as if closed. `highlight: false` skips the colouring (a
 * message still streaming is rendered again for every chunk).
 */
export function renderMarkdown(source, { highlight = true } = {}) {
  const md = highlight ? RENDERERS.highlighted : RENDERERS.plain;
  return md.render(String(source ?? ""));
}

/** One line of Markdown (no blocks) as safe HTML: `code`, **bold**, links. */
export function renderInline(text) {
  return RENDERERS.plain.renderInline(String(text ?? ""));
}
