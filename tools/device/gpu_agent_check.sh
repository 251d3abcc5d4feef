#!/usr/bin/env bash
# Device check of `medic agent` on a machine with NVIDIA GPUs (written for one H200), < 3 min.
#
# Run from anywhere in the repository copy, as root or not; everything lands in $OUT:
#   nvidia-smi.txt     nvidia-smi -L, the head of -q, and a CSV of the values the agent reads
#   agent-once.json    `python -m medic.agent --once --json` (the code of `medic agent --once
#                      --json`, without the control plane's packages, which the device lacks)
#   verdict.json       per-key statuses, the problems found, and agent-vs-nvidia-smi comparisons
#   pytest-nvml.txt    tests/agent/test_nvml.py (fake-NVML decisions + test_real_nvml on the GPU)
#   probe.json         GpuChecks twice, 12 s apart, on the real GPU (replay rate, peak, counts)
#   log.txt            this script's whole output
# Needs only python3 with nvidia-ml-py and httpx (pytest for the unit tests); no network. If the
# repository's .venv is carried and runs there, it is used; set PY=... to choose another python.
# Exit status: 0 when every GPU key is ok or not_supported with real values, 1 otherwise.
set -u
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.." || exit 1
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
failed=0
step() { printf '\n== %s\n' "$*"; }

step "GPU as nvidia-smi sees it"
{
  nvidia-smi -L
  nvidia-smi -q | head -50
  echo
  nvidia-smi --format=csv,noheader,nounits --query-gpu=index,uuid,pci.bus_id,temperature.gpu,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,clocks_event_reasons.active
} 2>&1 | tee "$OUT/nvidia-smi.txt"
nvidia-smi --format=csv,noheader,nounits \
  --query-gpu=index,uuid,temperature.gpu,ecc.errors.uncorrected.volatile.total >"$OUT/smi.csv" 2>/dev/null

step "python"
pick() { "$1" -c 'import pynvml, httpx, medic.agent' >/dev/null 2>&1; }
if [ -n "${PY:-}" ] && pick "$PY"; then :
elif [ -x .venv/bin/python ] && pick .venv/bin/python; then PY=.venv/bin/python
elif pick python3; then PY=python3
else
  echo "no python with nvidia-ml-py and httpx: set PY, or carry .venv / wheels" >&2
  exit 1
fi
"$PY" -c 'import sys, pynvml, importlib.metadata as m; print(sys.version.split()[0], "nvidia-ml-py", m.version("nvidia-ml-py"))'

step "medic agent --once --json"
timeout 60 "$PY" -m medic.agent --once --json --fs / --fs /tmp --kernel none \
  --node device-check --detector agent:device-check >"$OUT/agent-once.json"
echo "exit status $? (1 = some check failing)"
"$PY" - "$OUT" <<'EOF' || failed=1
import csv, json, sys
out = sys.argv[1]
body = json.load(open(f"{out}/agent-once.json"))
gpu_keys = ["agent:ecc_dbe", "agent:row_remap_failure", "agent:row_remap_pending",
            "agent:retired_pages", "agent:pcie_replay", "agent:clock_throttle", "agent:thermal",
            "agent:gpu_missing"]
found = {f["key"]: f for f in body["findings"]}
problems = []
for key in gpu_keys:
    f = found.get(key)
    if f is None:
        problems.append(f"{key}: missing")
    elif f["status"] not in ("ok", "not_supported"):
        problems.append(f"{key}: {f['status']}: {f['summary']} {f['evidence']}")
def gpus(key):
    return [g for g in found.get(key, {}).get("evidence", {}).get("gpus", []) if g.get("status", "ok") == "ok"]
temps = {g["uuid"]: g["temperature_c"] for g in gpus("agent:thermal")}
dbe = {g["uuid"]: g["volatile_dbe"] for g in gpus("agent:ecc_dbe")}
if not temps or not all(isinstance(t, int) and 0 < t < 120 for t in temps.values()):
    problems.append(f"temperatures not real: {temps}")
if not all(isinstance(v, int) and v >= 0 for v in dbe.values()):
    problems.append(f"ECC counts not integers: {dbe}")
compare = []
try:
    for row in csv.reader(open(f"{out}/smi.csv")):
        index, uuid, temp, vol = (c.strip() for c in row)
        agent_t = temps.get(uuid)
        ok_t = agent_t is not None and temp.isdigit() and abs(agent_t - int(temp)) <= 5
        ok_e = not vol.isdigit() or dbe.get(uuid) == int(vol)
        compare.append({"gpu": index, "uuid": uuid, "smi_temp": temp, "agent_temp": agent_t,
                        "smi_dbe": vol, "agent_dbe": dbe.get(uuid), "agree": ok_t and ok_e})
        if not (ok_t and ok_e):
            problems.append(f"agent and nvidia-smi disagree on GPU {index}: {compare[-1]}")
except (OSError, ValueError) as exc:
    problems.append(f"no nvidia-smi CSV: {exc!r}")
if not compare:
    problems.append("nvidia-smi listed no GPU to compare with")
verdict = {"statuses": {k: found[k]["status"] for k in found}, "problems": problems,
           "compare": compare, "ok": not problems}
json.dump(verdict, open(f"{out}/verdict.json", "w"), indent=2)
print(json.dumps(verdict, indent=2))
sys.exit(0 if not problems else 1)
EOF

step "the same through the medic CLI, where the control-plane packages are installed"
if "$PY" -m medic agent --help >/dev/null 2>&1; then
  timeout 60 "$PY" -m medic agent --once --json --kernel none --fs / >/dev/null
  echo "medic agent --once --json: exit status $? (0 ok, 1 some check failing)"
else
  echo "medic agent unavailable here (control-plane packages missing, or not yet in cli/app.py): python -m medic.agent above ran the same code"
fi

step "unit tests of the NVML checks (fakes + the real GPU)"
if "$PY" -c 'import pytest' 2>/dev/null; then
  timeout 90 "$PY" -m pytest tests/agent/test_nvml.py -q -p no:cacheprovider -rs \
    >"$OUT/pytest-nvml.txt" 2>&1 || failed=1
  tail -15 "$OUT/pytest-nvml.txt"
else
  echo "pytest missing: skipped" | tee "$OUT/pytest-nvml.txt"
fi

step "GpuChecks on the real GPU, twice, 12 s apart"
timeout 60 "$PY" - "$OUT" <<'EOF' || failed=1
import json, sys, time
from medic.agent.nvml import GpuChecks
checks = GpuChecks()
runs = []
try:
    for n in range(2):
        if n:
            time.sleep(12)
        t0 = time.monotonic()
        results = checks.run()
        runs.append({"seconds": round(time.monotonic() - t0, 3),
                     "results": [r.to_json() for r in results]})
finally:
    checks.close()
json.dump(runs, open(f"{sys.argv[1]}/probe.json", "w"), indent=2)
for r in runs[-1]["results"]:
    print(f"{r['status']:<14} {r['key']:<26} {r['summary']}")
print("run times (s):", [r["seconds"] for r in runs])
replay = next(r for r in runs[-1]["results"] if r["key"] == "agent:pcie_replay")
print("pcie replay evidence:", json.dumps(replay["evidence"].get("gpus", replay["evidence"])))
bad = [r for r in runs[-1]["results"] if r["status"] not in ("ok", "not_supported")]
sys.exit(1 if bad else 0)
EOF

step "result"
if [ "$failed" = 0 ]; then echo "PASS"; else echo "FAIL (see verdict.json, pytest-nvml.txt, probe.json)"; fi
exit "$failed"
