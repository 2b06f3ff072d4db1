#!/usr/bin/env bash
# runc for the test cluster's real node on a machine where no process may lower an OOM score
# below 0 (CAP_SYS_RESOURCE is outside every bounding set): a container's negative
# process.oomScoreAdj (the kubelet asks -998 for a pod sandbox, -997 for a Guaranteed
# container) is raised to 0 in its bundle before Debian's runc runs; nothing else changes.
# hack/kube/real-node.sh installs it only where the machine needs it.
set -euo pipefail
bundle="" prev=""
for a in "$@"; do
  if [ "$prev" = --bundle ] || [ "$prev" = -b ]; then bundle="$a"; fi
  prev="$a"
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  python3 - "$bundle/config.json" <<'PY'
import json
import sys

path = sys.argv[1]
with open(path) as f:
    spec = json.load(f)
process = spec.get("process") or {}
if process.get("oomScoreAdj", 0) < 0:
    process["oomScoreAdj"] = 0
    with open(path, "w") as f:
        json.dump(spec, f)
PY
fi
exec runc "$@"
