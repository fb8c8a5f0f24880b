#!/usr/bin/env bash
# Writes the overlay JSON for `go build -overlay` (see README.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
d="$root/engine/testdata/contract"
cat > /tmp/pegasus-contract-overlay.json <<JSON
{"Replace": {
  "$root/agent/tasktypes.go": "$d/agent_tasktypes.go.txt",
  "$root/agent/options.go": "$d/agent_options.go.txt",
  "$root/agent/contract_overlay.go": "$d/agent_contract.go.txt",
  "$root/agent/tools/contract_overlay.go": "$d/tools_contract.go.txt",
  "$root/broker/contract_overlay.go": "$d/broker_contract.go.txt",
  "$root/api/catalog_overlay.go": "$d/api_catalog.go.txt",
  "$root/server/deps.go": "$d/server_deps.go.txt"
}}
JSON
echo /tmp/pegasus-contract-overlay.json
