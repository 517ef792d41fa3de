// `#/terminal/<id>`: a shell on a worker, in xterm.js (vendored under web/vendor/xterm/,
// loaded here on first use).
//
// The shell runs in tmux on the machine: leaving this page (or closing the tab) ends only this
// view of it, so coming back finds the same shell; two tabs see the same screen. Bytes go over
// `WS /ws/terminal/<id>`: keystrokes and sizes up as JSON, output down as binary frames.

import { api } from "../api.js";
import { h } from "../dom.js";

const VENDOR = "/vendor/xterm";
let assets = null;

/** Load xterm.js, its fit addon and its stylesheet once. */
function loadXterm() {
  if (!assets) {
    const script = (src) => new Promise((resolve, reject) => {
      const el = h("script", { src });
      el.addEventListener("load", resolve);
      el.addEventListener("error", () => reject(new Error(`could not load ${src}`)));
      document.head.append(el);
    });
    document.head.append(h("link", { rel: "stylesheet", href: `${VENDOR}/xterm.css` }));
    assets = script(`${VENDOR}/xterm.js`).then(() => script(`${VENDOR}/addon-fit.js`));
  }
  return assets;
}

const ENDINGS = {
  exited: "The shell exited.",
  closed: "This terminal was closed.",
  detached: "Detached: the shell still runs.",
  terminal_disabled: "The web terminal is off on this machine.",
  no_tmux: "tmux is not installed on this machine.",
  outside_allowed_roots: "This folder is outside the machine's allowed roots.",
};

export class TerminalView {
  constructor(ctx, terminalId) {
    this.ctx = ctx;
    this.terminalId = terminalId;
    this._state = h("span", { class: "chip", "data-testid": "terminal-state" }, "connecting");
    this._title = h("h2", { class: "s-title" }, "Terminal");
    this._meta = h("div", { class: "s-meta" });
    this._back = h("a", { class: "back", href: "#/", "aria-label": "Back" }, "←");
    this._reconnect = h("button", { class: "btn", type: "button", hidden: true,
      "data-testid": "terminal-reconnect", onclick: () => this._connect() }, "Reconnect");
    // Closing ends the shell and whatever runs in it: two clicks, "Close terminal" then
    // "Close it" (no modal, keyboard friendly, as revoking a machine)
    this._close = h("button", { class: "btn danger subtle", type: "button",
      "data-testid": "terminal-close", onclick: () => this._askClose(true) },
    "Close terminal");
    this._confirm = h("span", { class: "row gap confirm", hidden: true,
      "data-testid": "terminal-close-ask", role: "group", "aria-label": "Close the terminal?" },
    h("span", { class: "small" }, "End the shell and what runs in it?"),
    h("button", { class: "btn danger", type: "button", "data-testid": "terminal-close-confirm",
      onclick: () => this._closeTerminal() }, "Close it"),
    h("button", { class: "btn", type: "button", "data-testid": "terminal-close-cancel",
      onclick: () => this._askClose(false) }, "Cancel"));
    this._host = h("div", { class: "term-host", "data-testid": "terminal" });
    this.el = h("section", { class: "terminal-view", "data-testid": "terminal-view" },
      h("header", { class: "s-head" },
        h("div", { class: "s-head-main" }, this._back,
          h("div", { class: "s-head-text" }, this._title, this._meta)),
        h("div", { class: "s-controls" }, this._state, this._reconnect, this._close,
          this._confirm)),
      this._host);
    this._ws = null;
    this._term = null;
    this._gone = false;
    this._renderHead();
  }

  get info() {
    return (this.ctx.store.state.terminals || {})[this.terminalId] || null;
  }

  _renderHead() {
    const t = this.info;
    if (!t) return;
    const w = this.ctx.store.state.workers[t.worker_id];
    this._title.textContent = `Terminal · ${w ? w.hostname : t.worker_id}`;
    this._meta.replaceChildren(h("span", { class: "mono" }, t.workdir),
      ...(t.viewers > 1 ? [h("span", { class: "muted" }, ` · ${t.viewers} views open`)] : []));
    this._back.href = t.session_id ? `#/session/${encodeURIComponent(t.session_id)}` : "#/";
    document.title = `Terminal · ${w ? w.hostname : ""} · Codey`;
  }

  async mounted() {
    try {
      await loadXterm();
    } catch (err) {
      this._setState(err.message, "error");
      return;
    }
    if (this._gone) return;
    const dark = document.documentElement.dataset.theme === "dark";
    this._term = new window.Terminal({
      cursorBlink: true, fontSize: 14, scrollback: 5000, lineHeight: 1.2, // (room for "_")
      fontFamily: getComputedStyle(document.documentElement).getPropertyValue("--mono") ||
        "monospace",
      theme: dark ? { background: "#0b0f17" } : { background: "#ffffff", foreground: "#1d2330",
        cursor: "#1d2330", selectionBackground: "#c8d7ff" },
    });
    this._fit = new window.FitAddon.FitAddon();
    this._term.loadAddon(this._fit);
    this._term.open(this._host);
    this._fit.fit();
    this._term.onData((data) => this._sendJSON({ type: "input", data }));
    this._term.onResize(({ cols, rows }) => this._sendJSON({ type: "resize", cols, rows }));
    this._resize = new ResizeObserver(() => {
      if (this._term) this._fit.fit();
    });
    this._resize.observe(this._host);
    this._connect();
  }

  _connect() {
    if (!this._term || this._gone) return;
    this._reconnect.hidden = true;
    this._setState("connecting");
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const { cols, rows } = this._term;
    const ws = new WebSocket(`${proto}://${location.host}/ws/terminal/` +
      `${encodeURIComponent(this.terminalId)}?cols=${cols}&rows=${rows}`);
    ws.binaryType = "arraybuffer";
    this._ws = ws;
    let ended = null;
    ws.onopen = () => {
      this._setState("live", "connected");
      this._term.focus();
    };
    ws.onmessage = (ev) => {
      if (ev.data instanceof ArrayBuffer) {
        this._term.write(new Uint8Array(ev.data));
      } else {
        try {
          ended = JSON.parse(ev.data);
        } catch {
          // not ours
        }
      }
    };
    ws.onclose = (ev) => {
      if (this._ws !== ws || this._gone) return;
      this._ws = null;
      if (ended) {
        const words = ENDINGS[ended.code] || ended.message || ended.code;
        this._setState(ended.shell_alive ? "detached" : "ended", "disconnected");
        this._term.write(`\r\n\x1b[2m[${words}]\x1b[0m\r\n`);
        this._reconnect.hidden = !ended.shell_alive;
      } else if (ev.code === 4404) {
        this._setState("closed", "disconnected");
        this._term.write("\r\n\x1b[2m[This terminal was closed.]\x1b[0m\r\n");
      } else {
        // the machine or the server went away: the shell may well still run
        this._setState(ev.code === 4503 ? "machine offline" : "disconnected", "disconnected");
        this._reconnect.hidden = false;
      }
      this._close.disabled = Boolean(this.info && this.info.closed);
    };
  }

  _sendJSON(msg) {
    if (this._ws && this._ws.readyState === WebSocket.OPEN) this._ws.send(JSON.stringify(msg));
  }

  _setState(text, cls = "") {
    this._state.textContent = text;
    this._state.className = `chip ${cls}`;
    this._state.dataset.state = text;
  }

  _askClose(ask) {
    this._close.hidden = ask;
    this._confirm.hidden = !ask;
    (ask ? this._confirm.querySelector("[data-testid=terminal-close-cancel]")
      : this._close).focus();
  }

  async _closeTerminal() {
    for (const b of this._confirm.querySelectorAll("button")) b.disabled = true;
    try {
      await api.closeTerminal(this.terminalId);
      this._confirm.hidden = true;
      this._close.hidden = false;
      this._close.disabled = true;
    } catch (err) {
      this.ctx.toast(`Not closed: ${err.message}`, "error");
    } finally {
      for (const b of this._confirm.querySelectorAll("button")) b.disabled = false;
    }
  }

  onChange(change) {
    if (change.kind === "reset" || change.env.event.type.startsWith("terminal_") ||
        change.env.event.type.startsWith("worker_")) this._renderHead();
  }

  destroy() {
    this._gone = true;
    if (this._resize) this._resize.disconnect();
    if (this._ws) {
      const ws = this._ws;
      this._ws = null;
      ws.close(1000, "left");
    }
    if (this._term) this._term.dispose();
  }
}
