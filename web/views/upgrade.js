// The notice of an upgrade of the server's data: what changed for the user, shown on every
// page until someone dismisses it (then no browser shows it again).
//
// It comes from the state (`state.upgrades`, folded from `data_upgraded` events), so a
// browser that connects later sees it too; "Got it" sends `dismiss_upgrade_notice`, whose
// event hides it everywhere.

import { h, replaceChildren } from "../dom.js";

export class UpgradeNotice {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this._sig = null;
  }

  /** The upgrades whose notice nobody dismissed yet, oldest first. */
  pending() {
    return this.ctx.store.state.upgrades.filter((n) => !n.dismissed);
  }

  update() {
    const pending = this.pending();
    const sig = JSON.stringify(pending.map((n) => n.upgrade_id));
    if (sig === this._sig) return;
    this._sig = sig;
    if (!pending.length) {
      this.root.hidden = true;
      replaceChildren(this.root);
      return;
    }
    this.root.hidden = false;
    replaceChildren(this.root, pending.map((n) => this._notice(n)));
  }

  _notice(n) {
    const changes = n.changes.length ? n.changes
      : ["Nothing you need to do: your sessions, settings and tokens are as they were."];
    const dismiss = h("button", { class: "btn primary", type: "button",
      "data-testid": "upgrade-dismiss", onclick: () => this._dismiss(n.upgrade_id, dismiss) },
    "Got it");
    return h("div", { class: "banner upgrade-notice", "data-testid": "upgrade-notice",
      "data-upgrade": n.upgrade_id, role: "region", "aria-label": "What the upgrade changed" },
    h("div", { class: "banner-title" },
      h("strong", {}, `Codey was upgraded to ${n.version}`),
      h("span", { class: "muted" }, ` — its data went from format ${n.from_format} to ` +
        `${n.to_format}. What changed for you:`)),
    h("ul", { class: "upgrade-changes", "data-testid": "upgrade-changes" },
      changes.map((line) => h("li", {}, line))),
    n.backup ? h("p", { class: "muted small" }, "A backup of the data from before is in ",
      h("code", { "data-testid": "upgrade-backup" }, n.backup),
      " (codey-server restore puts it back).") : null,
    h("div", { class: "banner-actions" }, dismiss));
  }

  async _dismiss(upgradeId, button) {
    button.disabled = true;
    try {
      await this.ctx.socket.command("dismiss_upgrade_notice", { upgrade_id: upgradeId });
    } catch (err) {
      button.disabled = false;
      this.ctx.toast(`Could not dismiss the notice: ${err.message}`, "error");
    }
  }
}
