#!/usr/bin/env bash
# Run the real-Slurm tests the way CI does: the cluster must start (CI=true turns a skip into a
# failure) and missing packages are installed with apt (needs root). On failure, print the tail
# of every daemon log of the session's cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$(mktemp -d /tmp/medic-slurm-ci.XXXXXX)
status=0
CI=true MEDIC_SLURM_INSTALL=1 .venv/bin/pytest tests/slurm -q --basetemp="$base" "$@" || status=$?
if [ "$status" -ne 0 ]; then
    for log in "$base"/*/log/*.log; do
        [ -f "$log" ] || continue
        echo "==== $log"
        tail -n 30 "$log"
    done
fi
rm -rf "$base"
exit "$status"
