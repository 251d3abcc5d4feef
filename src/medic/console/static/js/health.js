// Derived views shared by pages: node health and repair lifecycles, from the API's lists.

export const LIFECYCLE = [
  "pending_approval",
  "approved",
  "cordoned",
  "waiting_for_idle",
  "draining",
  "executing",
  "rejoining",
  "validating",
  "done",
];

export const TERMINAL = new Set(["done", "failed", "cancelled", "rejected"]);
export const CANCELLABLE = new Set([
  "pending_approval",
  "approved",
  "cordoned",
  "waiting_for_idle",
  "draining",
]);

export const REPAIR_ACTIONS = [
  "reset_gpu",
  "reboot",
  "reprovision",
  "migrate",
  "power_cycle",
  "remove",
];

export function isActiveRepair(repair) {
  return !TERMINAL.has(repair.state) && repair.state !== "pending_approval";
}

export function isOpenRepair(repair) {
  return !TERMINAL.has(repair.state);
}

// The node's health as medic's policy computes it (medic.policy.waiting.node_health):
// out_of_service (its latest finished repair failed, or removed it) > under_repair (an approved,
// unfinished repair) > degraded (an alert firing) > healthy.
export function nodeHealth(node, alerts, repairs) {
  const mine = repairs.filter((r) => r.node === node.name && r.cluster === node.cluster);
  const finished = mine
    .filter((r) => TERMINAL.has(r.state) && r.state !== "rejected" && r.state !== "cancelled")
    .sort((a, b) => String(a.updated_at).localeCompare(String(b.updated_at)) || a.id - b.id);
  const last = finished[finished.length - 1];
  if (last && (last.state === "failed" || last.action === "remove")) return "out_of_service";
  if (mine.some(isActiveRepair)) return "under_repair";
  const firing = alerts.some(
    (a) => a.node === node.name && a.cluster === node.cluster && a.state === "firing",
  );
  return firing ? "degraded" : "healthy";
}
