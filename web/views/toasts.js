// Notifications in the corner: `toast(text, kind)`; they go away by themselves.

import { h } from "../dom.js";

const LIFETIME_MS = 6000;

export class Toasts {
  constructor(root) {
    this.root = root;
  }

  /** Show `text`; `kind` is "info" | "good" | "warn" | "error" (errors stay longer). */
  show(text, kind = "info") {
    const close = h("button", { class: "toast-close", type: "button",
      "aria-label": "Dismiss notification" }, "×");
    const el = h("div", { class: `toast toast-${kind}`, "data-testid": "toast",
      "data-kind": kind, role: kind === "error" ? "alert" : "status" },
      h("span", { class: "toast-text" }, text), close);
    const remove = () => el.remove();
    close.addEventListener("click", remove);
    this.root.append(el);
    while (this.root.children.length > 5) this.root.firstElementChild.remove();
    setTimeout(remove, kind === "error" ? LIFETIME_MS * 2 : LIFETIME_MS);
    return el;
  }
}
