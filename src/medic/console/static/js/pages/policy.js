// Policy: observe / act per cluster and partition (GET/PUT /api/v1/policy/modes?cluster=), and the
// repair auto-approval checklist per action and Xid code, and the detectors the policy trusts
// (GET/PUT /api/v1/policy/repair?cluster=).

import { get, put } from "../api.js";
import { REPAIR_ACTIONS } from "../health.js";
import { badge, busy, hashLink, html, join, label, live, redraw, say } from "../util.js";

const COMMON_XIDS = [48, 62, 64, 74, 79, 94, 95, 119, 120];

// --- modes ---------------------------------------------------------------------------------

// GET /api/v1/policy/modes answers {cluster, mode, partitions, default_mode, effective_mode}:
// ``mode`` is the stored cluster mode (null: the settings' ``default_mode``), ``partitions`` the
// partitions with a mode of their own. PUT takes {mode, partitions} and replaces both.
function readModes(doc) {
  const partitions = new Map(Object.entries(doc.partitions || {}));
  const effective = doc.effective_mode ?? doc.mode ?? doc.default_mode ?? null;
  return { stored: doc.mode ?? null, effective, fallback: doc.default_mode ?? null, partitions };
}

function writeModes(doc, changes) {
  const body = { mode: doc.mode ?? null, partitions: { ...(doc.partitions || {}) } };
  if ("mode" in changes) body.mode = changes.mode;
  if ("partition" in changes) {
    if (changes.partitionMode === null) delete body.partitions[changes.partition];
    else body.partitions[changes.partition] = changes.partitionMode;
  }
  return body;
}

function modeRow(scope, name, effective, note, reset) {
  const other = effective === "act" ? "observe" : "act";
  const id = `${scope}-${name}`.replace(/[^\w-]/g, "_");
  const who = scope === "cluster" ? "cluster" : name;
  return html`<tr data-scope="${scope}" data-name="${name}">
    <th scope="row">${scope === "cluster" ? html`Cluster <strong>${name}</strong>`
      : html`Partition <strong>${name}</strong>`}</th>
    <td class="mode" id="mode-${id}">${badge(effective || "unknown", "mode")}${note
      ? html` <span class="muted">(${note})</span>` : ""}</td>
    <td class="buttons write">
      <button type="button" id="switch-${id}" data-mode="${other}"
        class="${other === "act" ? "primary" : ""}">Switch ${who} to ${other}</button>
      ${reset ? html`<button type="button" id="reset-${id}" data-mode="">${reset}</button>` : ""}
    </td></tr>`;
}

function modesTable(cluster, doc, partitionNames) {
  const { stored, effective, fallback, partitions } = readModes(doc);
  const names = [...new Set([...partitionNames, ...partitions.keys()])].sort();
  const rows = [
    modeRow(
      "cluster",
      cluster,
      effective,
      stored === null ? "the setting scheduler.mode" : "switched at run time",
      stored === null ? "" : `Back to the setting (${fallback || "?"})`,
    ),
  ];
  for (const name of names) {
    const own = partitions.get(name) ?? null;
    rows.push(
      modeRow(
        "partition",
        name,
        own ?? effective,
        own === null ? "follows the cluster" : "its own mode",
        own === null ? "" : "Follow the cluster",
      ),
    );
  }
  return html`<table class="list modes" id="modes-table">
    <caption>Observe: medic records what it would do. Act: it carries out advice and repairs.
      A job's own comment still wins over both.</caption>
    <thead><tr><th scope="col">Scope</th><th scope="col">Mode</th><th scope="col">Change</th></tr></thead>
    <tbody>${join(rows)}</tbody></table>`;
}

// --- repair policy -------------------------------------------------------------------------

function xidChoices(policy, seen) {
  return [...new Set([...COMMON_XIDS, ...policy.auto_xids, ...seen])].sort((a, b) => a - b);
}

function repairPolicyForm(policy, seen) {
  const actions = REPAIR_ACTIONS.map((action) => {
    const human = action === "remove";
    return html`<li><label><input type="checkbox" name="auto_actions" value="${action}"
      ${policy.auto_actions.includes(action) ? "checked" : ""} ${human ? "disabled" : ""}>
      ${label(action)}${human ? html` <span class="muted">(always needs a person)</span>` : ""}</label></li>`;
  });
  const xids = xidChoices(policy, seen).map(
    (code) => html`<li><label><input type="checkbox" name="auto_xids" value="${code}"
      ${policy.auto_xids.includes(code) ? "checked" : ""}> Xid ${code}</label></li>`,
  );
  const facts = [
    ["Wait mode", label(policy.wait_mode)],
    ["Longest wait for a busy node", `${policy.max_wait_seconds} s`],
    ["Cooldown per node", `${policy.cooldown_seconds} s`],
    ["Alert persistence before acting", `${policy.persistence_seconds} s`],
    ["Repairs at once (fraction of nodes)", policy.max_concurrent_fraction],
    ["Breaker trips at (fraction of nodes)", `${policy.breaker_fraction} in ${policy.breaker_window_seconds} s`],
    ["Detector requests per hour", policy.detector_cap_per_hour],
    ["Revalidate after", policy.validate_after.map(label).join(", ") || "—"],
  ];
  const trusted = (policy.trusted_detectors || []).join(", ");
  return html`<form id="repair-policy-form">
    <p>A repair medic recommends is approved without a person when its action is ticked,
      <em>or</em> when it answers an Xid whose code is ticked (for the Xid's own mapped action:
      an escalated one needs its action ticked), within the budget and while the breaker is
      closed. Removal always waits for a person.</p>
    <div class="columns">
      <fieldset><legend>Actions approved automatically</legend>
        <ul class="checks">${join(actions)}</ul></fieldset>
      <fieldset><legend>Xid codes approved automatically</legend>
        <ul class="checks" id="xid-checks">${join(xids)}</ul>
        <label>Another Xid code <input type="number" name="extra_xid" min="0" max="65535"
          inputmode="numeric"></label></fieldset>
      <fieldset><legend>Detectors trusted</legend>
        <p class="muted">A detector's request is approved without a person only when its API
          token's name is listed (<code>agent</code> trusts every node agent); any other waits.</p>
        <label>Names, comma-separated <input type="text" name="trusted_detectors"
          value="${trusted}" autocomplete="off"></label>
        <label><input type="checkbox" name="trust_scheduler_requests"
          ${policy.trust_scheduler_requests ? "checked" : ""}> Also trust these names in Slurm
          drain reasons and node comments <span class="muted">(not authenticated: anyone who may
          drain a node can write any name)</span></label></fieldset>
    </div>
    <p class="write"><button type="submit" class="primary" id="save-repair-policy">Save the
      checklist</button></p>
    <h3>The rest of the policy</h3>
    <dl class="facts">${join(facts.map(([k, v]) => html`<dt>${k}</dt><dd>${v}</dd>`))}</dl>
  </form>`;
}

export function policy(main, { params }) {
  redraw(
    main,
    html`<h1 tabindex="-1">Policy</h1>
    <form class="filters" id="policy-cluster" aria-label="Choose the cluster">
      <label>Cluster <select name="cluster" id="cluster-select"></select></label>
    </form>
    <section aria-labelledby="modes-title"><h2 id="modes-title">Observe or act</h2>
      <div id="modes"><p class="load-error"></p></div></section>
    <section aria-labelledby="auto-title"><h2 id="auto-title">Repair auto-approval</h2>
      <div id="repair-policy"><p class="load-error"></p></div></section>`,
  );
  const select = main.querySelector("#cluster-select");
  const modesEl = main.querySelector("#modes");
  const policyEl = main.querySelector("#repair-policy");
  let cluster = params.cluster || null;
  let modesDoc = null;
  let policyDoc = null;
  let dirty = false;

  // The cluster this medic watches: GET /api/v1/breaker without ?cluster= answers for it.
  async function defaultCluster() {
    return (await get("breaker")).cluster || null;
  }

  function fillClusters(names) {
    if (busy(select.form)) return;
    const wanted = [...new Set(names)].sort();
    if (wanted.join("\n") === [...select.options].map((o) => o.value).join("\n")) return;
    redraw(select, join(wanted.map((n) => html`<option value="${n}">${n}</option>`)));
    select.value = cluster;
  }

  const refreshModes = live(
    modesEl,
    3000,
    async () => {
      const [nodeList, jobs] = await Promise.all([get("nodes"), get("jobs")]);
      if (!cluster) cluster = await defaultCluster();
      const clusters = [cluster, ...nodeList.map((n) => n.cluster), ...jobs.map((j) => j.cluster)];
      const doc = await get("policy/modes", { cluster });
      const partitions = [
        ...nodeList.filter((n) => n.cluster === cluster).flatMap((n) => n.partitions),
        ...jobs.filter((j) => j.cluster === cluster).map((j) => j.partition),
      ];
      return { doc, partitions, clusters: clusters.filter(Boolean) };
    },
    ({ doc, partitions, clusters }) => {
      fillClusters(clusters);
      modesDoc = doc;
      redraw(modesEl, modesTable(cluster, doc, partitions));
    },
  );

  const refreshPolicy = live(
    policyEl,
    5000,
    async () => {
      if (!cluster) cluster = await defaultCluster();
      if (!cluster) return null;
      const [doc, alerts, repairs] = await Promise.all([
        get("policy/repair", { cluster }),
        get("alerts", { cluster }),
        get("repairs", { cluster }),
      ]);
      const seen = [...alerts, ...repairs].map((x) => x.xid).filter((x) => x !== null && x !== undefined);
      return { doc, seen };
    },
    (data) => {
      if (!data || dirty) return;
      policyDoc = data.doc;
      redraw(policyEl, repairPolicyForm(data.doc, data.seen));
    },
  );

  select.addEventListener("change", () => {
    cluster = select.value;
    history.replaceState(null, "", hashLink("policy", { cluster }));
    dirty = false;
    refreshModes();
    refreshPolicy();
  });

  modesEl.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-mode]");
    if (!button || !modesDoc) return;
    const row = button.closest("tr");
    const { scope, name } = row.dataset;
    const mode = button.dataset.mode || null;
    const body =
      scope === "cluster"
        ? writeModes(modesDoc, { mode })
        : writeModes(modesDoc, { partition: name, partitionMode: mode });
    button.disabled = true;
    try {
      modesDoc = await put("policy/modes", body, { query: { cluster } });
      say(
        scope === "cluster"
          ? mode
            ? `Cluster ${name} now in ${mode} mode.`
            : `Cluster ${name} back to the setting (${modesDoc.effective_mode}).`
          : mode
            ? `Partition ${name} now in ${mode} mode.`
            : `Partition ${name} now follows the cluster.`,
      );
    } catch (error) {
      say(`Not changed: ${error.message}`, "error");
    } finally {
      button.disabled = false;
      await refreshModes();
    }
  });

  policyEl.addEventListener("change", () => {
    dirty = true;
  });
  policyEl.addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const actions = [...form.querySelectorAll("input[name=auto_actions]:checked")].map((i) => i.value);
    const xids = [...form.querySelectorAll("input[name=auto_xids]:checked")].map((i) => Number(i.value));
    const extra = form.elements.extra_xid.value.trim();
    if (extra !== "") xids.push(Number(extra));
    const trusted = form.elements.trusted_detectors.value.split(",").map((n) => n.trim()).filter(Boolean);
    const body = {
      ...policyDoc,
      auto_actions: actions,
      auto_xids: [...new Set(xids)],
      trusted_detectors: [...new Set(trusted)],
      trust_scheduler_requests: form.elements.trust_scheduler_requests.checked,
    };
    delete body.cluster;
    const button = form.querySelector("#save-repair-policy");
    button.disabled = true;
    try {
      await put("policy/repair", body, { query: { cluster } });
      dirty = false;
      await refreshPolicy();
      say(`Auto-approval checklist of ${cluster} saved.`);
    } catch (error) {
      say(`Not saved: ${error.message}`, "error");
    } finally {
      button.disabled = false;
    }
  });
}
