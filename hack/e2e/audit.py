#!/usr/bin/env python3
"""hack/e2e.sh's questions to kube-apiserver's audit log.

    audit.py forbidden AUDIT_LOG USER...
        Fails when any request of the given users was forbidden (403) — a verb the shipped RBAC
        lacks — printing each, or when one of them made no request at all (a client that never
        asked is never checked). Prints how many requests each user made, by verb and resource.
    audit.py deleters AUDIT_LOG RESOURCE NAMESPACE NAME
        Prints, one per line, each user whose delete of that object succeeded.
"""
import collections
import glob
import json
import os
import sys


def events(path):
    """Every event of the log and of the backups kube-apiserver rotated it into
    (`audit-<time>.log` beside `audit.log`), oldest first."""
    stem, ext = os.path.splitext(path)
    for name in sorted(glob.glob(glob.escape(stem) + "-*" + ext)) + [path]:
        with open(name, encoding="utf-8") as log:
            for line in log:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue


def forbidden(path, users):
    refused = []
    counts = collections.Counter()
    for event in events(path):
        user = event.get("user", {}).get("username", "")
        if user not in users:
            continue
        ref = event.get("objectRef", {})
        what = f"{event.get('verb')} {ref.get('resource', event.get('requestURI', ''))}"
        if ref.get("subresource"):
            what += "/" + ref["subresource"]
        counts[(user, what)] += 1
        if event.get("responseStatus", {}).get("code") == 403:
            refused.append(f"{user}: {what} {ref.get('namespace', '')}/{ref.get('name', '')}: "
                           f"{event.get('responseStatus', {}).get('message', '')}")
    for (user, what), n in sorted(counts.items()):
        print(f"  {user.rsplit(':', 1)[-1]:20} {n:6}  {what}")
    silent = sorted(users - {user for user, _ in counts})
    if silent:
        print(f"e2e: FAILED: the audit log has no request of {', '.join(silent)}", file=sys.stderr)
        return 1
    if refused:
        print("e2e: FAILED: the shipped RBAC forbade these requests:", file=sys.stderr)
        for line in refused:
            print("  " + line, file=sys.stderr)
        return 1
    print(f"no request of {len(users)} ServiceAccounts was forbidden, and each made some")
    return 0


def deleters(path, resource, namespace, name):
    found = set()
    for event in events(path):
        ref = event.get("objectRef", {})
        if (event.get("verb") == "delete"
                and (ref.get("resource"), ref.get("namespace"), ref.get("name")) == (resource, namespace, name)
                and 200 <= event.get("responseStatus", {}).get("code", 0) < 300):
            found.add(event.get("user", {}).get("username", ""))
    for user in sorted(found):
        print(user)
    return 0


def main() -> int:
    args = sys.argv[1:]
    if len(args) >= 3 and args[0] == "forbidden":
        return forbidden(args[1], set(args[2:]))
    if len(args) == 5 and args[0] == "deleters":
        return deleters(*args[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
