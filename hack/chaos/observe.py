#!/usr/bin/env python3
"""hack/chaos.sh's observer of one case, as a user's clients see it through the aggregation
layer (kube-apiserver proxies to any ready controller replica):

- a reader runs `kubectl get kdoctorreport` twice a second, as a user would (kubectl retries a
  503/504 that carries Retry-After, as client-go does), with a request timeout above
  kube-apiserver's own 60 s for a proxied request; each answer is counted, failed or not, and
  timed (a request that reached a paused replica waits for it), and the list's resourceVersion
  must never go backwards for this one client. Each failure is kept with its time and kind
  (chaos.sh tells those a kill explains from the others);
- a watch opened before the fault follows every change, and when its stream ends (a replica
  went away) resumes from the last resourceVersion it saw, as client-go's reflector does: each
  event must come once, in resourceVersion order, and it must never have to list again (410).

    observe.py KUBECTL KUBECONFIG OUT.json     # runs until SIGTERM, then writes OUT.json
"""
import base64
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import http.client
import urllib.parse

PATH = "/apis/system.kdoctor.io/v1beta1/kdoctorreports"
stop = threading.Event()
lock = threading.Lock()
figures = {
    "reads": 0,
    "failed": 0,
    "cut": 0,
    "failures": [],
    "slowest": 0.0,
    "errors": [],
    "backwards": [],
    "events": 0,
    "duplicates": [],
    "out_of_order": [],
    "resumes": 0,
    "relists": 0,
}


def note(key, value=1):
    with lock:
        if isinstance(figures[key], list):
            if len(figures[key]) < 10:
                figures[key].append(value)
        else:
            figures[key] += value


def reader(kubectl):
    last = 0
    while not stop.is_set():
        started = time.time()
        done = subprocess.run(
            [kubectl, "get", "kdoctorreport", "--request-timeout=70s", "-o",
             "jsonpath={.metadata.resourceVersion}"],
            capture_output=True, text=True)
        note("reads")
        with lock:
            figures["slowest"] = max(figures["slowest"], round(time.time() - started, 1))
        if done.returncode != 0:
            # Told apart: an answer broken off mid-way (its replica killed while it answered),
            # kube-apiserver's own 503 for a replica it could not reach (a killed one, still in
            # the endpoints for a moment), anything else.
            if any(t in done.stderr for t in ("stream error", "connection reset", "unexpected EOF")):
                kind = "cut"
            elif "currently unable to handle the request" in done.stderr:
                kind = "unreachable"
            else:
                kind = "other"
            with lock:
                figures["failures"].append([round(started, 1), kind])
            note("errors", done.stderr.strip()[:300])
        else:
            try:
                rv = int(done.stdout.strip())
            except ValueError:
                rv = 0
            if rv < last:
                note("backwards", f"{last} -> {rv}")
            last = max(last, rv)
        time.sleep(max(0.0, 0.5 - (time.time() - started)))


class Api:
    """The admin kubeconfig's server and client certificate, for a raw watch."""

    def __init__(self, kubeconfig):
        import yaml  # PyYAML: installed by hack/test.sh with Helm's engine
        with open(kubeconfig, encoding="utf-8") as f:
            config = yaml.safe_load(f)
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        url = urllib.parse.urlparse(cluster["server"])
        self.host, self.port = url.hostname, url.port or 443
        self.dir = tempfile.mkdtemp(prefix="kdoctor-observe-")
        files = {}
        for key, name in [("certificate-authority-data", "ca"), ("client-certificate-data", "crt"),
                          ("client-key-data", "key")]:
            path = os.path.join(self.dir, name)
            with open(path, "wb") as f:
                f.write(base64.b64decode(cluster.get(key) or user.get(key)))
            files[name] = path
        self.context = ssl.create_default_context(cafile=files["ca"])
        self.context.load_cert_chain(files["crt"], files["key"])

    def get(self, query, timeout):
        connection = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                                 timeout=timeout)
        connection.request("GET", f"{PATH}?{query}")
        return connection, connection.getresponse()


def watcher(api):
    rv = None
    last_event = 0
    seen = set()
    while not stop.is_set():
        try:
            if rv is None:
                connection, response = api.get("limit=500", 20)
                body = json.loads(response.read())
                connection.close()
                if response.status != 200:
                    time.sleep(0.5)
                    continue
                rv = int(body["metadata"]["resourceVersion"])
                last_event = rv
                continue
            connection, response = api.get(
                f"watch=true&resourceVersion={rv}&timeoutSeconds=30", 40)
            if response.status == 410:
                note("relists")
                rv = None
                connection.close()
                continue
            if response.status != 200:
                connection.close()
                time.sleep(0.5)
                continue
            while not stop.is_set():
                line = response.readline()
                if not line:
                    break
                event = json.loads(line)
                obj = event.get("object", {})
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        note("relists")
                        rv = None
                    break
                if event.get("type") == "BOOKMARK":
                    continue
                event_rv = int(obj["metadata"]["resourceVersion"])
                key = (obj["metadata"]["name"], event_rv)
                if key in seen:
                    note("duplicates", f"{key[0]}@{event_rv}")
                seen.add(key)
                if event_rv <= last_event:
                    note("out_of_order", f"{key[0]}@{event_rv} after {last_event}")
                last_event = max(last_event, event_rv)
                rv = event_rv
                note("events")
            connection.close()
            if rv is not None:
                note("resumes")
        except (OSError, ValueError, KeyError, http.client.HTTPException):
            note("resumes")
            time.sleep(0.5)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    kubectl, kubeconfig, out = sys.argv[1:]
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [threading.Thread(target=reader, args=(kubectl,), daemon=True),
               threading.Thread(target=watcher, args=(Api(kubeconfig),), daemon=True)]
    for t in threads:
        t.start()
    while not stop.is_set():
        time.sleep(0.2)
    for t in threads:
        t.join(timeout=25)
    with lock:
        figures["resumes"] = max(0, figures["resumes"] - 1)
        with open(out, "w", encoding="utf-8") as f:
            json.dump(figures, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
