// Settings → Notifications: the devices Web Push reaches (folded from `push_device_*` events),
// each with its name, what is pushed to it (one toggle per kind; the kinds and their labels
// come from GET /api/push, the server's table), a Test button and a Remove button; a button
// that subscribes this browser; and a preview of the notification a device would show now for
// the newest waiting approval or question, exactly as the server would push it.
//
// Subscribing: the service worker's PushManager with the server's VAPID public key; the
// subscription (endpoint and keys) goes to the server once and is never shown again: the state
// only says where it points (the push service's host). This browser's device id is kept in
// localStorage, to mark it "this device".

import { api } from "../api.js";
import { fmtAgo, h, replaceChildren, showingErrors } from "../dom.js";

const DEVICE_KEY = "codey-push-device";

function b64ToBytes(text) {
  const padded = (text + "=".repeat((4 - (text.length % 4)) % 4))
    .replace(/-/g, "+").replace(/_/g, "/");
  return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
}

/** A name for this browser the user recognises ("Chrome on Android"). */
export function deviceName() {
  const ua = navigator.userAgent;
  const os = /Android/.test(ua) ? "Android" : /iPhone|iPad/.test(ua) ? "iOS"
    : /Mac OS X/.test(ua) ? "macOS" : /Windows/.test(ua) ? "Windows"
      : /Linux/.test(ua) ? "Linux" : "a device";
  const browser = /Edg\//.test(ua) ? "Edge" : /Firefox\//.test(ua) ? "Firefox"
    : /Chrom(e|ium)\//.test(ua) ? "Chrome" : /Safari\//.test(ua) ? "Safari" : "A browser";
  return `${browser} on ${os}`;
}

export class DevicesPanel {
  constructor(ctx) {
    this.ctx = ctx;
    this.kinds = [];
    this.publicKey = null;
    this.preview = null;
    this.results = {}; // device id → the last test's answer
    try {
      this.mine = localStorage.getItem(DEVICE_KEY);
    } catch {
      this.mine = null;
    }
    this._list = h("div", { class: "device-list", "data-testid": "push-devices" });
    this._error = h("p", { class: "bad", role: "alert", hidden: true });
    this._previewEl = h("div", { class: "notice-preview-wrap", "data-testid": "push-preview" });
    this._enable = h("button", { class: "btn primary", type: "button",
      "data-testid": "push-enable", onclick: () => this._subscribe() },
    "Notify this device");
    this.el = h("section", { class: "card devices", "aria-labelledby": "devices-title",
      "data-testid": "devices" },
    h("h3", { id: "devices-title" }, "Notifications on your devices"),
    h("p", { class: "muted" }, "Codey pushes to these devices when a session needs you or is " +
      "done, even with no tab open. Approve or reject a command from the notification; " +
      "actions outside the sandbox open the app instead."),
    h("div", { class: "row" }, this._enable), this._error, this._list,
    h("h4", {}, "What a device shows now"), this._previewEl);
    this.load();
  }

  async load() {
    await showingErrors(this._error, async () => {
      const status = await api.push();
      this.kinds = status.kinds;
      this.publicKey = status.public_key;
      this.preview = (await api.pushPreview()).payload;
    });
    this.render();
  }

  onChange(change) {
    if (change.kind === "reset") {
      this.render();
      return;
    }
    const type = change.env.event.type;
    if (type.startsWith("push_device_")) this.render();
    if (type === "approval_requested" || type === "approval_resolved"
      || type === "question_asked" || type === "question_answered") {
      api.pushPreview().then((p) => {
        this.preview = p.payload;
        this._renderPreview();
      }, () => {});
    }
  }

  async _subscribe() {
    await showingErrors(this._error, async () => {
      if (!("serviceWorker" in navigator) || !("PushManager" in window)) {
        throw new Error("This browser cannot receive push notifications here (it needs " +
          "https, or localhost).");
      }
      const permission = await Notification.requestPermission();
      if (permission !== "granted") throw new Error("Notifications are blocked for this site.");
      const reg = await navigator.serviceWorker.ready;
      let sub = await reg.pushManager.getSubscription();
      if (!sub) {
        sub = await reg.pushManager.subscribe({ userVisibleOnly: true,
          applicationServerKey: b64ToBytes(this.publicKey) });
      }
      const json = sub.toJSON();
      const added = await api.addPushDevice({ endpoint: json.endpoint, keys: json.keys,
        name: deviceName() });
      this.mine = added.device_id;
      try {
        localStorage.setItem(DEVICE_KEY, added.device_id);
      } catch {
        // not remembered: the list just won't mark it
      }
    });
    this.render();
  }

  async _toggle(device, kind, on) {
    const kinds = on ? [...device.kinds, kind] : device.kinds.filter((k) => k !== kind);
    await showingErrors(this._error, () => api.changePushDevice(device.device_id, { kinds }));
  }

  async _rename(device) {
    const name = window.prompt("Name of this device", device.name);
    if (name === null || !name.trim()) return;
    await showingErrors(this._error, () => api.changePushDevice(device.device_id, { name }));
  }

  async _test(device) {
    this.results[device.device_id] = { running: true };
    this.render();
    await showingErrors(this._error, async () => {
      this.results[device.device_id] = await api.testPushDevice(device.device_id);
    });
    this.render();
  }

  async _remove(device) {
    await showingErrors(this._error, () => api.removePushDevice(device.device_id));
  }

  _device(d) {
    const result = this.results[d.device_id];
    const said = !result ? null : result.running ? "Sending…"
      : result.ok ? `Sent (the push service answered ${result.status})`
        : `Not sent: ${result.error || result.status}`;
    return h("article", { class: "device", "data-testid": "push-device",
      "data-device-id": d.device_id },
    h("div", { class: "device-head" },
      h("strong", { "data-testid": "push-device-name" }, d.name),
      d.device_id === this.mine ? h("span", { class: "chip" }, "this device") : null,
      h("span", { class: "muted small" }, ` via ${d.endpoint_host} · added ${fmtAgo(d.added_at)}`)),
    h("fieldset", { class: "device-kinds" },
      h("legend", { class: "sr-only" }, `What is pushed to ${d.name}`),
      this.kinds.map((k) => h("label", { class: "check" },
        h("input", { type: "checkbox", "data-testid": `push-kind-${k.name}`,
          checked: d.kinds.includes(k.name),
          onchange: (e) => this._toggle(d, k.name, e.target.checked) }), ` ${k.label}`))),
    h("div", { class: "row" },
      h("button", { class: "btn", type: "button", "data-testid": "push-test",
        onclick: () => this._test(d) }, "Test"),
      h("button", { class: "btn subtle", type: "button", "data-testid": "push-rename",
        onclick: () => this._rename(d) }, "Rename"),
      h("button", { class: "btn danger subtle", type: "button", "data-testid": "push-remove",
        onclick: () => this._remove(d) }, "Remove"),
      said ? h("span", { class: "muted small", role: "status",
        "data-testid": "push-test-result" }, said) : null));
  }

  _renderPreview() {
    const p = this.preview;
    if (!p) {
      replaceChildren(this._previewEl, h("p", { class: "muted" },
        "Nothing waits for you now: an approval or a question would show here as it is " +
        "pushed."));
      return;
    }
    replaceChildren(this._previewEl, h("div", { class: "notice-preview", role: "img",
      "aria-label": `Notification: ${p.title}` },
    h("div", { class: "notice-preview-head" },
      h("img", { src: "/icons/icon-192.png", alt: "", width: 20, height: 20 }),
      h("span", {}, "Codey · now")),
    h("strong", { class: "notice-preview-title" }, p.title),
    h("div", { class: "notice-preview-body" }, p.body),
    p.actions.length ? h("div", { class: "notice-preview-actions" },
      p.actions.map((a) => h("span", { class: "notice-preview-action" }, a.title)))
      : h("div", { class: "notice-preview-actions muted small" },
        p.risky ? "No buttons: opens Codey to decide" : "Opens the session")));
  }

  render() {
    const devices = Object.values(this.ctx.store.state.push_devices || {})
      .sort((a, b) => a.added_at - b.added_at);
    replaceChildren(this._list, devices.length ? devices.map((d) => this._device(d))
      : h("p", { class: "muted", "data-testid": "no-push-devices" },
        "No device yet: press “Notify this device” on each phone or computer."));
    this._enable.textContent = this.mine && devices.some((d) => d.device_id === this.mine)
      ? "Subscribe this device again" : "Notify this device";
    this._renderPreview();
  }
}
