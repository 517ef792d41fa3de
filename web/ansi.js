// ANSI escape codes in command output → DOM spans.
//
// Output streams in chunks, and a chunk may end in the middle of an escape sequence, so the
// parser is a small stateful stream: `feed(text)` returns a DocumentFragment for the new text
// and keeps the current style and any unfinished sequence for the next chunk.
// SGR colours (16-colour palette), bold, dim, italic and underline become CSS classes; every
// other control sequence (cursor moves, OSC titles, 256/true colour) is dropped.

// CSI … final byte, OSC … BEL/ST, or a lone two-byte escape.
const SEQUENCE = /\u001b(?:\[([0-9;?]*)([@-~])|\][^\u0007\u001b]*(?:\u0007|\u001b\\)|[@-Z\\-_])/g;
// An escape at the very end that might be completed by the next chunk.
const PARTIAL = /\u001b(?:\[[0-9;?]*|\][^\u0007\u001b]*|)$/;

export class AnsiStream {
  constructor() {
    this.reset();
  }

  reset() {
    this._fg = null;
    this._bg = null;
    this._flags = new Set();
    this._carry = "";
  }

  /** Parse `text` (continuing the previous chunks); returns a DocumentFragment. */
  feed(text) {
    let src = this._carry + text;
    this._carry = "";
    const partial = PARTIAL.exec(src);
    if (partial && partial[0]) {
      this._carry = partial[0];
      src = src.slice(0, partial.index);
    }
    const frag = document.createDocumentFragment();
    let last = 0;
    SEQUENCE.lastIndex = 0;
    let m;
    while ((m = SEQUENCE.exec(src)) !== null) {
      if (m.index > last) this._emit(frag, src.slice(last, m.index));
      last = SEQUENCE.lastIndex;
      if (m[2] === "m") this._sgr(m[1]);
    }
    if (last < src.length) this._emit(frag, src.slice(last));
    return frag;
  }

  _emit(frag, text) {
    // "\r\n" is a newline; a lone "\r" (progress bars) is kept out of the way.
    const clean = text.replace(/\r+\n/g, "\n").replace(/\r/g, "");
    if (!clean) return;
    const classes = [];
    if (this._fg !== null) classes.push(`ansi-fg-${this._fg}`);
    if (this._bg !== null) classes.push(`ansi-bg-${this._bg}`);
    for (const f of this._flags) classes.push(`ansi-${f}`);
    if (!classes.length) {
      frag.append(clean);
      return;
    }
    const span = document.createElement("span");
    span.className = classes.join(" ");
    span.textContent = clean;
    frag.append(span);
  }

  _sgr(params) {
    const codes = params === "" ? [0] : params.split(";").map((p) => Number(p) || 0);
    for (let i = 0; i < codes.length; i++) {
      const c = codes[i];
      if (c === 0) {
        this._fg = null;
        this._bg = null;
        this._flags.clear();
      } else if (c === 1) this._flags.add("bold");
      else if (c === 2) this._flags.add("dim");
      else if (c === 3) this._flags.add("italic");
      else if (c === 4) this._flags.add("underline");
      else if (c === 22) {
        this._flags.delete("bold");
        this._flags.delete("dim");
      } else if (c === 23) this._flags.delete("italic");
      else if (c === 24) this._flags.delete("underline");
      else if (c >= 30 && c <= 37) this._fg = c - 30;
      else if (c >= 90 && c <= 97) this._fg = c - 90 + 8;
      else if (c === 39) this._fg = null;
      else if (c >= 40 && c <= 47) this._bg = c - 40;
      else if (c >= 100 && c <= 107) this._bg = c - 100 + 8;
      else if (c === 49) this._bg = null;
      else if (c === 38 || c === 48) {
        // 256-colour / true colour: skip the arguments, keep the default colour.
        i += codes[i + 1] === 5 ? 2 : codes[i + 1] === 2 ? 4 : 0;
      }
    }
  }
}

/** Strip every escape sequence (for plain-text places such as titles). */
export function stripAnsi(text) {
  return String(text).replace(SEQUENCE, "");
}
