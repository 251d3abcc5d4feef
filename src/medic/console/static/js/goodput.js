// Goodput on the overview: the share of node time that went into training progress that was kept
// (GET /api/v1/goodput, defined in medic.measure.goodput), the badput by cause, and a uPlot chart
// of goodput per slice of the window.

import { get } from "./api.js";
import { html, join, when } from "./util.js";

export const BUCKETS = 48;

const CAUSES = [
  ["wasted_progress", "Wasted progress", "steps after the checkpoint a failed attempt could resume from, computed again"],
  ["stalled", "Stalled", "from an interrupted attempt's last progress to its end: a hang, or a crash until detected"],
  ["downtime", "Downtime", "between attempts: detection, requeue, queue wait and restart"],
  ["no_progress", "No progress", "attempts that reported no step, in jobs that did elsewhere"],
];

export function percent(ratio) {
  return ratio === null || ratio === undefined ? "—" : `${(100 * ratio).toFixed(1)} %`;
}

// Node-seconds in the unit that reads best.
export function nodeTime(value) {
  if (value < 120) return `${value.toFixed(value < 10 ? 1 : 0)} node-s`;
  if (value < 7200) return `${(value / 60).toFixed(1)} node-min`;
  return `${(value / 3600).toFixed(1)} node-h`;
}

export function loadGoodput(windowSeconds) {
  return get("goodput", { window: windowSeconds, buckets: BUCKETS });
}

export function goodputFigures({ summary }) {
  const measured = summary.productive_node_seconds + summary.badput_node_seconds;
  const share = (v) => (measured > 0 ? percent(v / measured) : "—");
  const unmeasured = summary.unmeasured_jobs
    ? html`<p class="muted">${summary.unmeasured_jobs} job(s) never reported progress
        (${nodeTime(summary.unmeasured_node_seconds)}): not counted.</p>`
    : "";
  const ratio = summary.ratio === null
    ? html`<p class="big" id="goodput-ratio">no progress seen yet</p>
        <p class="muted">No job reported training progress in this window.</p>`
    : html`<p class="big" id="goodput-ratio"><strong>${percent(summary.ratio)}</strong></p>
        <p class="muted">of ${nodeTime(measured)} given to ${summary.jobs} job(s) went into
          progress that was kept (${nodeTime(summary.productive_node_seconds)}).</p>`;
  return html`${ratio}
    <table class="figures" id="badput-figures">
      <caption>Badput by cause, in node time</caption>
      <thead><tr><th scope="col">Cause</th><th scope="col">Node time</th>
        <th scope="col">Share</th></tr></thead>
      <tbody>${join(
        CAUSES.map(
          ([key, name, what]) => html`<tr data-cause="${key}"><th scope="row">${name}
            <span class="muted">(${what})</span></th>
            <td>${nodeTime(summary.badput[key] || 0)}</td>
            <td>${share(summary.badput[key] || 0)}</td></tr>`,
        ),
      )}</tbody>
    </table>
    ${unmeasured}`;
}

export function goodputRows({ series }) {
  return html`<table><thead><tr><th scope="col">From</th><th scope="col">To</th>
      <th scope="col">Goodput</th><th scope="col">Productive</th><th scope="col">Badput</th>
    </tr></thead><tbody>${join(
    series.map(
      (b) => html`<tr><td>${when(b.start)}</td><td>${when(b.end)}</td>
        <td>${percent(b.ratio)}</td><td>${nodeTime(b.productive_node_seconds)}</td>
        <td>${nodeTime(b.badput_node_seconds)}</td></tr>`,
    ),
  )}</tbody></table>`;
}

// One point per slice, at its middle; null where nothing was measured (a gap in the line).
export function goodputData({ series }) {
  const xs = series.map((b) => (Date.parse(b.start) + Date.parse(b.end)) / 2000);
  const ys = series.map((b) => (b.ratio === null ? null : 100 * b.ratio));
  return [xs, ys];
}

// The x axis shows the window as the server measured it (its clock, not the browser's).
export function goodputSpan({ summary }) {
  return { min: Date.parse(summary.start) / 1000, max: Date.parse(summary.end) / 1000 };
}

export function makeGoodputChart(el, data, span) {
  const uPlot = window.uPlot;
  return new uPlot(
    {
      width: Math.max(320, el.clientWidth || 640),
      height: 220,
      title: "Goodput per slice of the window (%)",
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
      scales: {
        x: { time: true, range: () => [span.min, span.max] },
        y: { range: () => [0, 100] },
      },
      axes: [{ label: "time (UTC)" }, { label: "%" }],
      series: [
        { label: "time", value: (u, v) => (v === null ? "—" : when(v * 1000)) },
        {
          label: "goodput",
          stroke: "#1a7f37",
          fill: "rgba(26, 127, 55, 0.12)",
          width: 2,
          points: { show: true, size: 5 },
          value: (u, v) => (v === null ? "—" : `${v.toFixed(1)} %`),
        },
      ],
    },
    data,
    el,
  );
}
