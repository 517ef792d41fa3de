// Browser notifications (the Notification API) for what needs the user while the tab is
// hidden: an approval, a question, a failed or finished session. Off until the user turns
// them on with the bell (which asks the browser's permission); the choice is kept in
// localStorage.

import { h } from "./dom.js";

const KEY = "codey-notify";

export class Notifier {
  constructor(store, button) {
    this.store = store;
    this.button = button;
    this.enabled = false;
    try {
      this.enabled = localStorage.getItem(KEY) === "on";
    } catch {
      // storage off: not remembered
    }
    if (!("Notification" in window)) {
      button.hidden = true;
      return;
    }
    button.addEventListener("click", () => this.toggle());
    this._render();
  }

  get allowed() {
    return "Notification" in window && Notification.permission === "granted";
  }

  async toggle() {
    if (this.enabled) {
      this.enabled = false;
    } else {
      const answer = Notification.permission === "default"
        ? await Notification.requestPermission() : Notification.permission;
      this.enabled = answer === "granted";
    }
    try {
      localStorage.setItem(KEY, this.enabled ? "on" : "off");
    } catch {
      // not remembered
    }
    this._render();
  }

  _render() {
    const on = this.enabled && this.allowed;
    this.button.setAttribute("aria-pressed", String(on));
    this.button.setAttribute("aria-label", on ? "Turn notifications off"
      : "Notify me when a session needs me (while this tab is hidden)");
    this.button.title = this.button.getAttribute("aria-label");
    this.button.replaceChildren(h("span", { "aria-hidden": "true" },
      on ? "Alerts on" : "Alerts off"));
  }

  /** What a live event means for the user, or null. */
  static message(env, state) {
    const e = env.event;
    const s = env.session_id ? state.sessions[env.session_id] : null;
    const title = s ? s.title : "A session";
    if (e.type === "approval_requested") return [`${title} needs your approval`, e.reason || ""];
    if (e.type === "question_asked") return [`${title} asks you`, e.question];
    if (e.type === "session_status_changed" && e.status === "error") {
      return [`${title} failed`, e.reason || ""];
    }
    if (e.type === "session_status_changed" && e.status === "idle" && s) {
      const last = [...s.items].reverse().find((i) => i.kind === "assistant_message");
      return [`${title} finished`, last ? last.text.slice(0, 140) : ""];
    }
    return null;
  }

  /** Show a notification for a live event, when it matters and the tab is hidden. */
  maybeNotify(env) {
    if (!this.enabled || !this.allowed || !document.hidden) return;
    if (Date.now() / 1000 - env.ts > 15) return; // catch-up after a reconnect is old news
    const message = Notifier.message(env, this.store.state);
    if (!message) return;
    const [title, body] = message;
    const n = new Notification(title, { body, tag: `${env.session_id}:${env.event.type}` });
    n.onclick = () => {
      window.focus();
      if (env.session_id) location.hash = `#/session/${encodeURIComponent(env.session_id)}`;
      n.close();
    };
  }
}
