// A repair's lifecycle as an ordered list of steps: the reached ones are marked, the current one
// is ``aria-current="step"`` and named in words, so it reads without colour.

import { LIFECYCLE } from "./health.js";
import { badge, html, join, label } from "./util.js";

const SHOWN = LIFECYCLE.filter((s) => s !== "pending_approval" && s !== "approved");
// cordoned → waiting → draining → executing → rejoining → validating → done

const SHORT = { waiting_for_idle: "waiting" };

export function lifecycle(repair) {
  const state = repair.state;
  const at = SHOWN.indexOf(state);
  const ended = ["failed", "cancelled", "rejected"].includes(state);
  let current = at;
  if (state === "pending_approval" || state === "approved") current = -1;
  const steps = SHOWN.map((step, i) => {
    const done = current >= 0 && (i < current || (i === current && state === "done"));
    const here = i === current;
    return html`<li class="${done ? "done" : ""} ${here ? "here" : ""}"${here
      ? html` aria-current="step"` : ""}>${SHORT[step] || label(step)}</li>`;
  });
  const summary =
    current >= 0
      ? `step ${current + 1} of ${SHOWN.length}: ${label(state)}`
      : ended
        ? `ended: ${label(state)}`
        : `not started: ${label(state)}`;
  return html`<div class="lifecycle">
    <p class="lifecycle-state">${badge(state, "repair")} <span class="muted">${summary}</span></p>
    <ol class="steps" aria-label="Repair ${repair.id} lifecycle">${join(steps)}</ol>
  </div>`;
}
