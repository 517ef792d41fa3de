// The service worker: what makes Codey installable, shows an offline page when the server
// cannot be reached, and turns Web Push messages into notifications.
//
// A push carries one notice, exactly as the server's notices module made it (codey_server/
// core/notices.py; push/service.py `payload`): title, body, the session's `tag` (a session's
// notifications replace each other), the page to open (`url`), and for an approval that may be
// decided from outside the app its `approval_id`, the `action_hash` of the action shown and
// Approve/Reject actions. Pressing one posts {approval_id, action_hash, decision} to
// /api/push/decide with the browser's cookie; the server applies it only if the approval is
// still pending with that very action, and otherwise says what happened, which replaces the
// notification. A risky approval (outside the sandbox, full access) comes without actions:
// clicking it opens the app.
//
// `handlePush(data)` and `handleNotificationClick(notification, action)` are the handlers'
// bodies, global so that tests reach them through DevTools (the push event itself is fed with
// `ServiceWorker.deliverPushMessage`; no DevTools command clicks a notification).

const CACHE = "codey-shell-v1";
const OFFLINE_URL = "/offline.html";
const PRECACHE = [OFFLINE_URL, "/icons/icon.svg", "/icons/icon-192.png", "/icons/badge.png"];

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(PRECACHE))
    .then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    for (const key of await caches.keys()) {
      if (key !== CACHE) await caches.delete(key);
    }
    await self.clients.claim();
  })());
});

// Pages come from the server, always (the state is the server's); only when it cannot be
// reached does the offline page stand in. API calls and sockets are not touched.
self.addEventListener("fetch", (event) => {
  if (event.request.mode !== "navigate") return;
  event.respondWith(fetch(event.request).catch(async () =>
    (await caches.match(OFFLINE_URL)) || Response.error()));
});

const FALLBACK = { title: "Codey", body: "A session needs you.", tag: "codey", url: "/" };

function options(data) {
  const actions = data.risky ? [] : (data.actions || [])
    .slice(0, Notification.maxActions || 2)
    .map((a) => ({ action: a.action, title: a.title }));
  return {
    body: data.body || "",
    tag: data.tag || "codey",
    renotify: true, // a new notice of the session alerts again, replacing the old one
    requireInteraction: data.kind === "approval" || data.kind === "question",
    icon: "/icons/icon-192.png",
    badge: "/icons/badge.png",
    timestamp: data.ts ? Math.round(data.ts * 1000) : Date.now(),
    actions,
    data: {
      url: data.url || "/", kind: data.kind || "", session_id: data.session_id || "",
      approval_id: data.approval_id || "", action_hash: data.action_hash || "",
      risky: Boolean(data.risky),
    },
  };
}

async function handlePush(data) {
  const notice = data && data.title ? data : FALLBACK;
  await self.registration.showNotification(notice.title, options(notice));
  return notice;
}

self.addEventListener("push", (event) => {
  let data = null;
  try {
    data = event.data ? event.data.json() : null;
  } catch {
    data = null; // not ours: still a notification (a push must show one)
  }
  event.waitUntil(handlePush(data));
});

async function decide(data, decision) {
  try {
    const res = await fetch("/api/push/decide", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ approval_id: data.approval_id, action_hash: data.action_hash,
        decision }),
    });
    if (res.ok) return await res.json();
    if (res.status === 401) return { decided: false, message: "Log in to Codey to decide." };
    return { decided: false, message: `The server refused it (${res.status}).` };
  } catch {
    return { decided: false, message: "The Codey server is unreachable." };
  }
}

async function openApp(url) {
  const target = new URL(url || "/", self.location.origin).href;
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const client of windows) {
    if (new URL(client.url).origin !== self.location.origin) continue;
    client.postMessage({ type: "codey-open", url: target });
    try {
      await client.focus(); // allowed in a real click (a user gesture), refused otherwise
    } catch {
      // shown in the tab all the same
    }
    return client;
  }
  return self.clients.openWindow ? self.clients.openWindow(target) : null;
}

async function handleNotificationClick(notification, action) {
  const data = notification.data || {};
  notification.close();
  if ((action === "approve" || action === "reject") && data.approval_id && !data.risky) {
    const answer = await decide(data, action);
    const title = answer.decided ? `${answer.message}: ${notification.title}`
      : "Not decided";
    const body = answer.decided ? notification.body : answer.message;
    await self.registration.showNotification(title, {
      body, tag: notification.tag, renotify: false, icon: "/icons/icon-192.png",
      badge: "/icons/badge.png",
      data: { url: data.url, kind: "outcome", session_id: data.session_id, answer },
    });
    return answer;
  }
  await openApp(data.url);
  return { opened: data.url || "/" };
}

self.addEventListener("notificationclick", (event) => {
  event.waitUntil(handleNotificationClick(event.notification, event.action));
});
