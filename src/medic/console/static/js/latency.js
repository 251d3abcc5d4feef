// Detection and action latencies from the audit trail (the same definitions as the Prometheus
// histograms medic_detection_latency_seconds and medic_action_latency_seconds, recomputed here
// for a time window so they can be charted):
//
// * detection latency: a ``detection`` event's time (stored) minus its ``payload.line_time``
//   (when the log line was written);
// * action latency: the first ``action-succeeded`` of an advice generation minus the first
//   ``detection`` of the same job attempt (the advice's own time when that detection is older
//   than the window).

import { auditEvents } from "./api.js";

const ms = (value) => new Date(value).getTime();

export async function latencies(sinceIso) {
  const [detections, advice, actions] = await Promise.all([
    auditEvents({ kind: "detection", since: sinceIso }),
    auditEvents({ kind: "advice", since: sinceIso }),
    auditEvents({ kind: "action-succeeded", since: sinceIso }),
  ]);
  const detection = [];
  const firstDetection = new Map();
  for (const event of detections) {
    const at = ms(event.time);
    const lineTime = event.payload && event.payload.line_time;
    if (lineTime) detection.push({ at, seconds: Math.max(0, (at - ms(lineTime)) / 1000), event });
    const key = `${event.cluster}/${event.subject_id}/${event.payload && event.payload.attempt}`;
    if (!firstDetection.has(key) || firstDetection.get(key) > at) firstDetection.set(key, at);
  }
  const adviceStart = new Map();
  for (const event of advice) {
    const p = event.payload || {};
    const key = `${p.advice_id}/${p.generation}`;
    const detKey = `${event.cluster}/${event.subject_id}/${p.attempt}`;
    adviceStart.set(key, {
      start: firstDetection.get(detKey) ?? ms(event.time),
      job: event.subject_id,
      cluster: event.cluster,
    });
  }
  const action = [];
  const seen = new Set();
  for (const event of actions) {
    const p = event.payload || {};
    const key = `${p.advice_id}/${p.generation}`;
    if (seen.has(key) || !adviceStart.has(key)) continue;
    seen.add(key);
    const at = ms(event.time);
    const origin = adviceStart.get(key);
    action.push({ at, seconds: Math.max(0, (at - origin.start) / 1000), event, job: origin.job });
  }
  detection.sort((a, b) => a.at - b.at);
  action.sort((a, b) => a.at - b.at);
  return { detection, action };
}
