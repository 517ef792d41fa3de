// The login banner: shown while a configured model provider that needs auth is not logged in.
//
// Providers come from GET /api/config; their state from `state.auth` (auth_status_updated
// events), so the banner disappears by itself when the server says "logged_in".

import { api } from "../api.js";
import { h, replaceChildren, safeUrl } from "../dom.js";

export class LoginBanner {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this._device = {}; // provider -> {verification_uri, user_code} from POST /api/auth/device
    this._links = {}; // provider -> login URL already opened (fallback link if no tab opened)
    this._sig = null;
  }

  /** Providers that need a login and are not logged in. */
  missing() {
    const config = this.ctx.config;
    if (!config) return [];
    const auth = this.ctx.store.state.auth;
    return config.providers.filter(
      (p) => p.auth && p.auth !== "none" && (auth[p.name] || {}).state !== "logged_in");
  }

  update() {
    const missing = this.missing();
    const auth = this.ctx.store.state.auth;
    const sig = JSON.stringify([missing.map((p) => [p.name, auth[p.name] || null]),
      this._device, this._links]);
    if (sig === this._sig) return; // keep focus and typed keys while nothing changed
    this._sig = sig;
    if (!missing.length) {
      this.root.hidden = true;
      replaceChildren(this.root);
      return;
    }
    this.root.hidden = false;
    replaceChildren(this.root, h("div", { class: "banner", "data-testid": "login-banner",
      role: "region", "aria-label": "Model provider login" },
    missing.map((p) => this._provider(p, auth[p.name] || null))));
  }

  _provider(p, info) {
    const state = info ? info.state : "logged_out";
    const rows = [h("div", { class: "banner-title" },
      h("strong", {}, `Log in to ${p.name}`),
      h("span", { class: "muted" }, ` — ${state.replace(/_/g, " ")}`),
      info && info.error ? h("span", { class: "banner-error" }, ` · ${info.error}`) : null)];
    const actions = h("div", { class: "banner-actions" });
    if (p.auth === "oauth") {
      actions.append(
        h("button", { class: "btn primary", type: "button", "data-testid": "login-button",
          "data-provider": p.name, onclick: (ev) => this._loginLink(p.name, ev.currentTarget) },
        "Log in"),
        h("button", { class: "btn", type: "button", "data-testid": "device-login",
          "data-provider": p.name, onclick: (ev) => this._deviceLogin(p.name, ev.currentTarget) },
        "Use a code instead"));
    }
    const keyId = `api-key-${p.name}`;
    const input = h("input", { id: keyId, type: "password", autocomplete: "off",
      "data-testid": "api-key-input", "data-provider": p.name, placeholder: "sk-…",
      class: "input" });
    const form = h("form", { class: "inline-form",
      onsubmit: (ev) => {
        ev.preventDefault();
        this._apiKey(p.name, input, form);
      } },
    h("label", { for: keyId }, p.auth === "oauth" ? "or an API key" : "API key"),
    input,
    h("button", { class: "btn", type: "submit", "data-testid": "api-key-save",
      "data-provider": p.name }, "Save key"));
    actions.append(form);
    rows.push(actions);
    const device = this._device[p.name] || (info && info.verification_uri ? info : null);
    if (device && device.verification_uri && device.user_code) {
      const href = safeUrl(device.verification_uri);
      rows.push(h("div", { class: "device-code", "data-testid": "device-code" },
        "Open ",
        href ? h("a", { href, target: "_blank", rel: "noopener noreferrer" }, href)
          : h("code", {}, device.verification_uri),
        " and enter ",
        h("code", { class: "code-big" }, device.user_code)));
    }
    if (this._links[p.name]) {
      const url = this._links[p.name];
      rows.push(h("div", { class: "muted small" }, "If no tab opened: ",
        h("a", { href: url, target: "_blank", rel: "noopener noreferrer",
          "data-testid": "login-link" }, "open the login page")));
    }
    return h("div", { class: "banner-provider", "data-provider": p.name }, rows);
  }

  async _loginLink(provider, button) {
    button.disabled = true;
    try {
      const { url } = await api.loginLink(provider);
      if (!safeUrl(url)) throw new Error("the server sent an odd login URL");
      window.open(url, "_blank", "noopener");
      this._links[provider] = url;
      this._sig = null;
      this.update();
    } catch (err) {
      this.ctx.toast(`Login failed: ${err.message}`, "error");
    } finally {
      button.disabled = false;
    }
  }

  async _deviceLogin(provider, button) {
    button.disabled = true;
    try {
      const res = await api.deviceLogin(provider);
      this._device[provider] = { verification_uri: res.verification_uri,
        user_code: res.user_code };
      this._sig = null;
      this.update();
    } catch (err) {
      this.ctx.toast(`Device login failed: ${err.message}`, "error");
      button.disabled = false;
    }
  }

  async _apiKey(provider, input, form) {
    const key = input.value.trim();
    if (!key) {
      input.focus();
      return;
    }
    for (const el of form.elements) el.disabled = true;
    try {
      await api.apiKey(provider, key);
      input.value = "";
      this.ctx.toast(`API key saved for ${provider}`, "good");
    } catch (err) {
      this.ctx.toast(`API key refused: ${err.message}`, "error");
    } finally {
      for (const el of form.elements) el.disabled = false;
    }
  }
}
