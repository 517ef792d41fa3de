// `#/settings`: Settings → Models. The model providers sessions can use: add one (its kind,
// base URL, credential and models, listed from its API), test it, change or remove it. At the
// bottom, About: the server's version (GET /api/about).
//
// The list comes from GET /api/config (reloaded by the app on `provider_saved` and
// `provider_removed`); login states from the store (`auth_status_updated`). Providers of the
// server's config.json are shown as such: they change in the file, not here.

import { api } from "../api.js";
import { h, replaceChildren, showingErrors } from "../dom.js";
import { DevicesPanel } from "./devices.js";

export const KINDS = [
  ["chat", "OpenAI-compatible (Chat Completions)", "https://api.example.com/v1"],
  ["responses", "OpenAI Responses API", "https://api.openai.com/v1"],
  ["anthropic", "Anthropic Messages API", "https://api.anthropic.com"],
  ["ollama", "Ollama", "http://127.0.0.1:11434/v1"],
];

const AUTHS = [["api_key", "API key"], ["none", "None (a local server)"],
  ["oauth", "OAuth login (OIDC)"]];

export class ModelsPage {
  constructor(ctx) {
    this.ctx = ctx;
    this._tests = {}; // provider → {running} | the last test's answer
    this._editing = null; // the provider's name being edited (null: adding one)
    this._savedUrl = null; // its base URL as saved: its stored key goes there and nowhere else
    this._list = h("div", { class: "provider-list", "data-testid": "providers" });
    this._error = h("p", { class: "bad", role: "alert", hidden: true });
    this._form = this._buildForm();
    this.el = h("section", { class: "page", "data-testid": "models-page" },
      h("header", { class: "panel-head" }, h("h2", {}, "Settings → Models")),
      h("p", { class: "muted" }, "The model providers sessions can use. One added here is " +
        "used at once, with no restart; its key is kept by the server and never shown again. " +
        "Those of the server's config.json are changed in that file."),
      this._list, this._form, this._error, (this._devices = new DevicesPanel(ctx)).el,
      this._webTools(), this._about());
    document.title = "Models · Codey";
    this.render();
  }

  /** Settings → Tools: how web_fetch and web_search are set up (GET /api/web-tools), and
   * a form that changes them (PUT, over the server's config.json's `web`). The Brave key is
   * kept by the server and never comes back: the form says whether one is kept. */
  _webTools() {
    const body = h("div", { "data-testid": "web-tools" }, "…");
    const row = (label, value, testid) => h("div", { class: "kv" },
      h("span", { class: "muted" }, label), " ", h("span", { "data-testid": testid }, value));
    const show = (w) => {
      const search = w.search_kind === "none" ? "not set up: web_search says so"
        : `${w.search_kind === "brave" ? "Brave Search API" : "SearXNG"} at ${w.search_url}`;
      const key = w.search_kind !== "brave" ? null
        : row("Key:", w.search_key_stored ? "kept by the server"
          : w.search_key_set ? `set (from $${w.search_key_env})`
            : `missing: set $${w.search_key_env || "its api_key_env"}`, "web-search-key");
      replaceChildren(body,
        row("Search backend:", search, "web-search"), key,
        row("Fetch may also reach:", w.fetch_allow.length ? w.fetch_allow.join(", ")
          : "public addresses only", "web-fetch-allow"),
        row("Fetched without asking:", w.fetch_domains.length ? w.fetch_domains.join(", ")
          : "no domain (each host is asked once per session)", "web-fetch-domains"),
        row("Fetch caps:", `${Math.round(w.fetch_max_bytes / 1024)} KiB, ` +
          `${w.fetch_timeout_s} s`, "web-fetch-caps"),
        w.editable ? this._webForm(w, show) : h("p", { class: "muted small" },
          "Among replicas these are set in each server's config.json (\"web\")."));
    };
    api.webTools().then(show, (err) => {
      replaceChildren(body, `The server did not say (${err.message}).`);
    });
    return h("section", { class: "card", "data-testid": "settings-tools",
      "aria-label": "Tools" },
    h("h3", {}, "Tools: web fetch and search"), body,
    h("p", { class: "muted small" }, "Run by the server. A fetch asks under suggest and " +
      "auto-edit until its host is approved for the session (or is under a domain listed " +
      "here); the server's own networks are refused, before anyone is asked, unless listed " +
      "here."));
  }

  /** The form of Settings → Tools, filled with `w` (what the server answered). */
  _webForm(w, show) {
    const lines = (text) => text.split(/[\n,]/).map((x) => x.trim()).filter(Boolean);
    const kind = h("select", { class: "input", "data-testid": "web-kind" },
      [["none", "none"], ["searxng", "SearXNG instance"], ["brave", "Brave Search API"]]
        .map(([v, text]) => h("option", { value: v }, text)));
    kind.value = w.search_kind;
    const url = h("input", { class: "input mono", "data-testid": "web-url", type: "url",
      value: w.search_url, placeholder: "https://searx.example.org" });
    const key = h("input", { class: "input", "data-testid": "web-key", type: "password",
      autocomplete: "off", placeholder: w.search_key_stored ? "kept: type to replace it"
        : "paste the Brave Search API key" });
    const forget = h("input", { type: "checkbox", "data-testid": "web-key-forget",
      "aria-label": "Forget the kept key" });
    const allow = h("textarea", { class: "input mono", rows: 2, "data-testid": "web-allow",
      placeholder: "10.1.0.0/16 (one per line)" }, w.fetch_allow.join("\n"));
    const domains = h("textarea", { class: "input mono", rows: 2, "data-testid": "web-domains",
      placeholder: "docs.python.org (one per line)" }, w.fetch_domains.join("\n"));
    const error = h("p", { class: "bad", role: "alert", hidden: true });
    const sync = () => {
      url.closest("label").hidden = kind.value === "none";
      key.closest("label").hidden = kind.value !== "brave";
    };
    kind.addEventListener("change", sync);
    const field = (label, input, hint) => h("label", { class: "field" }, h("span", {}, label),
      input, hint ? h("span", { class: "muted small" }, hint) : null);
    const form = h("form", { class: "web-tools-form", "data-testid": "web-tools-form",
      onsubmit: async (ev) => {
        ev.preventDefault();
        error.hidden = true;
        try {
          const typed = key.value.trim();
          const saved = await api.setWebTools({ search_kind: kind.value,
            search_url: url.value.trim(), search_key: forget.checked ? "" : typed || null,
            fetch_allow: lines(allow.value), fetch_domains: lines(domains.value) });
          key.value = ""; // the key is not kept in the page
          this.ctx.toast("Tools: saved, used by the turns that start now", "good");
          show(saved);
        } catch (err) {
          error.textContent = err.message;
          error.hidden = false;
        }
      } },
    field("Search backend", kind),
    field("Its URL", url, "The SearXNG instance's root (its JSON format on); Brave's has a " +
      "default"),
    field("Brave API key", key, h("span", {}, "Kept by the server, never shown again. ",
      h("span", { class: "check" }, forget, " forget the kept key"))),
    field("Private networks a fetch may reach", allow, "An intranet wiki's network; the " +
      "server's own networks stay refused otherwise"),
    field("Domains fetched without asking", domains, "And the hosts under them"),
    error,
    h("button", { class: "btn primary", type: "submit", "data-testid": "web-save" }, "Save"));
    queueMicrotask(sync);
    return form;
  }

  /** Settings → About: the server's release (GET /api/about). */
  _about() {
    const line = h("p", { class: "muted", "data-testid": "about-version" }, "…");
    api.about().then((a) => {
      replaceChildren(line, "Codey server ", h("strong", {}, a.version),
        ` · data format ${a.data_format} · worker protocol ${a.protocol_version}`);
    }, (err) => {
      replaceChildren(line, `The server did not say its version (${err.message}).`);
    });
    return h("section", { class: "card about", "data-testid": "about", "aria-label": "About" },
      h("h3", {}, "About"), line,
      h("p", { class: "muted small" }, "Every Codey package (server, worker, protocol) has " +
        "this version; docs/CHANGELOG.md says what each release does to the data."));
  }

  onChange(change) {
    this._devices.onChange(change);
    if (change.kind === "reset" || change.env.event.type === "auth_status_updated") {
      this.render();
    }
  }

  onConfig() {
    this.render();
  }

  _providers() {
    return (this.ctx.config && this.ctx.config.providers) || [];
  }

  render() {
    const providers = this._providers();
    const auth = this.ctx.store.state.auth;
    replaceChildren(this._list, providers.length
      ? providers.map((p) => this._card(p, auth[p.name] || null))
      : h("p", { class: "card notice", "data-testid": "no-providers" },
        "No model provider yet: add one below. A session needs one to answer."));
  }

  _card(p, login) {
    const test = this._tests[p.name];
    const fromFile = p.source === "config.json";
    const state = p.auth === "none" ? "no login needed"
      : (login ? login.state.replace(/_/g, " ") : "logged out");
    return h("article", { class: "card provider", "data-testid": "provider-card",
      "data-provider": p.name },
    h("div", { class: "row gap wrap" },
      h("strong", { class: "provider-name" }, p.name),
      h("span", { class: "chip" }, kindName(p.kind)),
      h("span", { class: fromFile ? "chip" : "chip good", "data-testid": "provider-source" },
        fromFile ? "config.json" : "added here"),
      h("span", { class: p.auth === "none" || (login && login.state === "logged_in")
        ? "muted small" : "warn small", "data-testid": "provider-login",
      title: (login && login.error) || "" }, state),
      p.name === (this.ctx.config && this.ctx.config.default_provider)
        ? h("span", { class: "chip", title: "New sessions use it unless you pick another" },
          "default") : null),
    h("div", { class: "muted small mono" }, p.base_url),
    login && login.error && login.state !== "logged_in"
      ? h("p", { class: "warn small", "data-testid": "provider-login-error" }, login.error)
      : null,
    h("div", { class: "small" }, p.models.length
      ? `${p.models.length} model${p.models.length === 1 ? "" : "s"}: ${p.models.join(", ")}`
      : "no model listed", p.default_model ? ` · default ${p.default_model}` : ""),
    test ? testLine(test) : null,
    h("div", { class: "row gap end" },
      h("button", { class: "btn", type: "button", "data-testid": "provider-test",
        disabled: Boolean(test && test.running),
        onclick: () => this._test(p.name) }, test && test.running ? "Testing…" : "Test"),
      fromFile ? null : h("button", { class: "btn", type: "button",
        "data-testid": "provider-edit", onclick: () => this._edit(p) }, "Edit"),
      fromFile ? null : h("button", { class: "btn danger", type: "button",
        "data-testid": "provider-remove", onclick: () => this._remove(p.name) }, "Remove")));
  }

  _buildForm() {
    const field = (label, input, hint) => h("label", { class: "field" }, h("span", {}, label),
      input, hint ? h("span", { class: "muted small" }, hint) : null);
    this._title = h("h3", {}, "Add a provider");
    this._name = h("input", { class: "input", "data-testid": "pv-name", required: true,
      placeholder: "openai", pattern: "[A-Za-z0-9][A-Za-z0-9._\\-]{0,63}", autocomplete: "off" });
    this._kind = h("select", { class: "input", "data-testid": "pv-kind",
      onchange: () => this._kindChanged() },
    KINDS.map(([v, text]) => h("option", { value: v }, text)));
    this._url = h("input", { class: "input mono", "data-testid": "pv-url", required: true,
      type: "url", placeholder: KINDS[0][2], oninput: () => this._urlChanged() });
    this._auth = h("select", { class: "input", "data-testid": "pv-auth",
      onchange: () => this._authChanged() },
    AUTHS.map(([v, text]) => h("option", { value: v }, text)));
    this._key = h("input", { class: "input", "data-testid": "pv-key", type: "password",
      autocomplete: "off", placeholder: "sk-…" });
    this._issuer = h("input", { class: "input mono", "data-testid": "pv-issuer", type: "url",
      placeholder: "https://auth.example.com" });
    this._client = h("input", { class: "input mono", "data-testid": "pv-client" });
    this._models = h("textarea", { class: "input mono", rows: 3, "data-testid": "pv-models",
      placeholder: "one model per line" });
    this._default = h("input", { class: "input mono", "data-testid": "pv-default",
      placeholder: "the first one" });
    this._found = h("p", { class: "muted small", "data-testid": "pv-found", role: "status" });
    this._keyHint = h("span", { class: "muted small", "data-testid": "pv-key-hint" },
      "Sent once; the server keeps it.");
    this._keyField = h("label", { class: "field" }, h("span", {}, "API key"), this._key,
      this._keyHint);
    this._oauthFields = h("div", { class: "grid2" }, field("Issuer (OIDC)", this._issuer),
      field("Client id", this._client));
    this._save = h("button", { class: "btn primary", type: "submit",
      "data-testid": "pv-save" }, "Add provider");
    this._cancelEdit = h("button", { class: "btn", type: "button", hidden: true,
      onclick: () => this._reset() }, "Cancel");
    const form = h("form", { class: "card provider-form", "data-testid": "pv-form",
      onsubmit: (ev) => {
        ev.preventDefault();
        this._saveProvider();
      } },
    this._title,
    h("div", { class: "grid2" }, field("Name", this._name), field("Kind", this._kind),
      field("Base URL", this._url), field("Credential", this._auth)),
    this._keyField, this._oauthFields,
    h("div", { class: "grid2" },
      field("Models", this._models),
      h("div", {}, field("Default model", this._default),
        h("button", { class: "btn", type: "button", "data-testid": "pv-discover",
          onclick: (ev) => this._discover(ev.currentTarget) }, "List its models"),
        this._found)),
    h("div", { class: "row gap end" }, this._cancelEdit, this._save));
    this._authChanged();
    return form;
  }

  _kindChanged() {
    const kind = KINDS.find(([v]) => v === this._kind.value);
    this._url.placeholder = kind ? kind[2] : "";
    if (this._kind.value === "ollama" && !this._editing) this._auth.value = "none";
    this._authChanged();
  }

  /** A saved provider's key goes only to its saved URL: say so once the URL is another. */
  _movedAway() {
    return this._savedUrl !== null && !sameEndpoint(this._savedUrl, this._url.value.trim());
  }

  _urlChanged() {
    const moved = this._movedAway();
    this._keyHint.textContent = moved
      ? `The saved key goes only to ${this._savedUrl}: type the key to list models or save `
        + "with this URL."
      : (this._savedUrl !== null ? "Kept; paste a new one to change it."
        : "Sent once; the server keeps it.");
    this._keyHint.className = moved ? "warn small" : "muted small";
  }

  _authChanged() {
    this._keyField.hidden = this._auth.value === "none";
    this._oauthFields.hidden = this._auth.value !== "oauth";
  }

  _do(fn) {
    return showingErrors(this._error, fn);
  }

  _body() {
    const models = this._models.value.split(/[\n,]/).map((m) => m.trim()).filter(Boolean);
    const body = { name: this._name.value.trim(), kind: this._kind.value,
      base_url: this._url.value.trim(), models, default_model: this._default.value.trim() ||
        null, auth: this._auth.value };
    if (body.auth === "oauth") {
      body.issuer = this._issuer.value.trim();
      body.client_id = this._client.value.trim();
    }
    const key = this._key.value.trim();
    if (key && body.auth !== "none") body.api_key = key;
    return body;
  }

  async _discover(button) {
    const body = this._body();
    if (!body.base_url) {
      this._found.textContent = "Enter the base URL first.";
      return;
    }
    button.disabled = true;
    this._found.textContent = "Asking the provider…";
    try {
      const query = { kind: body.kind, base_url: body.base_url };
      // the key typed goes with it; else the saved one, which the server sends only to the
      // saved URL (to another it sends none)
      if (body.api_key) query.api_key = body.api_key;
      else if (this._editing) query.provider = this._editing;
      const res = await api.listModels(query);
      if (res.error) {
        const noKey = !body.api_key && this._movedAway() && (res.status === 401
          || res.status === 403);
        this._found.textContent = `It would not say: ${res.error}` + (noKey
          ? ". The saved key is not sent to a new URL: type the key above." : "");
      } else {
        this._models.value = res.models.join("\n");
        this._found.textContent = res.models.length
          ? `${res.models.length} model${res.models.length === 1 ? "" : "s"} listed: keep the ` +
            "ones you want."
          : "It lists no model: type their names.";
      }
    } catch (err) {
      this._found.textContent = `Could not list them: ${err.message}`;
    } finally {
      button.disabled = false;
    }
  }

  _saveProvider() {
    this._do(async () => {
      const body = this._body();
      const name = body.name;
      const keyLeft = !body.api_key && body.auth !== "none" && this._movedAway();
      await api.saveProvider(body);
      this.ctx.toast(`${name}: saved, used from now on` + (keyLeft
        ? "; its saved key stays with its old URL: give the key again" : ""),
      keyLeft ? "warn" : "good");
      this._reset();
      await this._test(name);
    });
  }

  async _test(name) {
    this._tests[name] = { running: true };
    this.render();
    try {
      this._tests[name] = await api.testProvider(name);
    } catch (err) {
      this._tests[name] = { ok: false, error: err.message, model: "" };
    }
    this.render();
  }

  _edit(p) {
    this._editing = p.name;
    this._savedUrl = p.base_url;
    this._title.textContent = `Change ${p.name}`;
    this._name.value = p.name;
    this._name.readOnly = true;
    this._kind.value = p.kind;
    this._url.value = p.base_url;
    this._auth.value = p.auth;
    this._key.value = "";
    this._key.placeholder = "(kept; paste a new one to change it)";
    this._models.value = p.models.join("\n");
    this._default.value = p.default_model || "";
    this._save.textContent = "Save changes";
    this._cancelEdit.hidden = false;
    this._found.textContent = "";
    this._authChanged();
    this._urlChanged();
    this._name.scrollIntoView({ block: "center" });
  }

  _reset() {
    this._editing = null;
    this._savedUrl = null;
    this._form.reset();
    this._title.textContent = "Add a provider";
    this._name.readOnly = false;
    this._key.placeholder = "sk-…";
    this._save.textContent = "Add provider";
    this._cancelEdit.hidden = true;
    this._found.textContent = "";
    this._kindChanged();
    this._urlChanged();
  }

  _remove(name) {
    if (!window.confirm(`Remove ${name} and its stored key? Sessions on it will take the ` +
      "server's default provider on their next turn.")) return;
    this._do(async () => {
      await api.removeProvider(name);
      delete this._tests[name];
      this.ctx.toast(`${name}: removed`, "good");
    });
  }
}

/** The same endpoint, as the server compares them: scheme, host, port and path (a final
 * slash aside). */
export function sameEndpoint(a, b) {
  try {
    const [x, y] = [new URL(a), new URL(b)];
    const path = (u) => u.pathname.replace(/\/+$/, "");
    return x.protocol === y.protocol && x.hostname === y.hostname && x.port === y.port
      && path(x) === path(y);
  } catch {
    return false;
  }
}

function kindName(kind) {
  const found = KINDS.find(([v]) => v === kind);
  return found ? found[1] : kind;
}

/** The last test's answer: the model's reply, or the provider's own words. */
function testLine(test) {
  if (test.running) return h("p", { class: "muted small" }, "Testing…");
  if (test.ok) {
    return h("p", { class: "good small", "data-testid": "provider-test-result" },
      `✓ ${test.model} answered “${test.reply || "(nothing)"}” in ${test.seconds.toFixed(1)} s`);
  }
  return h("p", { class: "bad small", "data-testid": "provider-test-result" },
    `✗ ${test.model ? `${test.model}: ` : ""}${test.error}`);
}
