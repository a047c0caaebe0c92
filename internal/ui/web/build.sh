#!/usr/bin/env bash
# Reproducibly installs the pinned graph library (package-lock.json) and copies it into
# ../assets, which internal/ui embeds: `go build` needs no npm, the page fetches nothing remote.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --ignore-scripts
cp node_modules/cytoscape/dist/cytoscape.min.js ../assets/cytoscape.min.js
cp node_modules/cytoscape/LICENSE ../assets/cytoscape.LICENSE
