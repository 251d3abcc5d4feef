// Nodes: a grid of nodes with health and scheduler state, the alerts, and each repair's lifecycle.

import { get } from "../api.js";
import { isOpenRepair, nodeHealth } from "../health.js";
import { lifecycle } from "../lifecycle.js";
import { badge, hashLink, html, join, label, live, redraw, timeTag } from "../util.js";

const HEALTH_ORDER = ["out_of_service", "under_repair", "degraded", "healthy"];

function nodeCard(node, health, alerts, repair) {
  return html`<li class="node h-${health}" data-node="${node.name}">
    <h3>${node.name}</h3>
    <p>${badge(health, "health")} ${badge(node.state, "node")}</p>
    <p class="muted">${node.gpus} GPUs · ${node.partitions.join(", ") || "no partition"}</p>
    ${node.reason ? html`<p class="reason">Reason: ${node.reason}</p>` : ""}
    ${alerts.length ? html`<p>Alerts: ${join(alerts.map((a) => html`<span class="chip">${a.key}</span>`), " ")}</p>` : ""}
    ${repair ? html`<p>Repair <a href="#/repairs">#${repair.id}</a>: ${label(repair.action)},
      ${label(repair.state)}</p>` : ""}
  </li>`;
}

function grid({ nodes, alerts, repairs }, healthFilter) {
  const rows = nodes
    .map((node) => ({ node, health: nodeHealth(node) }))
    .filter((r) => !healthFilter || r.health === healthFilter)
    .sort(
      (a, b) =>
        HEALTH_ORDER.indexOf(a.health) - HEALTH_ORDER.indexOf(b.health) ||
        a.node.name.localeCompare(b.node.name, undefined, { numeric: true }),
    );
  if (!rows.length) return html`<p class="muted">No node matches.</p>`;
  return html`<ul class="grid" id="node-grid" aria-label="${rows.length} nodes">${join(
    rows.map(({ node, health }) => {
      const mine = alerts.filter((a) => a.node === node.name && a.state === "firing");
      const open = repairs.filter((r) => r.node === node.name && isOpenRepair(r));
      return nodeCard(node, health, mine, open[open.length - 1]);
    }),
  )}</ul>`;
}

function alertTable(alerts) {
  if (!alerts.length) return html`<p class="muted">No alert.</p>`;
  const sorted = alerts
    .slice()
    .sort((a, b) => (a.state === b.state ? String(b.last_seen).localeCompare(String(a.last_seen)) : a.state === "firing" ? -1 : 1));
  return html`<div class="scroll"><table class="list" id="alerts-table"><thead><tr><th scope="col">Node</th>
    <th scope="col">Alert</th><th scope="col">State</th><th scope="col">Severity</th>
    <th scope="col">Summary</th><th scope="col">Source</th><th scope="col">Maps to</th>
    <th scope="col">Count</th><th scope="col">First seen</th><th scope="col">Last seen</th>
    <th scope="col">Resolve</th></tr></thead>
    <tbody>${join(sorted.map((a) => html`<tr data-alert="${a.id}">
      <td>${a.node}</td><th scope="row">${a.key}</th><td>${badge(a.state, "alert")}</td>
      <td>${badge(a.severity, "sev")}</td><td>${a.summary}</td><td>${a.source} (${a.detector})</td>
      <td>${a.mapped_action ? label(a.mapped_action) : html`<span class="muted">unmapped</span>`}</td>
      <td>${a.count}</td><td>${timeTag(a.first_seen)}</td><td>${timeTag(a.last_seen)}</td>
      <td>${a.state === "firing" ? resolveControl(a) : ""}</td></tr>`))}
    </tbody></table></div>`;
}

// A person's resolve, after fixing the node by hand: audited as them; the next pass cancels the
// repair nobody started for it and returns a node medic cordoned for it.
function resolveControl(alert) {
  return html`<button type="button" id="resolve-${alert.id}" class="write"
    hx-post="/api/v1/alerts/${alert.id}/resolve" hx-swap="none"
    data-done="Alert ${alert.key} on ${alert.node} resolved.">Resolve</button>`;
}

function repairTable(repairs) {
  const open = repairs.filter(isOpenRepair);
  const finished = repairs.filter((r) => !isOpenRepair(r)).slice(-10).reverse();
  const shown = [...open.reverse(), ...finished];
  if (!shown.length) return html`<p class="muted">No repair.</p>`;
  return html`<div class="scroll"><table class="list" id="node-repairs"><thead><tr><th scope="col">Repair</th>
    <th scope="col">Node</th><th scope="col">Action</th><th scope="col">Lifecycle</th>
    <th scope="col">Updated</th></tr></thead><tbody>${join(shown.map((r) => html`<tr data-repair="${r.id}">
      <th scope="row">#${r.id}</th><td>${r.node}</td><td>${label(r.action)}</td>
      <td>${lifecycle(r)}${r.error ? html`<p class="error-text">${r.error}</p>` : ""}</td>
      <td>${timeTag(r.updated_at)}</td></tr>`))}</tbody></table></div>`;
}

export function nodes(main, { params }) {
  redraw(
    main,
    html`<h1 tabindex="-1">Nodes</h1>
    <form class="filters" role="search" aria-label="Filter nodes" id="nodes-filter">
      <label>Health <select name="health"><option value="">any</option>${join(
        HEALTH_ORDER.map((h) => html`<option value="${h}">${label(h)}</option>`),
      )}</select></label>
    </form>
    <section aria-labelledby="grid-title"><h2 id="grid-title">Nodes by health</h2>
      <div id="nodes-grid"><p class="load-error"></p></div></section>
    <section aria-labelledby="alerts-title"><h2 id="alerts-title">Alerts</h2>
      <div id="nodes-alerts"></div></section>
    <section aria-labelledby="repairs-title"><h2 id="repairs-title">Repairs
      <span class="muted">(cordoned → waiting → draining → executing → rejoining → validating →
      done)</span></h2>
      <p><a href="${hashLink("repairs")}">Approve or reject pending repairs</a></p>
      <div id="nodes-repairs"></div></section>`,
  );
  const form = main.querySelector("#nodes-filter");
  const gridEl = main.querySelector("#nodes-grid");
  const alertsEl = main.querySelector("#nodes-alerts");
  const repairsEl = main.querySelector("#nodes-repairs");
  let last = null;
  const draw = () => {
    if (!last) return;
    redraw(gridEl, grid(last, form.elements.health.value));
    redraw(alertsEl, alertTable(last.alerts));
    redraw(repairsEl, repairTable(last.repairs));
  };
  form.addEventListener("input", draw);
  form.addEventListener("submit", (event) => event.preventDefault());
  const cluster = params.cluster || undefined;
  live(
    gridEl,
    2000,
    async () => {
      const [nodeList, alerts, repairs] = await Promise.all([
        get("nodes", { cluster }),
        get("alerts", { cluster }),
        get("repairs", { cluster }),
      ]);
      return { nodes: nodeList, alerts, repairs };
    },
    (data) => {
      last = data;
      draw();
    },
  );
}
