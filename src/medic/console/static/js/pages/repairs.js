// Repairs: the approval queue (approve / reject / change action), repairs in progress with their
// lifecycle (cancel until executing), and the latest finished ones. htmx polls GET /api/v1/repairs
// and sends each decision with the CSRF header; the row redraws from the API's answer.

import { registerRenderer } from "../htmx-medic.js";
import { CANCELLABLE, REPAIR_ACTIONS, TERMINAL } from "../health.js";
import { lifecycle } from "../lifecycle.js";
import { badge, html, join, label, redraw, timeTag } from "../util.js";

function evidence(repair) {
  const parts = [];
  if (repair.xid !== null && repair.xid !== undefined) parts.push(html`<span class="chip">Xid ${repair.xid}</span>`);
  for (const key of repair.alert_keys) parts.push(html`<span class="chip">${key}</span>`);
  return parts.length ? join(parts, " ") : html`<span class="muted">—</span>`;
}

function decisionControls(repair) {
  const id = repair.id;
  return html`<div class="controls write">
    <label for="reason-${id}">Note <span class="muted">(optional)</span></label>
    <input id="reason-${id}" name="reason" type="text" maxlength="1000" autocomplete="off">
    <span></span>
    <div class="buttons">
      <button type="button" id="approve-${id}" class="primary"
        hx-post="/api/v1/repairs/${id}/approve" hx-include="#reason-${id}"
        hx-target="closest tr" hx-swap="outerHTML" data-render="repair-row"
        data-done="Repair ${id} approved." data-refresh="#repairs-queue">Approve</button>
      <button type="button" id="reject-${id}" class="danger"
        hx-post="/api/v1/repairs/${id}/reject" hx-include="#reason-${id}"
        hx-target="closest tr" hx-swap="outerHTML" data-render="repair-row"
        data-done="Repair ${id} rejected." data-refresh="#repairs-queue">Reject</button>
    </div>
    <label for="action-${id}">Action</label>
    <div class="buttons">
      <select id="action-${id}" name="action">${join(
        REPAIR_ACTIONS.map(
          (a) => html`<option value="${a}"${a === repair.action ? html` selected` : ""}>${label(a)}</option>`,
        ),
      )}</select>
      <button type="button" id="change-${id}"
        hx-put="/api/v1/repairs/${id}/action" hx-include="#action-${id}, #reason-${id}"
        hx-target="closest tr" hx-swap="outerHTML" data-render="repair-row"
        data-done="Repair ${id}: action changed.">Change action</button>
    </div>
  </div>`;
}

function cancelControl(repair) {
  if (!CANCELLABLE.has(repair.state) || repair.state === "pending_approval") return "";
  return html`<button type="button" id="cancel-${repair.id}" class="danger write"
    hx-post="/api/v1/repairs/${repair.id}/cancel" hx-target="closest tr" hx-swap="outerHTML"
    data-render="repair-row" data-done="Repair ${repair.id} cancelled."
    data-refresh="#repairs-queue">Cancel</button>`;
}

function row(repair) {
  const pending = repair.state === "pending_approval";
  return html`<tr data-repair="${repair.id}" id="repair-${repair.id}">
    <th scope="row">#${repair.id}</th>
    <td>${repair.node}<div class="muted">${repair.cluster}</div></td>
    <td><strong>${label(repair.action)}</strong>${repair.escalated_from
      ? html`<div class="muted">escalated from ${label(repair.escalated_from)}</div>` : ""}</td>
    <td class="state">${pending ? badge(repair.state, "repair") : lifecycle(repair)}
      ${repair.approved_by ? html`<div class="muted">approved by ${repair.approved_by}</div>` : ""}
      ${repair.error ? html`<div class="error-text">${repair.error}</div>` : ""}</td>
    <td>${repair.requested_by} <span class="muted">(${repair.requester_kind})</span>
      <div>${repair.reason}</div></td>
    <td>${evidence(repair)}</td>
    <td>${timeTag(repair.created_at)}</td>
    <td>${pending ? decisionControls(repair) : cancelControl(repair)}</td>
  </tr>`;
}

function table(id, caption, repairs) {
  if (!repairs.length) {
    return html`<section aria-labelledby="${id}-title"><h2 id="${id}-title">${caption}</h2>
      <p class="muted">None.</p></section>`;
  }
  return html`<section aria-labelledby="${id}-title"><h2 id="${id}-title">${caption}
      <span class="muted">(${repairs.length})</span></h2>
    <div class="scroll"><table class="list repairs" id="${id}"><thead><tr><th scope="col">Repair</th>
      <th scope="col">Node</th><th scope="col">Action</th><th scope="col">State</th>
      <th scope="col">Requested by, reason</th><th scope="col">Evidence</th>
      <th scope="col">Created</th><th scope="col">Decide</th></tr></thead>
      <tbody>${join(repairs.map(row))}</tbody></table></div></section>`;
}

registerRenderer("repairs", (repairs) => {
  const pending = repairs.filter((r) => r.state === "pending_approval");
  const active = repairs.filter((r) => r.state !== "pending_approval" && !TERMINAL.has(r.state));
  const finished = repairs.filter((r) => TERMINAL.has(r.state)).slice(-20).reverse();
  return join([
    table("pending-repairs", "Waiting for approval", pending),
    table("active-repairs", "In progress", active),
    table("finished-repairs", "Finished (latest 20)", finished),
  ]);
});

registerRenderer("repair-row", (repair) => row(repair));

export function repairs(main) {
  redraw(
    main,
    html`<h1 tabindex="-1">Repairs</h1>
    <p class="muted">Every decision is recorded in the audit trail under your name. A repair runs
      only with a firing alert as evidence, within the concurrency budget and while the circuit
      breaker is closed.</p>
    <div id="repairs-queue" hx-get="/api/v1/repairs" hx-trigger="load, every 2s, refresh"
      hx-sync="this:replace" data-render="repairs"><p class="muted">Loading…</p></div>`,
  );
}
