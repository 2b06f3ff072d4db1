#!/usr/bin/env python3
"""hack/chaos.sh: no acknowledged report lost. The agents' own records are the reference: a
report the harvester acknowledged leaves a `<name>.ack` marker in the agent's spool (an
emptyDir under the cluster's directory). Each must be in the store, as its node's result in
its round's KdoctorReport read through the aggregation layer.

    acked.py CLUSTER_DIR KUBECTL TASK      # NetReach TASK; prints "acknowledged N, lost M"
"""
import datetime
import os
import re
import subprocess
import sys


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    root, kubectl, task = sys.argv[1:]
    pattern = re.compile(rf"^NetReach_{re.escape(task)}_round(\d+)_(.+)_\d{{4}}-\d\d-\d\dT.*\.ack$")
    # Only this incarnation's: a task of the same name applied again (a rerun on a kept
    # cluster) leaves the records of the one before in the spools.
    created = subprocess.run(
        [kubectl, "get", "netreach", task, "--request-timeout=20s", "-o",
         "jsonpath={.metadata.creationTimestamp}"], capture_output=True, text=True).stdout.strip()
    since = datetime.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp() if created else 0
    acked = set()
    for dirpath, _, files in os.walk(root):
        for name in files:
            m = pattern.match(name)
            if m and os.path.getmtime(os.path.join(dirpath, name)) >= since:
                acked.add((int(m.group(1)), m.group(2)))
    lost = []
    stored = {}
    for round_number, node in sorted(acked):
        if round_number not in stored:
            out = subprocess.run(
                [kubectl, "get", "kdoctorreport", f"netreach-{task}.round-{round_number}",
                 "--request-timeout=20s", "-o",
                 "jsonpath={range .report.latestRoundReport[*]}{.nodeName}{\"\\n\"}{end}"],
                capture_output=True, text=True)
            stored[round_number] = set(out.stdout.split()) if out.returncode == 0 else set()
        if node not in stored[round_number]:
            lost.append(f"{node} round {round_number}")
    print(f"acknowledged {len(acked)}, lost {len(lost)}")
    for item in lost:
        print(f"  lost: {item}", file=sys.stderr)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
