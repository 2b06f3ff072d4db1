#!/usr/bin/env python3
"""hack/e2e.sh's RBAC check: reads kube-apiserver's audit log and fails when any request of the
given users was forbidden (403) — a verb the shipped RBAC lacks — printing each. Also prints how
many requests each user made, by verb and resource.

    audit.py AUDIT_LOG USER...
"""
import collections
import json
import sys


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, users = sys.argv[1], set(sys.argv[2:])
    forbidden = []
    counts = collections.Counter()
    with open(path, encoding="utf-8") as log:
        for line in log:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            user = event.get("user", {}).get("username", "")
            if user not in users:
                continue
            ref = event.get("objectRef", {})
            what = f"{event.get('verb')} {ref.get('resource', event.get('requestURI', ''))}"
            if ref.get("subresource"):
                what += "/" + ref["subresource"]
            counts[(user, what)] += 1
            if event.get("responseStatus", {}).get("code") == 403:
                forbidden.append(f"{user}: {what} {ref.get('namespace', '')}/{ref.get('name', '')}: "
                                 f"{event.get('responseStatus', {}).get('message', '')}")
    for (user, what), n in sorted(counts.items()):
        print(f"  {user.rsplit(':', 1)[-1]:20} {n:6}  {what}")
    if not counts:
        print(f"e2e: FAILED: the audit log has no request of {', '.join(sorted(users))}", file=sys.stderr)
        return 1
    if forbidden:
        print("e2e: FAILED: the shipped RBAC forbade these requests:", file=sys.stderr)
        for f in forbidden:
            print("  " + f, file=sys.stderr)
        return 1
    print(f"no request of {len(users)} ServiceAccounts was forbidden")
    return 0


if __name__ == "__main__":
    sys.exit(main())
