// Jobs: the list with anomaly flags, and one job's timeline.

import { auditEvents, get } from "../api.js";
import { registerRenderer } from "../htmx-medic.js";
import {
  badge,
  countBy,
  hashLink,
  html,
  join,
  label,
  live,
  redraw,
  seconds,
  timeTag,
  when,
} from "../util.js";

const RECENT_SECONDS = 3600;

function jobLink(job) {
  return hashLink(`jobs/${encodeURIComponent(job.id)}`, { cluster: job.cluster });
}

function flags(job, detections) {
  const out = [];
  const advice = job.advice;
  if (advice && advice.active) {
    out.push(html`<li class="flag">${badge("advice", "alarm")} ${label(advice.action)}
      (${advice.status}, ${advice.mode} mode)</li>`);
  }
  if (detections.length) {
    const kinds = countBy(detections, (e) => e.signature_id || "?")
      .slice(0, 3)
      .map(([sig, n]) => `${sig}${n > 1 ? ` ×${n}` : ""}`)
      .join(", ");
    out.push(html`<li class="flag">${badge("detections", "warn")} ${detections.length} in the
      last hour: ${kinds}</li>`);
  }
  if (job.held) out.push(html`<li class="flag">${badge("held", "warn")}</li>`);
  if (job.excluded_nodes.length) {
    out.push(html`<li>excludes ${job.excluded_nodes.join(", ")}</li>`);
  }
  return out.length ? html`<ul class="flags">${join(out)}</ul>` : html`<span class="muted">—</span>`;
}

function jobRows(jobs, detectionsByJob, filter) {
  const needle = filter.text.toLowerCase();
  const shown = jobs.filter((job) => {
    const dets = detectionsByJob.get(`${job.cluster}/${job.id}`) || [];
    const flagged = (job.advice && job.advice.active) || dets.length > 0 || job.held;
    if (filter.flagged && !flagged) return false;
    if (filter.state && job.state !== filter.state) return false;
    return !needle || `${job.id} ${job.name} ${job.nodes.join(" ")}`.toLowerCase().includes(needle);
  });
  if (!shown.length) return html`<p class="muted">No job matches.</p>`;
  return html`<div class="scroll"><table class="list" id="jobs-table">
    <caption>${shown.length} of ${jobs.length} jobs</caption>
    <thead><tr><th scope="col">Job</th><th scope="col">Name</th><th scope="col">Cluster</th>
      <th scope="col">Partition</th><th scope="col">State</th><th scope="col">Nodes</th>
      <th scope="col">Restarts</th><th scope="col">Anomalies</th></tr></thead>
    <tbody>${join(
      shown.map((job) => {
        const dets = detectionsByJob.get(`${job.cluster}/${job.id}`) || [];
        return html`<tr data-job="${job.id}">
          <th scope="row"><a href="${jobLink(job)}">${job.id}</a></th>
          <td>${job.name}</td><td>${job.cluster}</td><td>${job.partition}</td>
          <td>${badge(job.state, "job")}</td><td>${job.nodes.join(", ") || "—"}</td>
          <td>${job.restart_count}</td><td>${flags(job, dets)}</td></tr>`;
      }),
    )}</tbody></table></div>`;
}

export function jobs(main, { params }) {
  redraw(
    main,
    html`<h1 tabindex="-1">Jobs</h1>
    <form class="filters" id="jobs-filter" role="search" aria-label="Filter jobs">
      <label>Search <input type="search" name="text" value="${params.q || ""}"
        placeholder="id, name or node"></label>
      <label>State <select name="state"><option value="">any</option>${join(
        ["running", "pending", "requeued", "completed", "failed", "cancelled", "node_fail",
          "timeout", "preempted"].map((s) => html`<option value="${s}">${label(s)}</option>`),
      )}</select></label>
      <label><input type="checkbox" name="flagged" ${params.flagged ? "checked" : ""}>
        only jobs with anomalies</label>
    </form>
    <div id="jobs-list"><p class="load-error"></p></div>`,
  );
  const form = main.querySelector("#jobs-filter");
  const list = main.querySelector("#jobs-list");
  let last = null;
  const filter = () => ({
    text: form.elements.text.value.trim(),
    state: form.elements.state.value,
    flagged: form.elements.flagged.checked,
  });
  const draw = () => last && redraw(list, jobRows(last.jobs, last.detections, filter()));
  form.addEventListener("input", draw);
  form.addEventListener("submit", (event) => event.preventDefault());
  live(
    list,
    3000,
    async () => {
      const since = new Date(Date.now() - RECENT_SECONDS * 1000).toISOString();
      const [all, events] = await Promise.all([
        get("jobs"),
        auditEvents({ kind: "detection", since }, 2),
      ]);
      const detections = new Map();
      for (const event of events) {
        const key = `${event.cluster}/${event.subject_id}`;
        if (!detections.has(key)) detections.set(key, []);
        detections.get(key).push(event);
      }
      return { jobs: all, detections };
    },
    (data) => {
      last = data;
      draw();
    },
  );
}

// --- timeline ------------------------------------------------------------------------------

function lineLatency(detection, storedAt) {
  if (!storedAt) return "";
  const latency = (new Date(storedAt) - new Date(detection.time)) / 1000;
  return html` <span class="muted">detected after ${seconds(Math.max(0, latency))}</span>`;
}

function evidence(detection, storedAt) {
  const where = [
    detection.node && `node ${detection.node}`,
    detection.rank !== null && detection.rank !== undefined && `rank ${detection.rank}`,
  ].filter(Boolean);
  const fields = Object.entries(detection.fields || {});
  return html`<li class="detection">
    <p>${badge(detection.severity, "sev")} <strong>${detection.signature_id}</strong>
      <span class="muted">(${detection.domain}, ${detection.role}; suggests ${label(detection.action)})</span>
      ${where.length ? ` on ${where.join(", ")}` : ""} at ${timeTag(detection.time)}${lineLatency(detection, storedAt)}</p>
    <pre class="evidence"><code>${detection.text}</code></pre>
    ${fields.length ? html`<p class="muted">${join(
      fields.map(([k, v]) => html`<span class="field">${k}=${v}</span>`), " ",
    )}</p>` : ""}
  </li>`;
}

function eventLine(event) {
  const p = event.payload || {};
  switch (event.kind) {
    case "detection":
      return html`detected <strong>${event.signature_id}</strong> on ${p.node || "?"}: <code>${p.text}</code>`;
    case "verdict":
      return html`verdict <strong>${event.verdict}</strong> (confidence ${p.confidence}):
        ${p.summary}${p.implicated_nodes && p.implicated_nodes.length
          ? ` — implicates ${p.implicated_nodes.join(", ")}` : ""}`;
    case "advice":
      return html`advice g${p.generation}: <strong>${label(event.action)}</strong> in
        ${event.mode || "?"} mode (${p.rule}) ${p.reason}${p.exclude_nodes && p.exclude_nodes.length
          ? ` — exclude ${p.exclude_nodes.join(", ")}` : ""}`;
    case "reconciliation":
      return html`advice g${p.generation} ${p.status}: ${p.reason}`;
    default:
      if (event.kind.startsWith("action-")) {
        return html`scheduler ${event.kind.replace("action-", "")}: <strong>${event.action || p.key}</strong>
          ${p.seconds !== undefined ? `(${seconds(p.seconds)})` : ""}${p.error ? ` — ${p.error}` : ""}`;
      }
      return html`${label(event.kind)} ${event.action || ""} ${p.reason || p.why || ""}`;
  }
}

function actionLatencies(events) {
  const firstDetection = new Map();
  const out = [];
  const seen = new Set();
  const advice = new Map();
  for (const e of events) {
    const p = e.payload || {};
    const t = new Date(e.time).getTime();
    if (e.kind === "detection" && !firstDetection.has(p.attempt)) firstDetection.set(p.attempt, t);
    if (e.kind === "advice") advice.set(`${p.advice_id}/${p.generation}`, { p, t, e });
    if (e.kind === "action-succeeded") {
      const key = `${p.advice_id}/${p.generation}`;
      const a = advice.get(key);
      if (!a || seen.has(key)) continue;
      seen.add(key);
      const start = firstDetection.get(a.p.attempt) ?? a.t;
      out.push({ advice: a, seconds: (t - start) / 1000, done: e.time });
    }
  }
  return out;
}

function timelineView(data) {
  const job = data.job;
  const advice = job.advice;
  const storedAt = new Map();
  for (const e of data.events) {
    if (e.kind === "detection") {
      const lineTime = Date.parse(e.payload.line_time);
      storedAt.set(`${e.signature_id}/${e.payload.attempt}/${lineTime}`, e.time);
    }
  }
  const stored = (d) => storedAt.get(`${d.signature_id}/${d.attempt}/${Date.parse(d.time)}`);
  const latencies = actionLatencies(data.events);
  const attempts = data.attempts
    .slice()
    .sort((a, b) => a.number - b.number)
    .map((a) => {
      const dets = data.detections.filter((d) => d.attempt === a.number);
      const verdicts = data.verdicts.filter((v) => v.attempt === a.number);
      return html`<section class="attempt" aria-labelledby="attempt-${a.number}">
        <h3 id="attempt-${a.number}">Attempt ${a.number} ${badge(a.state, "job")}</h3>
        <p>On ${a.nodes.join(", ") || "—"}, from ${timeTag(a.started_at)} to ${timeTag(a.ended_at)};
          steps ${a.first_step ?? "—"} → ${a.last_step ?? "—"}, last checkpoint
          ${a.last_checkpoint_step ?? "—"}${a.loaded_checkpoint_step !== null
            ? `, resumed from ${a.loaded_checkpoint_step}` : ""}.</p>
        <h4>Detections (${dets.length})</h4>
        ${dets.length ? html`<ul class="evidence-list">${join(dets.map((d) => evidence(d, stored(d))))}</ul>`
          : html`<p class="muted">None.</p>`}
        <h4>Verdicts (${verdicts.length})</h4>
        ${verdicts.length ? html`<ul>${join(verdicts.map((v) => html`<li class="verdict">
            ${badge(v.domain, "domain")} <strong>${label(v.action)}</strong>, confidence
            ${v.confidence.toFixed(2)}: ${v.summary}${v.implicated_nodes.length
              ? ` — implicates ${v.implicated_nodes.join(", ")}` : ""}
            ${v.root_signature ? html` <span class="muted">(root ${v.root_signature})</span>` : ""}</li>`))}</ul>`
          : html`<p class="muted">None.</p>`}
      </section>`;
    });
  return html`
    <section class="card wide" aria-labelledby="job-summary">
      <h2 id="job-summary">${job.name} ${badge(job.state, "job")}</h2>
      <dl class="facts">
        <dt>Cluster</dt><dd>${job.cluster}</dd>
        <dt>Partition</dt><dd>${job.partition}</dd>
        <dt>Nodes</dt><dd>${job.nodes.join(", ") || "—"}</dd>
        <dt>Excluded nodes</dt><dd>${job.excluded_nodes.join(", ") || "—"}</dd>
        <dt>Restarts</dt><dd>${job.restart_count}</dd>
        <dt>Held</dt><dd>${job.held ? "yes" : "no"}</dd>
        <dt>Advice</dt><dd>${advice
          ? html`${label(advice.action)} g${advice.generation}, ${advice.status}
              (${advice.active ? "active" : "settled"}, ${advice.mode} mode): ${advice.reason}`
          : "none"}</dd>
      </dl>
    </section>
    <section aria-labelledby="latencies-title">
      <h2 id="latencies-title">Action latency</h2>
      ${latencies.length ? html`<ul>${join(latencies.map((l) => html`<li>advice
          g${l.advice.p.generation} (${label(l.advice.e.action)}): scheduler action done
          ${seconds(l.seconds)} after the first detection, at ${timeTag(l.done)}</li>`))}</ul>`
        : html`<p class="muted">No scheduler action has completed for this job.</p>`}
    </section>
    <section aria-labelledby="attempts-title">
      <h2 id="attempts-title">Attempts</h2>
      ${attempts.length ? join(attempts) : html`<p class="muted">No attempt recorded yet.</p>`}
    </section>
    <section aria-labelledby="actions-title">
      <h2 id="actions-title">Scheduler actions</h2>
      ${data.actions.length ? html`<table class="list"><thead><tr><th scope="col">Step</th>
          <th scope="col">Status</th><th scope="col">Started</th><th scope="col">Finished</th>
          <th scope="col">Error</th></tr></thead><tbody>${join(data.actions.map((a) => html`<tr>
          <td>${label(a.kind)} <span class="muted">${a.key}</span></td><td>${badge(a.status)}</td>
          <td>${timeTag(a.started_at)}</td><td>${timeTag(a.finished_at)}</td><td>${a.error || "—"}</td>
          </tr>`))}</tbody></table>`
        : html`<p class="muted">None.</p>`}
    </section>
    <section aria-labelledby="events-title">
      <h2 id="events-title">Everything medic saw and did, oldest first</h2>
      <ol class="timeline" id="timeline-events">${join(
        data.events.map((e) => html`<li class="ev k-${e.kind}"><span class="when">${when(e.time)}</span>
          <span class="actor">${e.actor}</span> <span class="kind">${e.kind}</span>
          <span class="what">${eventLine(e)}</span></li>`),
      )}</ol>
    </section>`;
}

registerRenderer("timeline", (data) => timelineView(data));

export function timeline(main, { id, params }) {
  const query = params.cluster ? `?cluster=${encodeURIComponent(params.cluster)}` : "";
  const url = `/api/v1/jobs/${encodeURIComponent(id)}/timeline${query}`;
  redraw(
    main,
    html`<p><a href="#/jobs">← All jobs</a></p>
    <h1 tabindex="-1">Job ${id} timeline</h1>
    <p class="muted">Attempts, detections with their evidence lines, verdicts, advice and scheduler
      actions from <code>GET ${url}</code>, refreshed every 2 s.
      <a href="${hashLink("audit", { job: id, cluster: params.cluster })}">Audit events of this job</a>.</p>
    <div id="timeline" hx-get="${url}" hx-trigger="load, every 2s" data-render="timeline">
      <p class="muted">Loading…</p></div>`,
  );
}
