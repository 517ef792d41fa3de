// Keyboard shortcuts, and the `?` overlay that lists them. Letters act only when no text field
// has the focus, so typing a prompt never triggers one.

import { h } from "../dom.js";

const KEYS = [
  ["a", "Approve the first pending approval"],
  ["x", "Reject the first pending approval"],
  ["/", "Write a message (focus the prompt box)"],
  ["Enter", "Send the message (Shift+Enter: a new line)"],
  ["j", "Jump to the latest item"],
  ["d", "Back to the dashboard"],
  ["?", "Show or hide this list"],
  ["Esc", "Close this list"],
];

function typing(target) {
  const tag = target && target.tagName;
  return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" ||
    (target && target.isContentEditable);
}

function clickFirst(testid) {
  const button = [...document.querySelectorAll(`[data-testid=${testid}]`)]
    .find((b) => !b.disabled && b.offsetParent !== null);
  if (button) button.click();
  return Boolean(button);
}

export class Shortcuts {
  constructor(app) {
    this.app = app;
    this.overlay = h("div", { class: "shortcuts", role: "dialog", "aria-modal": "true",
      "aria-labelledby": "shortcuts-h", "data-testid": "shortcuts", hidden: true },
    h("div", { class: "shortcuts-box" },
      h("h2", { id: "shortcuts-h" }, "Keyboard shortcuts"),
      h("dl", { class: "facts" }, KEYS.flatMap(([key, what]) => [
        h("dt", {}, h("kbd", {}, key)), h("dd", {}, what)])),
      h("button", { class: "btn", type: "button", onclick: () => this.hide() }, "Close")));
    document.body.append(this.overlay);
    document.addEventListener("keydown", (ev) => this._key(ev));
  }

  show() {
    this.overlay.hidden = false;
    this.overlay.querySelector("button").focus();
  }

  hide() {
    this.overlay.hidden = true;
  }

  _key(ev) {
    if (ev.key === "Escape" && !this.overlay.hidden) {
      this.hide();
      return;
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev.target)) return;
    let done = true;
    switch (ev.key) {
      case "?":
        if (this.overlay.hidden) this.show();
        else this.hide();
        break;
      case "a":
        done = clickFirst("approve");
        break;
      case "x":
        done = clickFirst("reject");
        break;
      case "/": {
        const input = document.querySelector("[data-testid=prompt-input]");
        if (input) input.focus();
        done = Boolean(input);
        break;
      }
      case "j":
        done = clickFirst("jump-latest");
        break;
      case "d":
        location.hash = "#/";
        break;
      default:
        done = false;
    }
    if (done) ev.preventDefault();
  }
}
