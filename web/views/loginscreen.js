// The login screen: shown whenever this browser has no valid access to the server (no cookie,
// an expired one, a wrong token in the link, a logout). It says plainly what to do.

import { h } from "../dom.js";

export class LoginScreen {
  constructor(ctx) {
    this.ctx = ctx;
    const params = new URLSearchParams(location.search);
    const badLink = params.has("token");
    const input = h("input", { class: "input", id: "login-input", "data-testid": "login-input",
      placeholder: "http://…/?token=…  or the token itself", autocomplete: "off",
      "aria-label": "The login link or its token" });
    const error = h("p", { class: "bad", role: "alert", hidden: true,
      "data-testid": "login-error" });
    const form = h("form", { class: "row gap", onsubmit: (ev) => {
      ev.preventDefault();
      const value = input.value.trim();
      let token = value;
      try {
        const url = new URL(value);
        token = url.searchParams.get("token") || "";
      } catch {
        // not a URL: the token itself
      }
      if (!token) {
        error.textContent = "That link has no ?token= in it.";
        error.hidden = false;
        return;
      }
      location.assign(`/?token=${encodeURIComponent(token)}`);
    } }, input, h("button", { class: "btn primary", type: "submit",
      "data-testid": "login-submit" }, "Log in"));
    this.el = h("section", { class: "panel login-screen", "data-testid": "login-screen",
      "aria-labelledby": "login-h" },
    h("h2", { id: "login-h" }, "Log in to this Codey server"),
    badLink ? h("p", { class: "bad", "data-testid": "login-bad-link" },
      "The link you opened has an access token this server does not accept: it may come " +
      "from another server or an older data folder.") : null,
    h("p", {}, "This browser has no access to the server yet. Open the link that ",
      h("code", {}, "codey-server"), " printed when it started — it ends in ",
      h("code", {}, "?token=…"), "."),
    h("p", {}, "Lost it? On the server's machine, run ",
      h("code", { "data-testid": "login-url-command" }, "codey-server url"),
      " to print it again. From a checkout of Codey (as ", h("code", {}, "./scripts/serve"),
      " runs it), in its folder: ", h("code", { "data-testid": "login-url-checkout" },
        ".venv/bin/codey-server url"), " — it needs nothing on the PATH."),
    // a public page: it names no path of the server's machine, only where uv goes by default
    h("p", { class: "muted small", "data-testid": "login-path-note" },
      "“uv: command not found” in a new terminal? ", h("code", {}, "./scripts/serve"),
      " installs uv into ~/.local/bin; run ", h("code", {}, 'export PATH="$HOME/.local/bin:$PATH"'),
      " (add it to ~/.bashrc to keep it)."),
    h("p", { class: "muted" }, "Or paste the link here:"),
    form, error);
  }
}
