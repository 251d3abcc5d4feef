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

// The node's health is the server's (the read model the repair engine keeps: GET /api/v1/nodes
// answers it with each node), never recomputed here.
export function nodeHealth(node) {
  return node.health || "healthy";
}
