// The Telegram dialog (top bar): whether a bot token is set and the bot runs, a pairing code
// to add a chat (`/pair CODE` there), and the paired chats, each removable.
//
// The token is sent once (PUT /api/telegram/token) and never shown again: the server only
// says where it came from. The chat list is folded from `telegram_*` events (the store), so
// a chat paired from the phone shows up here live.

import { api } from "../api.js";
import { fmtTime, h, replaceChildren } from "../dom.js";

const STATES = {
  off: "Off",
  starting: "Starting…",
  running: "Running",
  error: "Error",
  elsewhere: "Running on another replica",
};

export class TelegramDialog {
  constructor(ctx) {
    this.ctx = ctx;
    this.status = null;
    this.code = null;
    this.el = h("dialog", { class: "dialog", "data-testid": "telegram-dialog",
      "aria-labelledby": "tg-title" });
    this.el.addEventListener("close", () => {
      this._unsubscribe();
      this.el.remove();
    });
    this._unsubscribe = ctx.store.subscribe((change) => {
      const type = change.kind === "event" ? change.env.event.type : "";
      if (type === "telegram_chat_paired") this.code = null; // used: single-use
      if (change.kind === "reset" || type.startsWith("telegram_chat")) this._render();
    });
  }

  async open() {
    document.body.append(this.el);
    this._render();
    this.el.showModal();
    await this._refresh();
  }

  async _refresh() {
    try {
      this.status = await api.telegram();
    } catch (err) {
      this._error = err.message;
    }
    this._render();
    // the bot reaches Telegram in the background: follow it until it runs or fails
    if (this.status && this.status.state === "starting" && this.el.open) {
      setTimeout(() => this._refresh(), 500);
    }
  }

  async _do(fn) {
    try {
      this._error = "";
      await fn();
    } catch (err) {
      this._error = err.message;
    }
    await this._refresh();
  }

  _render() {
    const s = this.status;
    const chats = Object.values(this.ctx.store.state.telegram_chats || {})
      .sort((a, b) => a.paired_at - b.paired_at);
    const state = s ? STATES[s.state] || s.state : "…";
    const where = !s ? "" : s.token_source === "env" ? `token from $${s.token_env}`
      : s.token_source === "file" ? "token pasted here" : "no token";
    const token = h("input", { id: "tg-token", class: "input mono", type: "password",
      autocomplete: "off", "data-testid": "tg-token", placeholder: "123456:ABC… from @BotFather" });
    const tokenForm = s && s.token_source !== "env" ? h("form", { class: "row gap",
      onsubmit: (ev) => {
        ev.preventDefault();
        this._do(() => api.setTelegramToken(token.value.trim()));
      } },
    h("label", { for: "tg-token", class: "offscreen" }, "Bot token"), token,
    h("button", { class: "btn", type: "submit", "data-testid": "tg-save" }, "Save token"),
    s.token_source === "file" ? h("button", { class: "btn subtle", type: "button",
      "data-testid": "tg-clear", onclick: () => this._do(() => api.clearTelegramToken()) },
    "Remove token") : null) : null;
    const code = this.code && this.code.expires_at * 1000 > Date.now()
      ? h("p", {}, "In the chat with ", h("b", {}, `@${(s && s.bot_username) || "your bot"}`),
        ", send ", h("code", { "data-testid": "tg-code" }, `/pair ${this.code.code}`),
        ` (once, until ${fmtTime(this.code.expires_at)}).`)
      : null;
    const pair = h("button", { class: "btn", type: "button", "data-testid": "tg-pair",
      disabled: !s || s.state !== "running",
      onclick: () => this._do(async () => { this.code = await api.telegramPairingCode(); }) },
    "Pair a chat");
    const list = chats.length ? h("ul", { class: "plain", "data-testid": "tg-chats" },
      chats.map((c) => h("li", { class: "row gap" },
        h("span", {}, `${c.title || c.chat_id}`), h("span", { class: "muted mono" },
          String(c.chat_id)),
        h("button", { class: "btn subtle", type: "button", "data-testid": "tg-remove",
          "aria-label": `Remove ${c.title || c.chat_id}`,
          onclick: () => this._do(() => api.removeTelegramChat(c.chat_id)) }, "Remove"))))
      : h("p", { class: "muted" }, "No chat is paired: the bot answers nobody.");
    replaceChildren(this.el, h("div", { class: "form" },
      h("h2", { id: "tg-title" }, "Telegram"),
      h("p", { "data-testid": "tg-state" }, `${state}`,
        s && s.bot_username ? ` as @${s.bot_username}` : "", s && s.mode !== "none"
          ? ` (${s.mode})` : "", where ? ` · ${where}` : ""),
      s && s.error ? h("p", { class: "bad" }, s.error) : null,
      tokenForm,
      h("div", { class: "row gap" }, pair),
      code,
      h("h3", {}, "Paired chats"),
      list,
      this._error ? h("p", { class: "bad", role: "alert" }, this._error) : null,
      h("div", { class: "row gap end" }, h("button", { class: "btn", type: "button",
        "data-testid": "tg-close", onclick: () => this.el.close() }, "Close"))));
  }
}
