// Overview: jobs running vs total, jobs by state, nodes by health and state, open repairs, the
// circuit breaker, alerts; which process holds each lease of the control work (replicas); then, for a chosen window, goodput (the figure, badput by cause and a
// uPlot chart over time) and detection / action latencies (figures and a uPlot chart).

import { get } from "../api.js";
import { registerRenderer } from "../htmx-medic.js";
import {
  goodputData,
  goodputFigures,
  goodputRows,
  goodputSpan,
  loadGoodput,
  makeGoodputChart,
} from "../goodput.js";
import { isActiveRepair, isOpenRepair, nodeHealth } from "../health.js";
import { latencies } from "../latency.js";
import {
  badge,
  countBy,
  hashLink,
  html,
  join,
  live,
  quantile,
  redraw,
  seconds,
  timeTag,
  when,
} from "../util.js";

const WINDOWS = [
  ["3600", "last hour"],
  ["21600", "last 6 hours"],
  ["86400", "last 24 hours"],
  ["604800", "last 7 days"],
];

function countList(pairs, kind) {
  if (!pairs.length) return html`<p class="muted">None.</p>`;
  return html`<ul class="counts">${join(
    pairs.map(([name, n]) => html`<li>${badge(name, kind)} <strong>${n}</strong></li>`),
  )}</ul>`;
}

// An operator closes a tripped breaker once the cluster-level cause is understood (audited with
// the note); hidden from viewers like every write.
function breakerReset(breaker) {
  return html`<div class="controls write">
    <label for="breaker-note">Note <span class="muted">(what was wrong, optional)</span></label>
    <input id="breaker-note" name="reason" type="text" maxlength="1000" autocomplete="off">
    <span></span>
    <div class="buttons">
      <button type="button" id="breaker-reset" class="primary"
        hx-post="/api/v1/breaker/reset" hx-include="#breaker-note"
        hx-target="#breaker-card" hx-swap="outerHTML" data-render="breaker"
        hx-vals='${JSON.stringify({ cluster: breaker.cluster })}'
        data-done="Circuit breaker of ${breaker.cluster} reset: automatic repairs may run again."
        >Reset the breaker</button>
    </div>
  </div>`;
}

// The breaker card; also what a reset answers with (the renderer "breaker"), so the card shows
// the closed breaker at once instead of waiting for a poll the note field holds back.
function breakerCard(breaker) {
  return html`<section class="card" aria-labelledby="ov-breaker" id="breaker-card">
      <h2 id="ov-breaker">Circuit breaker</h2>
      ${breaker.tripped
        ? html`<p class="big" id="breaker-state">${badge("tripped", "alarm")}</p>
            <p>Since ${timeTag(breaker.tripped_at)}: ${breaker.reason || ""}</p>
            <p>Automatic repair approval is paused until a person resets it.</p>
            ${breakerReset(breaker)}`
        : html`<p class="big" id="breaker-state">${badge("closed", "ok")}</p>
            <p class="muted">Automatic repairs may run${breaker.reset_at
              ? html` (last reset by ${breaker.reset_by} at ${timeTag(breaker.reset_at)})`
              : ""}.</p>`}
      <p class="muted">Cluster ${breaker.cluster}</p>
    </section>`;
}

registerRenderer("breaker", breakerCard);

function summary({ jobs, nodes, alerts, repairs, breaker }) {
  const running = jobs.filter((j) => j.state === "running").length;
  const share = jobs.length ? Math.round((100 * running) / jobs.length) : 0;
  const advised = jobs.filter((j) => j.advice && j.advice.active).length;
  const health = countBy(nodes, (n) => nodeHealth(n));
  const open = repairs.filter(isOpenRepair);
  const pending = open.filter((r) => r.state === "pending_approval").length;
  const active = open.filter(isActiveRepair).length;
  const firing = alerts.filter((a) => a.state === "firing");
  return html`
    <section class="card" aria-labelledby="ov-jobs">
      <h2 id="ov-jobs">Jobs</h2>
      <p class="big" id="jobs-running"><strong>${running}</strong> of ${jobs.length} running
        <span class="muted">(${share}%)</span></p>
      <p class="muted">Jobs running out of all the jobs medic watches.</p>
      ${countList(countBy(jobs, "state"), "job")}
      <p><a href="${hashLink("jobs")}">${advised} with active advice</a></p>
    </section>
    <section class="card" aria-labelledby="ov-nodes">
      <h2 id="ov-nodes">Nodes</h2>
      <p class="big"><strong>${nodes.length}</strong> nodes</p>
      <h3>By health</h3>
      ${countList(health, "health")}
      <h3>By scheduler state</h3>
      ${countList(countBy(nodes, "state"), "node")}
    </section>
    <section class="card" aria-labelledby="ov-repairs">
      <h2 id="ov-repairs">Repairs</h2>
      <p class="big" id="open-repairs"><strong>${open.length}</strong> open</p>
      <ul class="counts">
        <li><a href="${hashLink("repairs")}">${pending} waiting for approval</a></li>
        <li>${active} in progress</li>
      </ul>
      ${countList(countBy(open, "state"), "repair")}
    </section>
    ${breakerCard(breaker)}
    <section class="card" aria-labelledby="ov-alerts">
      <h2 id="ov-alerts">Alerts</h2>
      <p class="big"><strong>${firing.length}</strong> firing</p>
      ${countList(countBy(firing, "key"), "alert")}
      <p><a href="${hashLink("nodes")}">See the nodes</a></p>
    </section>`;
}

function figures(points) {
  const values = points.map((p) => p.seconds);
  return [values.length, quantile(values, 0.5), quantile(values, 0.95), values.length ? Math.max(...values) : null];
}

function latencyTable({ detection, action }) {
  const row = (name, points) => {
    const [n, p50, p95, max] = figures(points);
    return html`<tr><th scope="row">${name}</th><td>${n}</td><td>${seconds(p50)}</td>
      <td>${seconds(p95)}</td><td>${seconds(max)}</td></tr>`;
  };
  return html`<table class="figures" id="latency-figures">
    <caption>Latencies in the window, from the audit trail</caption>
    <thead><tr><th scope="col">Latency</th><th scope="col">Count</th><th scope="col">Median</th>
      <th scope="col">p95</th><th scope="col">Max</th></tr></thead>
    <tbody>${row("Detection (log line → detection stored)", detection)}
      ${row("Action (first detection → scheduler action done)", action)}</tbody>
  </table>`;
}

function latencyRows({ detection, action }) {
  const rows = [
    ...detection.map((p) => ({ ...p, what: "detection", job: p.event.subject_id })),
    ...action.map((p) => ({ ...p, what: "action" })),
  ].sort((a, b) => b.at - a.at);
  if (!rows.length) return html`<p class="muted">No latency in this window.</p>`;
  return html`<table><thead><tr><th scope="col">Time</th><th scope="col">Latency</th>
      <th scope="col">Job</th><th scope="col">Seconds</th></tr></thead><tbody>${join(
    rows.slice(0, 200).map(
      (r) => html`<tr><td>${when(r.at)}</td><td>${r.what}</td>
        <td><a href="${hashLink(`jobs/${encodeURIComponent(r.job)}`, { cluster: r.event.cluster })}">${r.job}</a></td>
        <td>${r.seconds.toFixed(3)}</td></tr>`,
    ),
  )}</tbody></table>`;
}

// uPlot wants one x array: merge both series, with null where a series has no point.
function chartData({ detection, action }) {
  const xs = [...new Set([...detection, ...action].map((p) => p.at / 1000))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const det = new Array(xs.length).fill(null);
  const act = new Array(xs.length).fill(null);
  for (const p of detection) det[index.get(p.at / 1000)] = p.seconds;
  for (const p of action) act[index.get(p.at / 1000)] = p.seconds;
  return [xs, det, act];
}

// ``span`` holds the window's bounds (unix seconds): the x axis always shows the whole window.
function makeChart(el, data, span) {
  const width = Math.max(320, el.clientWidth || 640);
  const uPlot = window.uPlot;
  return new uPlot(
    {
      width,
      height: 260,
      title: "Latency of each detection and action (seconds)",
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
      scales: {
        x: { time: true, range: () => [span.min, span.max] },
        y: { range: (u, min, max) => [0, Math.max(1, (max ?? 0) * 1.1)] },
      },
      axes: [{ label: "time (UTC)" }, { label: "seconds" }],
      series: [
        { label: "time", value: (u, v) => (v === null ? "—" : when(v * 1000)) },
        {
          label: "detection latency",
          stroke: "#1f5fa8",
          width: 1.5,
          spanGaps: true,
          points: { show: true, size: 6 },
          value: (u, v) => seconds(v),
        },
        {
          label: "action latency",
          stroke: "#b3541e",
          width: 1.5,
          dash: [6, 4],
          spanGaps: true,
          points: { show: true, size: 8, fill: "#b3541e" },
          value: (u, v) => seconds(v),
        },
      ],
    },
    data,
    el,
  );
}

// One row per lease: who does which control work (docs/replicas.md), and whether its lease runs.
function leaseTable(leases) {
  if (!leases.length) {
    return html`<p class="muted">No medic process has taken a lease yet.</p>`;
  }
  const now = Date.now();
  const rows = leases.map((l) => {
    const left = (Date.parse(l.expires_at) - now) / 1000;
    const state = left > 0 ? badge(`held, ${Math.ceil(left)} s left`, "ok") : badge("ran out", "warn");
    return html`<tr><td><code>${l.name}</code></td><td>${l.holder}</td><td>${String(l.token)}</td>
      <td>${timeTag(l.acquired_at)}</td><td>${state}</td></tr>`;
  });
  return html`<div class="scroll"><table class="list" id="leases-table"><thead><tr>
    <th scope="col">Lease</th><th scope="col">Holder</th><th scope="col">Token</th>
    <th scope="col">Held since</th><th scope="col">State</th></tr></thead>
    <tbody>${join(rows)}</tbody></table></div>`;
}

export function overview(main) {
  redraw(
    main,
    html`<h1 tabindex="-1">Overview</h1>
    <div class="cards" id="overview-cards" aria-live="off"><p class="load-error"></p></div>
    <p><label for="overview-window">Window</label>
      <select id="overview-window">${join(
        WINDOWS.map(([v, name]) => html`<option value="${v}">${name}</option>`),
      )}</select></p>
    <section aria-labelledby="leases-title" class="wide">
      <h2 id="leases-title">Control plane</h2>
      <p class="muted">Which medic process does each piece of the control work: the loop of a
        cluster, and carrying its job advice out. Another replica takes a lease over once it ran
        out (its holder died or stalled); the token grows at each change of holder.</p>
      <div id="leases"><p class="load-error"></p></div>
    </section>
    <section aria-labelledby="goodput-title" class="wide">
      <h2 id="goodput-title">Goodput</h2>
      <p class="muted">The share of the node time given to training jobs that went into progress
        that was kept, weighted by node count; the rest is badput, by cause. From the jobs'
        attempts: steps after the last checkpoint of a failed attempt are wasted, silence before
        its end is stalled, time between attempts is downtime. A running attempt counts as
        productive until it ends; jobs that never reported progress are counted apart.</p>
      <div id="goodput"><p class="load-error"></p></div>
      <figure class="chart">
        <div id="goodput-chart" role="img" aria-label="Chart of goodput over the window; the same values are in the table below"></div>
        <figcaption><details><summary>Goodput values as a table</summary>
          <div id="goodput-rows"></div></details></figcaption>
      </figure>
    </section>
    <section aria-labelledby="latency-title" class="wide">
      <h2 id="latency-title">Detection and action latency</h2>
      <p class="muted">Computed from the audit trail for the chosen window: detection latency is a
        <code>detection</code> event's time minus the log line's time; action latency is the first
        <code>action-succeeded</code> of an advice minus the first detection of that job attempt.
        The process-lifetime histograms are on <a href="/metrics">/metrics</a>.</p>
      <div id="latency"><p class="load-error"></p></div>
      <figure class="chart">
        <div id="latency-chart" role="img" aria-label="Chart of detection and action latencies over time; the same values are in the table below"></div>
        <figcaption><details><summary>Latency values as a table</summary>
          <div id="latency-rows"></div></details></figcaption>
      </figure>
    </section>`,
  );
  const cards = main.querySelector("#overview-cards");
  live(
    cards,
    2000,
    async () => {
      const [jobs, nodes, alerts, repairs, breaker] = await Promise.all([
        get("jobs"),
        get("nodes"),
        get("alerts", { state: "firing" }),
        get("repairs"),
        get("breaker"),
      ]);
      return { jobs, nodes, alerts, repairs, breaker };
    },
    (data) => redraw(cards, summary(data)),
  );

  const leasesEl = main.querySelector("#leases");
  live(leasesEl, 5000, () => get("leases"), (leases) => redraw(leasesEl, leaseTable(leases)));

  const windowSelect = main.querySelector("#overview-window");
  const goodputEl = main.querySelector("#goodput");
  const goodputChartEl = main.querySelector("#goodput-chart");
  const goodputRowsEl = main.querySelector("#goodput-rows");
  let goodputChart = null;
  const goodputWindow = { min: 0, max: 1 };
  const refreshGoodput = live(
    goodputEl,
    10000,
    () => loadGoodput(windowSelect.value),
    (body) => {
      redraw(goodputEl, goodputFigures(body));
      redraw(goodputRowsEl, goodputRows(body));
      Object.assign(goodputWindow, goodputSpan(body));
      const data = goodputData(body);
      if (goodputChart) goodputChart.setData(data);
      else goodputChart = makeGoodputChart(goodputChartEl, data, goodputWindow);
    },
  );
  const figuresEl = main.querySelector("#latency");
  const chartEl = main.querySelector("#latency-chart");
  const rowsEl = main.querySelector("#latency-rows");
  let chart = null;
  const span = { min: 0, max: 1 };
  const refresh = live(
    figuresEl,
    10000,
    () => {
      span.max = Date.now() / 1000;
      span.min = span.max - Number(windowSelect.value);
      return latencies(new Date(span.min * 1000).toISOString());
    },
    (points) => {
      redraw(figuresEl, latencyTable(points));
      redraw(rowsEl, latencyRows(points));
      const data = chartData(points);
      if (chart) chart.setData(data);
      else chart = makeChart(chartEl, data, span);
    },
  );
  windowSelect.addEventListener("change", () => {
    refresh();
    refreshGoodput();
  });
  const onResize = () => {
    if (!chartEl.isConnected) {
      window.removeEventListener("resize", onResize);
      return;
    }
    if (chart) chart.setSize({ width: Math.max(320, chartEl.clientWidth), height: 260 });
    if (goodputChart) {
      goodputChart.setSize({ width: Math.max(320, goodputChartEl.clientWidth), height: 220 });
    }
  };
  window.addEventListener("resize", onResize);
}
