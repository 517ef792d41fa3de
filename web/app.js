// The page: one store, one socket, a hash router and the views.
//
// Routes: `#/` dashboard, `#/link` (the dashboard with "Link a machine" open),
// `#/session/<id>`, `#/terminal/<id>`, `#/board`, `#/schedules`, `#/triggers`, `#/usage`, `#/settings`
// (Settings → Models), `#/pair/<CODE>`.
// For tests: `window.__codey = {store, state(), seq(), socket, app}`.

import { api } from "./api.js";
import { h } from "./dom.js";
import { Notifier } from "./notify.js";
import { Socket } from "./socket.js";
import { Store } from "./store.js";
import { Dashboard } from "./views/dashboard.js";
import { LoginBanner } from "./views/login.js";
import { LoginScreen } from "./views/loginscreen.js";
import { PairPage } from "./views/pair.js";
import { SessionView } from "./views/session.js";
import { TerminalView } from "./views/terminal.js";
import { McpDialog } from "./views/mcp.js";
import { BoardPage } from "./views/board.js";
import { SchedulesPage } from "./views/schedules.js";
import { TriggersPage } from "./views/triggers.js";
import { ModelsPage } from "./views/models.js";
import { UsagePage } from "./views/usage.js";
import { TelegramDialog } from "./views/telegram.js";
import { Shortcuts } from "./views/shortcuts.js";
import { Toasts } from "./views/toasts.js";
import { UpgradeNotice } from "./views/upgrade.js";

const THEME_KEY = "codey-theme";

class App {
  constructor({ connect = true } = {}) {
    this.store = new Store();
    this.config = null;
    this.view = null;
    this.main = document.getElementById("main");
    this.toasts = new Toasts(document.getElementById("toasts"));
    this.connEl = document.querySelector("[data-testid=conn-state]");
    const ctx = {
      store: this.store,
      socket: null,
      config: null,
      toast: (text, kind) => this.toasts.show(text, kind),
      navigate: (hash) => this.navigate(hash),
    };
    this.ctx = ctx;
    this.unauthorized = false;
    this.socket = new Socket(this.store, {
      onStatus: (s) => this._setConn(s),
      onUnauthorized: () => this.loggedOut(),
      onError: (frame) => ctx.toast(`Server: ${frame.message}`, "error"),
      onShutdown: (reason) => ctx.toast(`Server going away: ${reason}`, "warn"),
    });
    ctx.socket = this.socket;
    this.banner = new LoginBanner(document.getElementById("banner"), ctx);
    this.upgradeNotice = new UpgradeNotice(document.getElementById("upgrade-notice"), ctx);
    this.notifier = new Notifier(this.store, document.querySelector("[data-testid=notify-toggle]"));
    this.store.subscribe((change) => this._onChange(change));
    window.addEventListener("hashchange", () => this.route());
    this._setupTheme();
    document.querySelector("[data-testid=logout]").addEventListener("click", () => this.logOut());
    document.querySelector("[data-testid=mcp-open]").addEventListener("click",
      () => new McpDialog(ctx).open());
    document.querySelector("[data-testid=telegram-open]").addEventListener("click",
      () => new TelegramDialog(ctx).open());
    this._setupMenu();
    // toasts on a phone sit just under the top bar, whatever its height (style.css)
    const topbar = document.querySelector(".topbar");
    new ResizeObserver(() => document.documentElement.style.setProperty("--topbar-h",
      `${topbar.offsetHeight}px`)).observe(topbar);
    this._shortcuts = new Shortcuts(this);
    this._setupServiceWorker();
    this._setConn("offline");
    this.route();
    if (connect) {
      this.socket.start();
      this.loadConfig();
    }
  }

  /** The service worker (web/sw.js): installable app, offline page, Web Push. A click on a
   * notification while a tab is open lands here as `codey-open` with the page to show. */
  _setupServiceWorker() {
    if (!("serviceWorker" in navigator)) return;
    navigator.serviceWorker.addEventListener("message", (event) => {
      const data = event.data || {};
      if (data.type !== "codey-open" || typeof data.url !== "string") return;
      const url = new URL(data.url, location.origin);
      if (url.origin === location.origin) this.navigate(url.hash || "#/");
    });
    navigator.serviceWorker.register("/sw.js").catch((err) => {
      console.warn("no service worker", err); // plain http on a LAN address: not a secure context
    });
  }

  async loadConfig() {
    try {
      this.setConfig(await api.config());
    } catch (err) {
      if (err.status === 401) this.loggedOut();
      else console.warn("no /api/config", err);
    }
  }

  /** No (more) access: stop the socket and show the login screen, whatever the route. */
  loggedOut() {
    if (this.unauthorized) return;
    this.unauthorized = true;
    this.socket.stop();
    this._setConn("logged out");
    document.querySelector("[data-testid=logout]").hidden = true;
    this.route();
  }

  async logOut() {
    try {
      await fetch("/api/logout", { method: "POST", credentials: "same-origin" });
    } finally {
      this.loggedOut();
    }
  }

  /** Use `config` ({providers, default_provider}) for the banner and the new-session dialog. */
  setConfig(config) {
    this.config = config;
    this.ctx.config = config;
    this.banner.update();
    if (this.view && this.view.onConfig) this.view.onConfig();
  }

  navigate(hash) {
    if (location.hash === hash) this.route();
    else location.hash = hash;
  }

  /** Mount the view for the current hash (synchronously). */
  route() {
    const hash = location.hash || "#/";
    if (this.view && this.view.destroy) this.view.destroy();
    let m;
    if (this.unauthorized) {
      this.view = new LoginScreen(this.ctx);
      document.title = "Log in · Codey";
    } else if ((m = /^#\/session\/(.+)$/.exec(hash))) {
      this.view = new SessionView(this.ctx, decodeURIComponent(m[1]));
    } else if (hash === "#/board") {
      this.view = new BoardPage(this.ctx);
    } else if (hash === "#/schedules") {
      this.view = new SchedulesPage(this.ctx);
    } else if (hash === "#/triggers") {
      this.view = new TriggersPage(this.ctx);
    } else if (hash === "#/usage") {
      this.view = new UsagePage(this.ctx);
    } else if (hash === "#/settings") {
      this.view = new ModelsPage(this.ctx);
    } else if ((m = /^#\/terminal\/(.+)$/.exec(hash))) {
      this.view = new TerminalView(this.ctx, decodeURIComponent(m[1]));
    } else if (hash === "#/link") {
      this.view = new Dashboard(this.ctx, { link: true }); // the Link a machine panel open
      document.title = "Link a machine · Codey";
    } else if ((m = /^#\/pair\/([A-Za-z0-9-]+)$/.exec(hash))) {
      this.view = new PairPage(this.ctx, m[1]);
    } else {
      this.view = new Dashboard(this.ctx);
      document.title = "Codey";
    }
    this.main.replaceChildren(this.view.el);
    if (this.view.mounted) this.view.mounted();
    this.main.dataset.route = hash.split("/")[1] || "";
    this._sayViewing();
  }

  /** Tell the server which session this page shows (its model calls go first when a rate
   * limit runs low): at each route, then every half minute while the page is visible. */
  _sayViewing() {
    const m = /^#\/session\/(.+)$/.exec(location.hash || "");
    const ids = m && !document.hidden && !this.unauthorized ? [decodeURIComponent(m[1])] : [];
    if (ids.length) api.viewing(ids).catch(() => {});
    if (!this._viewingTimer) {
      this._viewingTimer = setInterval(() => this._sayViewing(), 30000);
      document.addEventListener("visibilitychange", () => {
        if (!document.hidden) this._sayViewing();
      });
    }
  }

  _onChange(change) {
    if (this.view && this.view.onChange) this.view.onChange(change);
    if (change.kind === "reset" || change.env.event.type === "auth_status_updated") {
      this.banner.update();
    }
    if (change.kind === "reset" || change.env.event.type === "data_upgraded" ||
        change.env.event.type === "upgrade_notice_dismissed") this.upgradeNotice.update();
    // a provider added, changed or removed in Settings → Models (here or in another tab):
    // the lists of models everywhere follow
    if (change.kind === "event" && (change.env.event.type === "provider_saved" ||
        change.env.event.type === "provider_removed")) this.loadConfig();
    if (change.kind === "event") {
      this._notify(change.env);
      this.notifier.maybeNotify(change.env);
    }
  }

  // Toasts for live events only: catch-up after a reconnect should not replay old news.
  _notify(env) {
    if (Date.now() / 1000 - env.ts > 15) return;
    const e = env.event;
    const state = this.store.state;
    if (e.type === "worker_connected") {
      this.toasts.show(`${e.hostname} connected`, "good");
    } else if (e.type === "worker_disconnected") {
      const w = state.workers[e.worker_id];
      const name = w ? w.hostname : e.worker_id;
      this.toasts.show(`${name} disconnected${e.reason ? `: ${e.reason}` : ""}`, "warn");
    } else if (e.type === "session_status_changed" && e.status === "error") {
      const s = state.sessions[env.session_id];
      this.toasts.show(`${s ? s.title : "A session"} failed${e.reason ? `: ${e.reason}` : ""}`,
        "error");
    }
  }

  _setConn(status) {
    this.connEl.textContent = status;
    this.connEl.dataset.state = status;
    if (this.view && this.view.onConn) this.view.onConn(status);
  }

  // On a phone the top bar is one row: its pages and dialogs open from "Menu".
  _setupMenu() {
    const button = document.querySelector("[data-testid=topbar-menu]");
    const nav = document.getElementById("topbar-nav");
    const set = (open) => {
      nav.classList.toggle("open", open);
      button.setAttribute("aria-expanded", String(open));
    };
    button.addEventListener("click", () => set(!nav.classList.contains("open")));
    nav.addEventListener("click", (ev) => {
      if (ev.target.closest("a, button")) set(false);
    });
    document.addEventListener("click", (ev) => {
      if (!nav.contains(ev.target) && ev.target !== button) set(false);
    });
    document.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape" && nav.classList.contains("open")) {
        set(false);
        button.focus();
      }
    });
    window.addEventListener("hashchange", () => set(false));
  }

  _setupTheme() {
    const button = document.querySelector("[data-testid=theme-toggle]");
    let theme = null;
    try {
      theme = localStorage.getItem(THEME_KEY);
    } catch {
      // storage may be off; the system preference is fine then
    }
    if (theme !== "dark" && theme !== "light") {
      theme = matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
    }
    const set = (t) => {
      document.documentElement.dataset.theme = t;
      button.setAttribute("aria-pressed", String(t === "dark"));
      button.setAttribute("aria-label", `Switch to ${t === "dark" ? "light" : "dark"} theme`);
      button.replaceChildren(h("span", { "aria-hidden": "true" }, t === "dark" ? "☾" : "☀"));
    };
    set(theme);
    button.addEventListener("click", () => {
      const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
      set(next);
      try {
        localStorage.setItem(THEME_KEY, next);
      } catch {
        // not persisted; still switched
      }
    });
  }
}

// `?offline` (tests, screenshots) renders the UI without connecting to a server.
const params = new URLSearchParams(location.search);
const app = new App({ connect: !params.has("offline") });
window.__codey = {
  store: app.store,
  state: () => app.store.state,
  seq: () => app.store.seq,
  socket: app.socket,
  app,
};
