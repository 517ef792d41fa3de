// Notifications in the corner: `toast(text, kind)`; they go away by themselves.

import { h } from "../dom.js";

const LIFETIME_MS = 6000;

export class Toasts {
  constructor(root) {
    this.root = root;
  }

  /** Show `text`; `kind` is "info" | "good" | "warn" | "error" (errors stay longer). The same
   * text shown again while its toast is up is not repeated: that toast stays a while longer. */
  show(text, kind = "info") {
    for (const el of this.root.children) {
      if (el.dataset.text === text) {
        clearTimeout(Number(el.dataset.timer));
        el.dataset.timer = String(setTimeout(() => el.remove(),
          kind === "error" ? LIFETIME_MS * 2 : LIFETIME_MS));
        return el;
      }
    }
    const close = h("button", { class: "toast-close", type: "button",
      "aria-label": "Dismiss notification" }, "×");
    const el = h("div", { class: `toast toast-${kind}`, "data-testid": "toast",
      "data-kind": kind, role: kind === "error" ? "alert" : "status" },
      h("span", { class: "toast-text" }, text), close);
    el.dataset.text = text;
    const remove = () => el.remove();
    close.addEventListener("click", remove);
    this.root.append(el);
    while (this.root.children.length > 2) this.root.firstElementChild.remove();
    el.dataset.timer = String(setTimeout(remove, kind === "error" ? LIFETIME_MS * 2
      : LIFETIME_MS));
    return el;
  }
}
