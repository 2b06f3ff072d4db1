#!/usr/bin/env python3
"""hack/chaos.sh: which controller replica wrote task status, and when, from kube-apiserver's
audit log (the replicas share one ServiceAccount; each writes from its own pod IP). Prints the
writers in order since a moment, and fails when two replicas wrote in turn within the lease —
A, then B, then A again within 3 s — which a fenced leadership never shows.

    writers.py AUDIT_LOG SINCE_UNIX_SECONDS
"""
import datetime
import json
import sys

USER = "system:serviceaccount:kdoctor:kdoctor-controller"
WINDOW = 3.0


def when(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, since = sys.argv[1], float(sys.argv[2])
    writes = []
    with open(path, encoding="utf-8") as log:
        for line in log:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            ref = event.get("objectRef", {})
            if (event.get("user", {}).get("username") != USER
                    or event.get("verb") not in ("patch", "update")
                    or ref.get("subresource") != "status"
                    or ref.get("apiGroup") != "kdoctor.io"
                    or event.get("responseStatus", {}).get("code", 500) >= 400):
                continue
            at = when(event["requestReceivedTimestamp"])
            if at >= since:
                writes.append((at, (event.get("sourceIPs") or ["?"])[0]))
    writes.sort()
    runs = []
    for at, ip in writes:
        if runs and runs[-1][0] == ip:
            runs[-1][2] = at
        else:
            runs.append([ip, at, at])
    interleaved = [
        f"{a[0]} {b[0]} {c[0]}"
        for a, b, c in zip(runs, runs[1:], runs[2:])
        if a[0] == c[0] and c[1] - b[1] < WINDOW
    ]
    print(f"status writers in turn: {' '.join(r[0] for r in runs) or 'none'}; "
          f"two writing at once: {len(interleaved)}")
    for i in interleaved:
        print(f"  interleaved: {i}", file=sys.stderr)
    return 1 if interleaved else 0


if __name__ == "__main__":
    sys.exit(main())
