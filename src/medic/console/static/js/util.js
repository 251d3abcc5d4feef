// Small helpers shared by the pages: HTML escaping, formatting, polling, status messages.

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

// Escape text for HTML content and attribute values.
export function esc(value) {
  if (value === null || value === undefined) return "";
  return String(value).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

// A tagged template that escapes every interpolated value unless it is ``safe(...)``.
export function html(strings, ...values) {
  let out = strings[0];
  values.forEach((value, i) => {
    out += (value && value.__html !== undefined ? value.__html : esc(value)) + strings[i + 1];
  });
  return { __html: out };
}

export function safe(text) {
  return { __html: text };
}

export function join(parts, sep = "") {
  return { __html: parts.map((p) => (p && p.__html !== undefined ? p.__html : esc(p))).join(sep) };
}

export function text(fragment) {
  return fragment && fragment.__html !== undefined ? fragment.__html : esc(fragment);
}

// "2026-11-30 09:41:18Z": UTC, second precision, the same in every browser.
export function when(value) {
  if (!value) return "—";
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) return String(value);
  return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function timeTag(value) {
  if (!value) return html`<span class="muted">—</span>`;
  return html`<time datetime="${value}">${when(value)}</time>`;
}

export function seconds(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "—";
  if (value < 1) return `${Math.round(value * 1000)} ms`;
  if (value < 120) return `${value.toFixed(value < 10 ? 2 : 1)} s`;
  return `${(value / 60).toFixed(1)} min`;
}

export function label(value) {
  return String(value ?? "").replaceAll("_", " ");
}

// A state badge: the word is always shown, the colour only repeats it.
export function badge(value, kind = "") {
  const name = String(value ?? "unknown");
  return html`<span class="badge ${kind} s-${name.replace(/[^a-z0-9_-]/gi, "-")}">${label(name)}</span>`;
}

export function countBy(items, key) {
  const counts = new Map();
  for (const item of items) {
    const k = typeof key === "function" ? key(item) : item[key];
    counts.set(k, (counts.get(k) || 0) + 1);
  }
  return [...counts.entries()].sort((a, b) => b[1] - a[1] || String(a[0]).localeCompare(b[0]));
}

export function quantile(values, q) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

export function hashLink(page, params = {}) {
  const query = new URLSearchParams(
    Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== ""),
  ).toString();
  return `#/${page}${query ? `?${query}` : ""}`;
}

let statusTimer = null;

// Say something in the live status region (announced politely to screen readers).
export function say(message, kind = "info") {
  const el = document.getElementById("status");
  if (!el) return;
  el.textContent = message;
  el.dataset.kind = kind;
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => {
    el.textContent = "";
    delete el.dataset.kind;
  }, kind === "error" ? 15000 : 6000);
}

function edited(control) {
  if (control.type === "checkbox" || control.type === "radio") {
    return control.checked !== control.defaultChecked;
  }
  if (control.tagName === "SELECT") {
    return [...control.options].some((o) => o.selected !== o.defaultSelected);
  }
  return control.value !== control.defaultValue;
}

// The user is working in ``el``: a form control in it has the focus, or holds something they
// typed or chose and did not send yet. Do not redraw it under their hands.
export function busy(el) {
  const active = document.activeElement;
  const controls = ["INPUT", "SELECT", "TEXTAREA"];
  if (active && el.contains(active) && controls.includes(active.tagName)) return true;
  return [...el.querySelectorAll("input, select, textarea")].some(edited);
}

const liveState = { ok: 0, failed: 0 };

export function liveOk() {
  liveState.ok = Date.now();
  const el = document.getElementById("live-state");
  if (el) el.textContent = `Live updates: last refreshed ${new Date().toISOString().slice(11, 19)}Z`;
}

export function liveFailed(error) {
  const el = document.getElementById("live-state");
  if (el) el.textContent = `Live updates: failing (${error.message || error})`;
}

// Poll ``load`` every ``ms`` and hand the result to ``draw`` while ``el`` is on the page. Skips a
// round while the tab is hidden, the previous round is still running, or the user is typing in
// ``el``. Returns a function that refreshes now.
export function live(el, ms, load, draw) {
  let running = false;
  let timer = null;
  const onError = (error) => {
    if (error && error.status === 401) return; // the sign-in page takes over
    liveFailed(error);
    const slot = el.querySelector(":scope > .load-error") || el;
    if (slot !== el) slot.textContent = `Could not load: ${error.message || error}`;
  };
  async function round(force) {
    if (!el.isConnected) return;
    if (!running && (force || (!document.hidden && !busy(el)))) {
      running = true;
      try {
        const data = await load();
        if (el.isConnected) draw(data);
        liveOk();
      } catch (error) {
        onError(error);
      } finally {
        running = false;
      }
    }
  }
  async function tick() {
    await round(false);
    if (el.isConnected) timer = setTimeout(tick, ms);
  }
  tick();
  return () => {
    clearTimeout(timer);
    return round(true).then(() => {
      if (el.isConnected) timer = setTimeout(tick, ms);
    });
  };
}

// Set ``innerHTML`` keeping keyboard focus on the element with the same id, if it is still there.
export function redraw(el, fragment) {
  const focused = document.activeElement && el.contains(document.activeElement)
    ? document.activeElement.id
    : null;
  el.innerHTML = text(fragment);
  if (window.htmx) window.htmx.process(el);
  if (focused) {
    const again = document.getElementById(focused);
    if (again) again.focus();
  }
}
