// Audit search: job, node, cluster, kind, actor and time range over GET /api/v1/audit (the API
// filters; ``node`` matches the events whose subject is that node), newest first: the first page
// is the newest events (``order=desc``), the "Older events" button pages back (``before_id``), and
// new matching events are added on top as they are written (``order=asc`` after the newest one
// shown). A CSV export link (``format=csv``, the newest 1000 matching events).

import { get } from "../api.js";
import { hashLink, html, join, label, redraw, say, when } from "../util.js";

const KINDS = [
  "detection", "verdict", "advice", "action-started", "action-succeeded", "action-failed",
  "action-skipped", "reconciliation", "job-options-invalid", "loop-error", "repair-requested",
  "repair-request-repeated", "repair-request-refused", "repair-request-invalid",
  "repair-approved", "repair-rejected", "repair-cancelled", "repair-action-changed",
  "repair-policy-changed", "breaker-reset", "alert-firing", "alert-resolved",
  "repair-recommended", "repair-skipped", "repair-transition", "repair-step-started",
  "repair-step-succeeded", "repair-step-failed", "repair-taken-over", "repair-recovered",
  "repair-job-interrupted", "repair-validation",
  "breaker-tripped", "access-denied", "token-created", "token-revoked", "session-started",
  "session-ended", "mode-changed",
];
const FIELDS = ["job", "node", "cluster", "kind", "actor", "since", "until"];
const PAGE = 100;
const FOLLOW_MS = 3000;
const FOLLOW_PAGES = 5; // more new events than that at once: start over from the newest

// <input type="datetime-local"> gives a local time without an offset; the API wants UTC.
function toIso(local) {
  if (!local) return undefined;
  const date = new Date(local);
  return Number.isNaN(date.getTime()) ? undefined : date.toISOString();
}

function toLocalInput(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const shifted = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
  return shifted.toISOString().slice(0, 16);
}

// The payload in one line: the telling keys first, then the rest, cut at 400 characters.
function summary(event) {
  const p = event.payload || {};
  const first = ["text", "summary", "reason", "why", "error", "from", "to", "by", "status"];
  const keys = [...first.filter((k) => k in p), ...Object.keys(p).filter((k) => !first.includes(k))];
  const bits = [];
  for (const key of keys) {
    const value = p[key];
    if (value === undefined || value === null || value === "") continue;
    bits.push(`${key}: ${typeof value === "object" ? JSON.stringify(value) : value}`);
  }
  const line = bits.join(" · ");
  return line.length > 400 ? `${line.slice(0, 399)}…` : line;
}

function eventRow(event) {
  const subject =
    event.subject_type === "job"
      ? html`<a href="${hashLink(`jobs/${encodeURIComponent(event.subject_id)}`, { cluster: event.cluster })}">job ${event.subject_id}</a>`
      : html`${event.subject_type} ${event.subject_id}`;
  return html`<tr data-event="${event.id}">
    <td>${event.id}</td><td>${when(event.time)}</td><td>${event.actor}</td>
    <th scope="row">${event.kind}</th><td>${subject}</td><td>${event.cluster || "—"}</td>
    <td>${event.action ? label(event.action) : "—"}${event.mode ? html` <span class="muted">(${event.mode})</span>` : ""}</td>
    <td class="payload">${summary(event)}</td></tr>`;
}

export function audit(main, { params }) {
  redraw(
    main,
    html`<h1 tabindex="-1">Audit</h1>
    <form id="audit-form" class="filters" role="search" aria-label="Search the audit trail">
      <label>Job <input name="job" value="${params.job || ""}" autocomplete="off"></label>
      <label>Node <input name="node" value="${params.node || ""}" autocomplete="off"></label>
      <label>Cluster <input name="cluster" value="${params.cluster || ""}" autocomplete="off"></label>
      <label>Kind <input name="kind" list="audit-kinds" value="${params.kind || ""}" autocomplete="off"></label>
      <datalist id="audit-kinds">${join(KINDS.map((k) => html`<option value="${k}"></option>`))}</datalist>
      <label>Actor <input name="actor" value="${params.actor || ""}" autocomplete="off"
        placeholder="user:alice"></label>
      <label>From (local time) <input name="since" type="datetime-local" value="${toLocalInput(params.since)}"></label>
      <label>To (local time) <input name="until" type="datetime-local" value="${toLocalInput(params.until)}"></label>
      <button type="submit" id="audit-search">Search</button>
      <label><input type="checkbox" name="follow" checked> add new events as they happen</label>
    </form>
    <p><a id="audit-csv" href="/api/v1/audit?format=csv&amp;order=desc" download>Export these results as CSV</a></p>
    <div id="audit-results" aria-live="off"></div>
    <p><button type="button" id="audit-older" hidden>Older events</button></p>`,
  );
  const form = main.querySelector("#audit-form");
  const results = main.querySelector("#audit-results");
  const older = main.querySelector("#audit-older");
  const csv = main.querySelector("#audit-csv");
  // rows: newest first; cursor: the next (older) page's ``before_id``, null once the oldest
  // matching event is shown; newestId: the id new events must come after.
  const state = { query: null, cursor: null, newestId: null, rows: [], timer: null, seq: 0 };

  function query() {
    const f = form.elements;
    return {
      job: f.job.value.trim() || undefined,
      node: f.node.value.trim() || undefined,
      cluster: f.cluster.value.trim() || undefined,
      kind: f.kind.value.trim() || undefined,
      actor: f.actor.value.trim() || undefined,
      since: toIso(f.since.value),
      until: toIso(f.until.value),
    };
  }

  function draw() {
    older.hidden = state.cursor === null;
    if (!state.rows.length) {
      redraw(results, html`<p class="muted" id="audit-count">No event matches.</p>`);
      return;
    }
    redraw(
      results,
      html`<p id="audit-count">${state.rows.length} events${state.cursor !== null ? " so far" : ""}, newest first.</p>
      <div class="scroll"><table class="list audit" id="audit-table"><thead><tr><th scope="col">Id</th>
        <th scope="col">Time (UTC)</th><th scope="col">Actor</th><th scope="col">Kind</th>
        <th scope="col">Subject</th><th scope="col">Cluster</th><th scope="col">Action</th>
        <th scope="col">Details</th></tr></thead>
        <tbody>${join(state.rows.map(eventRow))}</tbody></table></div>`,
    );
  }

  // One page back in time (``before`` undefined: the newest page), then on screen.
  function olderPage(before) {
    return get("audit", { ...state.query, order: "desc", limit: PAGE, before_id: before });
  }

  function addOlder(page) {
    state.rows.push(...page.events);
    if (state.newestId === null && page.events.length) state.newestId = page.events[0].id;
    state.cursor = page.next_before_id ?? null;
  }

  // The events written after the newest one on screen, oldest first; null: too many to add.
  async function newerEvents() {
    const found = [];
    let after = state.newestId ?? undefined;
    for (let n = 0; n < FOLLOW_PAGES; n += 1) {
      const page = await get("audit", { ...state.query, order: "asc", limit: PAGE, after_id: after });
      found.push(...page.events);
      if (page.next_after_id === null || page.next_after_id === undefined) return found;
      after = page.next_after_id;
    }
    return null;
  }

  async function search() {
    clearTimeout(state.timer);
    const seq = (state.seq += 1);
    state.query = query();
    state.cursor = null;
    state.newestId = null;
    state.rows = [];
    const shown = Object.fromEntries(
      Object.entries(state.query).filter(([, v]) => v !== undefined),
    );
    history.replaceState(null, "", hashLink("audit", shown));
    csv.href = `/api/v1/audit?${new URLSearchParams({ ...shown, order: "desc", limit: 1000, format: "csv" })}`;
    try {
      const page = await olderPage(undefined);
      if (seq !== state.seq) return;
      addOlder(page);
      draw();
    } catch (error) {
      if (seq !== state.seq) return;
      redraw(results, html`<p class="error-text">Search failed: ${error.message}</p>`);
    }
    follow();
  }

  // Every few seconds, ask for the events written after the newest one on screen.
  function follow() {
    clearTimeout(state.timer);
    state.timer = setTimeout(async () => {
      if (!results.isConnected) return;
      if (form.elements.follow.checked && !document.hidden) {
        const seq = state.seq;
        try {
          const found = await newerEvents();
          if (seq !== state.seq) return; // a new search started meanwhile
          if (found === null) {
            search();
            return;
          }
          if (found.length) {
            state.rows.unshift(...found.reverse());
            state.newestId = state.rows[0].id;
            draw();
          }
        } catch (error) {
          if (error.status !== 401) say(`Audit refresh failed: ${error.message}`, "error");
        }
      }
      follow();
    }, FOLLOW_MS);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    search();
  });
  older.addEventListener("click", async () => {
    older.disabled = true;
    const seq = state.seq;
    try {
      const page = await olderPage(state.cursor);
      if (seq !== state.seq) return;
      addOlder(page);
      draw();
    } catch (error) {
      say(`Could not load older events: ${error.message}`, "error");
    } finally {
      older.disabled = false;
      if (!older.hidden) older.focus();
    }
  });
  for (const name of FIELDS) form.elements[name].setAttribute("aria-describedby", "audit-count");
  search();
}
