// `#/usage`: what the fleet spent — per day (a chart drawn here as inline SVG, no library), per
// provider and per session — the day's budget for every session together, and the price
// table (Settings → Usage) that turns tokens into money.
//
// Everything is folded from the log (the store): `state.spend` (UTC day → provider → tokens,
// micros, calls), each session's `usage`, `state.day_budget` and the user's `state.prices`.
// Money is in micros (millionths of a dollar) everywhere, as the server counts it.

import { api } from "../api.js";
import { h, replaceChildren, showingErrors } from "../dom.js";
import { utcDay } from "../store.js";
import { fmtTokens, fmtUsd } from "./common.js";

const DAYS = 14;
const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1"];
const EVENTS = new Set(["token_usage_recorded", "budget_set", "prices_set",
  "session_created", "session_deleted", "session_title_changed"]);

/** The last `n` UTC days, oldest first, ending today. */
export function lastDays(n, now = Date.now() / 1000) {
  return Array.from({ length: n }, (_, i) => utcDay(now - (n - 1 - i) * 86400));
}

/**
 * The chart: one stacked bar per day, a block per provider (cost, or tokens when nothing
 * was priced). Returns an <svg> element; each block has a <title> for its figures.
 */
export function spendChart(spend, days, providers, unit) {
  const ns = "http://www.w3.org/2000/svg";
  const el = (tag, attrs, ...kids) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    for (const kid of kids) node.append(kid);
    return node;
  };
  const value = (x) => (unit === "usd" ? x.cost_micros : x.tokens);
  const totals = days.map((d) => providers.reduce((sum, p) => sum + value(
    (spend[d] || {})[p] || { tokens: 0, cost_micros: 0 }), 0));
  const max = Math.max(1, ...totals);
  const W = 640, H = 220, left = 56, bottom = 28, top = 12;
  const bw = (W - left - 8) / days.length;
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  const fmt = unit === "usd" ? fmtUsd : fmtTokens;
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", class: "usage-chart",
    "data-testid": "usage-chart",
    "aria-label": `${unit === "usd" ? "Cost" : "Tokens"} per day, last ${days.length} days` });
  for (const frac of [0, 0.5, 1]) {
    const yy = y(max * frac);
    svg.append(el("line", { x1: left, x2: W - 4, y1: yy, y2: yy, class: "grid" }),
      el("text", { x: left - 6, y: yy + 4, "text-anchor": "end", class: "axis" },
        fmt(Math.round(max * frac))));
  }
  days.forEach((d, i) => {
    let base = 0;
    const x = left + i * bw + 3;
    providers.forEach((p, n) => {
      const cell = (spend[d] || {})[p];
      const v = cell ? value(cell) : 0;
      if (!v) return;
      const rect = el("rect", { x, width: Math.max(1, bw - 6), y: y(base + v),
        height: Math.max(1, y(base) - y(base + v)), fill: PALETTE[n % PALETTE.length],
        "data-day": d, "data-provider": p },
      el("title", {}, `${d} · ${p}: ${fmtUsd(cell.cost_micros)}, ${fmtTokens(cell.tokens)} ` +
        `tokens, ${cell.calls} calls`));
      svg.append(rect);
      base += v;
    });
    if ((days.length - 1 - i) % 2 === 0 || days.length < 8) { // today always labelled
      svg.append(el("text", { x: x + (bw - 6) / 2, y: H - 10, "text-anchor": "middle",
        class: "axis" }, d.slice(5)));
    }
  });
  return svg;
}

export class UsagePage {
  constructor(ctx) {
    this.ctx = ctx;
    this._defaults = {};
    this._body = h("div", { class: "usage-body" });
    this._budget = this._budgetForm();
    this._prices = h("div", { "data-testid": "prices" });
    this.el = h("section", { class: "page usage-page", "data-testid": "usage-page" },
      h("header", { class: "panel-head" }, h("h2", {}, "Usage")),
      h("p", { class: "muted" }, "What model calls cost, per day, provider and session, at " +
        "the prices below (US dollars per million tokens). Days are UTC days."),
      this._body, this._budget,
      h("section", { class: "card", "aria-label": "Prices" },
        h("h3", {}, "Settings → Usage: prices"),
        h("p", { class: "muted small" }, "Built-in list prices of the OpenAI and Anthropic " +
          "models, by name prefix; yours go over them. A call is priced when it is made."),
        this._prices));
    document.title = "Usage · Codey";
    api.prices().then((p) => { this._defaults = p.defaults; this._renderPrices(); },
      () => this._renderPrices());
    this.render();
  }

  onChange(change) {
    if (change.kind === "reset" || EVENTS.has(change.env.event.type)) this.render();
    if (change.kind === "reset" || change.env.event.type === "prices_set") this._renderPrices();
  }

  render() {
    const state = this.ctx.store.state;
    const days = lastDays(DAYS);
    const today = days[days.length - 1];
    const providers = [...new Set(Object.values(state.spend).flatMap((d) => Object.keys(d)))]
      .sort();
    const sum = (cells, f) => cells.reduce((a, c) => a + f(c), 0);
    const todayCells = Object.values(state.spend[today] || {});
    const anyCost = Object.values(state.spend).some((d) =>
      Object.values(d).some((c) => c.cost_micros > 0));
    const unit = anyCost ? "usd" : "tokens";
    const legend = h("ul", { class: "legend" }, providers.map((p, n) => h("li", {},
      h("span", { class: "swatch", style: `background:${PALETTE[n % PALETTE.length]}` }), p)));
    const perProvider = h("table", { class: "usage-table", "data-testid": "usage-providers" },
      h("thead", {}, h("tr", {}, h("th", {}, "Provider"), h("th", {}, "Today"),
        h("th", {}, `Last ${DAYS} days`), h("th", {}, "Tokens today"), h("th", {}, "Calls today"))),
      h("tbody", {}, providers.map((p) => {
        const todayCell = (state.spend[today] || {})[p] || { cost_micros: 0, tokens: 0, calls: 0 };
        const span = sum(days, (d) => ((state.spend[d] || {})[p] || { cost_micros: 0 }).cost_micros);
        return h("tr", { "data-provider": p }, h("td", {}, p),
          h("td", {}, fmtUsd(todayCell.cost_micros)), h("td", {}, fmtUsd(span)),
          h("td", {}, fmtTokens(todayCell.tokens)), h("td", {}, String(todayCell.calls)));
      })));
    const sessions = Object.values(state.sessions).filter((s) => s.usage.turns > 0)
      .sort((a, b) => (b.usage.cost_micros - a.usage.cost_micros) ||
        (b.usage.total_tokens - a.usage.total_tokens)).slice(0, 25);
    const perSession = h("table", { class: "usage-table", "data-testid": "usage-sessions" },
      h("thead", {}, h("tr", {}, h("th", {}, "Session"), h("th", {}, "Model"),
        h("th", {}, "Cost"), h("th", {}, "Tokens"), h("th", {}, "Budget"))),
      h("tbody", {}, sessions.map((s) => h("tr", { "data-session-id": s.session_id },
        h("td", {}, h("a", { href: `#/session/${encodeURIComponent(s.session_id)}` }, s.title)),
        h("td", { class: "mono small" }, `${s.provider} · ${s.model}`),
        h("td", {}, fmtUsd(s.usage.cost_micros) +
          (s.usage.unpriced_calls ? ` (+${s.usage.unpriced_calls} unpriced)` : "")),
        h("td", {}, fmtTokens(s.usage.total_tokens)),
        h("td", {}, s.budget ? [s.budget.max_tokens != null ? `${fmtTokens(s.budget.max_tokens)} tokens` : "",
          s.budget.max_micros != null ? fmtUsd(s.budget.max_micros) : ""].filter(Boolean).join(" · ")
          : "—")))));
    const budget = state.day_budget;
    const limitWords = [budget.max_tokens != null ? `${fmtTokens(budget.max_tokens)} tokens` : "",
      budget.max_micros != null ? fmtUsd(budget.max_micros) : ""].filter(Boolean).join(" or ");
    replaceChildren(this._body,
      h("div", { class: "usage-summary" },
        h("div", { class: "stat", "data-testid": "usage-today" },
          h("span", { class: "stat-value" }, fmtUsd(sum(todayCells, (c) => c.cost_micros))),
          h("span", { class: "muted small" }, `today · ${fmtTokens(sum(todayCells, (c) => c.tokens))} tokens`)),
        h("div", { class: "stat" },
          h("span", { class: "stat-value" }, fmtUsd(sum(days, (d) =>
            sum(Object.values(state.spend[d] || {}), (c) => c.cost_micros)))),
          h("span", { class: "muted small" }, `last ${DAYS} days`)),
        h("div", { class: "stat", "data-testid": "usage-day-budget" },
          h("span", { class: "stat-value" }, limitWords || "none"),
          h("span", { class: "muted small" }, "daily budget, every session together"))),
      h("section", { class: "card", "aria-label": "Per day" },
        h("h3", {}, unit === "usd" ? "Cost per day" : "Tokens per day (nothing priced yet)"),
        spendChart(state.spend, days, providers, unit), legend),
      h("section", { class: "card", "aria-label": "Per provider" }, h("h3", {}, "Per provider"),
        providers.length ? perProvider : h("p", { class: "muted" }, "No model call yet.")),
      h("section", { class: "card", "aria-label": "Per session" }, h("h3", {}, "Per session"),
        sessions.length ? perSession : h("p", { class: "muted" }, "No model call yet.")));
  }

  _budgetForm() {
    const tokens = h("input", { type: "number", min: "1", step: "1", id: "day-budget-tokens",
      "data-testid": "day-budget-tokens", placeholder: "no limit" });
    const usd = h("input", { type: "number", min: "0.01", step: "0.01", id: "day-budget-usd",
      "data-testid": "day-budget-usd", placeholder: "no limit" });
    const error = h("p", { class: "bad", role: "alert", hidden: true });
    const form = h("form", { class: "card budget-form", "data-testid": "day-budget-form",
      "aria-label": "Daily budget" },
    h("h3", {}, "Daily budget"),
    h("p", { class: "muted small" }, "Every session together, per UTC day. A session that " +
      "reaches it stops before its next model call, with nothing half-done."),
    h("label", { for: "day-budget-tokens" }, "Tokens"), tokens,
    h("label", { for: "day-budget-usd" }, "US dollars"), usd,
    h("button", { class: "btn primary", type: "submit", "data-testid": "day-budget-save" },
      "Save"), error);
    const b = this.ctx.store.state.day_budget;
    if (b.max_tokens != null) tokens.value = String(b.max_tokens);
    if (b.max_micros != null) usd.value = String(b.max_micros / 1e6);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      showingErrors(error, async () => {
        await this.ctx.socket.setBudget(null, tokens.value ? Number(tokens.value) : null,
          usd.value ? Math.round(Number(usd.value) * 1e6) : null);
        this.ctx.toast("Daily budget saved");
      });
    });
    return form;
  }

  _renderPrices() {
    const mine = this.ctx.store.state.prices;
    const names = [...new Set([...Object.keys(mine), ...Object.keys(this._defaults)])].sort();
    const inputs = {};
    const cell = (name, field, value) => {
      const input = h("input", { type: "number", min: "0", step: "0.001", class: "price",
        "aria-label": `${name} ${field.replace("_", " ")} per million tokens`,
        "data-testid": `price-${field}`, value: value == null ? "" : String(value) });
      (inputs[name] ||= {})[field] = input;
      return h("td", {}, input);
    };
    const rows = names.map((name) => {
      const p = mine[name] || this._defaults[name];
      return h("tr", { "data-model": name, class: mine[name] ? "mine" : "" },
        h("td", { class: "mono" }, name, mine[name] ? h("span", { class: "chip" }, "yours") : ""),
        cell(name, "input", p.input), cell(name, "cached_input", p.cached_input),
        cell(name, "output", p.output));
    });
    const newName = h("input", { type: "text", "data-testid": "price-new-model",
      placeholder: "model name or prefix", "aria-label": "New model name" });
    const newRow = h("tr", {}, h("td", {}, newName), cell("+", "input", null),
      cell("+", "cached_input", null), cell("+", "output", null));
    const error = h("p", { class: "bad", role: "alert", hidden: true });
    const save = h("button", { class: "btn primary", type: "button",
      "data-testid": "prices-save" }, "Save prices");
    save.addEventListener("click", () => showingErrors(error, async () => {
      const table = {};
      for (const name of names) {
        const f = inputs[name];
        const p = { input: Number(f.input.value), cached_input: Number(f.cached_input.value),
          output: Number(f.output.value), cache_write: null };
        const d = this._defaults[name];
        const same = d && d.input === p.input && d.cached_input === p.cached_input &&
          d.output === p.output;
        if (!same) table[name] = p; // one put back to its default price is no longer yours
      }
      const extra = newName.value.trim();
      if (extra) {
        const f = inputs["+"];
        table[extra] = { input: Number(f.input.value || 0),
          cached_input: Number(f.cached_input.value || 0), output: Number(f.output.value || 0),
          cache_write: null };
      }
      await this.ctx.socket.setPrices(table);
      this.ctx.toast("Prices saved");
    }));
    replaceChildren(this._prices,
      h("table", { class: "usage-table prices-table" },
        h("thead", {}, h("tr", {}, h("th", {}, "Model"), h("th", {}, "Input"),
          h("th", {}, "Cached input"), h("th", {}, "Output"))),
        h("tbody", {}, rows, newRow)),
      save, error);
  }
}
