#!/usr/bin/env bash
# Fetch the web console's third-party assets from the npm registry and copy the minified files
# with their licences into src/medic/console/static/vendor/. The outputs are checked in: the
# console loads nothing from a CDN at run time and needs no build step. Rerun this script only to
# upgrade; change the pinned versions below and check the integrity lines npm prints.
#
#   tools/vendor_console_assets.sh          # needs npm (Debian: apt-get install -y npm)
set -euo pipefail
cd "$(dirname "$0")/.."

HTMX=htmx.org@2.0.11    # BSD Zero Clause License (0BSD)
UPLOT=uplot@1.6.32      # MIT

dest=src/medic/console/static/vendor
work=$(mktemp -d /tmp/medic-vendor.XXXXXX)
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "$HTMX" "$UPLOT" >/dev/null)
for tgz in "$work"/*.tgz; do
    mkdir -p "${tgz%.tgz}"
    tar -xzf "$tgz" -C "${tgz%.tgz}"
done
htmx_dir=$(echo "$work"/htmx.org-*/package)
uplot_dir=$(echo "$work"/uplot-*/package)

mkdir -p "$dest"
cp "$htmx_dir/dist/htmx.min.js" "$dest/htmx.min.js"
cp "$htmx_dir/LICENSE" "$dest/htmx.LICENSE"
cp "$uplot_dir/dist/uPlot.iife.min.js" "$dest/uPlot.iife.min.js"
cp "$uplot_dir/dist/uPlot.min.css" "$dest/uPlot.min.css"
cp "$uplot_dir/LICENSE" "$dest/uPlot.LICENSE"
{
    echo "Vendored by tools/vendor_console_assets.sh from the npm registry (npm pack):"
    echo "  ${HTMX}  $(node -p "require('$htmx_dir/package.json').license")"
    echo "  ${UPLOT}  $(node -p "require('$uplot_dir/package.json').license")"
    echo
    (cd "$dest" && sha256sum htmx.min.js uPlot.iife.min.js uPlot.min.css)
} >"$dest/VERSIONS.txt"
cat "$dest/VERSIONS.txt"
