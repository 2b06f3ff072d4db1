#!/usr/bin/env python3
"""Checks charts/kdoctor with Helm's own engine (the PyPI package helm-python-sdk, which binds
Helm's Go SDK): lint, render, and compare the rendered objects with manifests/.

    hack/helm-check.py --kdoctor target/debug/kdoctor
    hack/helm-check.py --template --set feature.enableIPv6=true   # what helm template prints

Exits 1 with a diff on the first class of mismatch found, after running every check. Nothing is
skipped: a missing module or binary is a failure. hack/helm-check.sh installs the modules.
"""

from __future__ import annotations

import argparse
import base64
import copy
import difflib
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import helm_python as helm
import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "kdoctor"
NAMESPACE = "kdoctor"
# Labels only Helm adds (never in selectors): ignored when comparing with manifests/.
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
# What `kubectl apply -f manifests/` installs, besides crds/.
MANIFEST_FILES = [
    "namespace",
    "config",
    "rbac",
    "apiserver-rbac",
    "agent",
    "controller",
    "apiservice",
]
GENERATED = "<generated>"
SERVICE = "kdoctor-controller"

failures: list[str] = []


def fail(message: str) -> None:
    failures.append(message)
    print(f"FAIL: {message}\n", flush=True)


def selects(service: dict, pod_template: dict) -> bool:
    """Whether the Service's selector matches the pod template's labels."""
    labels = pod_template["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


def ok(message: str) -> None:
    print(f"ok: {message}", flush=True)


def documents(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def manifests() -> list[dict]:
    out: list[dict] = []
    for name in MANIFEST_FILES:
        out += documents((REPO / "manifests" / f"{name}.yaml").read_text())
    return out


def rendered_files(values: dict | None = None, namespace: str = NAMESPACE) -> dict[str, str]:
    """The chart's templates rendered for an install of release "kdoctor", by file."""
    with helm.Chart.load(CHART) as chart:
        return chart.render(
            values=values or {}, name="kdoctor", namespace=namespace, is_install=True
        )


def render(values: dict | None = None, namespace: str = NAMESPACE) -> list[dict]:
    rendered = rendered_files(values, namespace)
    out: list[dict] = []
    for path in sorted(rendered):
        try:
            out += documents(rendered[path])
        except yaml.YAMLError as e:
            fail(f"{path} does not parse as YAML: {e}\n{rendered[path]}")
    return out


def key(o: dict) -> str:
    meta = o.get("metadata", {})
    ns = meta.get("namespace")
    return f"{o.get('kind')} {ns + '/' if ns else ''}{meta.get('name')}"


def strip_helm_labels(value):
    """A copy without Helm's own labels, wherever a `labels` map appears."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "labels" and isinstance(v, dict):
                v = {lk: lv for lk, lv in v.items() if lk not in HELM_LABELS}
            out[k] = strip_helm_labels(v)
        return out
    if isinstance(value, list):
        return [strip_helm_labels(v) for v in value]
    return value


def by_key(objects: list[dict], what: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for o in objects:
        k = key(o)
        if k in out:
            fail(f"{what}: {k} twice")
        out[k] = o
    return out


def compare(what: str, expected: list[dict], actual: list[dict]) -> bool:
    """Equal as parsed objects (Helm labels aside); prints a unified diff per object if not."""
    exp = by_key([strip_helm_labels(o) for o in expected], f"{what} (expected)")
    act = by_key([strip_helm_labels(o) for o in actual], f"{what} (rendered)")
    good = True
    for k in sorted(set(exp) - set(act)):
        fail(f"{what}: {k} is in manifests/ but the chart does not render it")
        good = False
    for k in sorted(set(act) - set(exp)):
        fail(f"{what}: the chart renders {k}, which manifests/ does not have")
        good = False
    for k in sorted(set(exp) & set(act)):
        if exp[k] != act[k]:
            diff = difflib.unified_diff(
                yaml.safe_dump(exp[k], sort_keys=True).splitlines(),
                yaml.safe_dump(act[k], sort_keys=True).splitlines(),
                f"manifests/ {k}",
                f"chart {k}",
                lineterm="",
            )
            fail(f"{what}: {k} differs\n" + "\n".join(diff))
            good = False
    if good:
        ok(f"{what}: {len(act)} objects equal")
    return good


def find(objects: list[dict], kind: str, name: str) -> dict | None:
    for o in objects:
        if o.get("kind") == kind and o.get("metadata", {}).get("name") == name:
            return o
    return None


def kdoctor(binary: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([binary, *args], capture_output=True, text=True, cwd=REPO)


# --- (a) lint -------------------------------------------------------------------------------


def lint(values: dict | None, what: str) -> None:
    report = helm.lint(
        CHART, values or {}, strict=True, namespace=NAMESPACE, kube_version="v1.32.0"
    )
    problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    if report.get("errors") or problems:
        fail(f"helm lint ({what}): {json.dumps(report, indent=2)}")
    else:
        infos = [m["error"] for m in report.get("messages", [])]
        ok(f"helm lint --strict ({what}): no warning or error (info: {infos})")


# --- certificates ---------------------------------------------------------------------------


def b64(data: str) -> str:
    return base64.b64decode(data).decode()


def expected_secrets(binary: str, namespace: str) -> list[dict]:
    """The Secrets `kdoctor certs` makes (the controller's own shapes), data generated."""
    out = kdoctor(binary, "certs", "--namespace", namespace, "-o", "json")
    if out.returncode != 0:
        fail(f"kdoctor certs: {out.stderr}")
        return []
    secrets = [o for o in json.loads(out.stdout)["items"] if o["kind"] == "Secret"]
    for s in secrets:
        s["data"] = {k: GENERATED for k in s["data"]}
    return secrets


def serving_names(namespace: str, domain: str = "cluster.local") -> list[str]:
    return [
        f"{SERVICE}.{namespace}.svc",
        SERVICE,
        f"{SERVICE}.{namespace}",
        f"{SERVICE}.{namespace}.svc.{domain}",
    ]


def take_certificates(objects: list[dict], namespace: str) -> dict[str, str] | None:
    """Checks the generated Secrets and caBundle hang together, returns their PEMs, and replaces
    the generated data with GENERATED (and drops caBundle) for the comparison."""
    ca = find(objects, "Secret", "kdoctor-ca")
    serving = find(objects, "Secret", "kdoctor-controller-cert")
    api = find(objects, "APIService", "v1beta1.system.kdoctor.io")
    if not (ca and serving and api):
        fail("tls.server.method auto: the CA Secret, serving Secret or APIService is missing")
        return None
    pems = {}
    try:
        pems = {
            "ca.crt": b64(ca["data"]["ca.crt"]),
            "ca.key": b64(ca["data"]["ca.key"]),
            "tls.crt": b64(serving["data"]["tls.crt"]),
            "tls.key": b64(serving["data"]["tls.key"]),
        }
    except (KeyError, ValueError) as e:
        fail(f"generated Secrets lack a key or are not base64: {e}")
        return None
    if serving["data"].get("ca.crt") != ca["data"]["ca.crt"]:
        fail("kdoctor-controller-cert's ca.crt is not kdoctor-ca's")
    if api["spec"].get("caBundle") != ca["data"]["ca.crt"]:
        fail("the APIService caBundle is not kdoctor-ca's ca.crt")
    if "PRIVATE KEY" not in pems["ca.key"] or "BEGIN PRIVATE KEY" not in pems["tls.key"]:
        fail("keys must be PKCS#8 (BEGIN PRIVATE KEY): the controller reads no other form")
    for s in (ca, serving):
        s["data"] = {k: GENERATED for k in s["data"]}
    api["spec"].pop("caBundle", None)
    return pems


def check_certificates(binary: str, pems: dict[str, str], namespace: str, tmp: Path) -> None:
    d = tmp / f"certs-{namespace}"
    d.mkdir()
    for name, pem in pems.items():
        (d / name).write_text(pem)
    # The serving certificate chains to the CA and names the Service the APIService uses.
    out = subprocess.run(
        ["openssl", "verify", "-CAfile", str(d / "ca.crt"), str(d / "tls.crt")],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        fail(f"openssl verify of the Helm-made serving certificate: {out.stdout}{out.stderr}")
    else:
        ok("the Helm-made serving certificate chains to the Helm-made CA")
    out = subprocess.run(
        ["openssl", "x509", "-in", str(d / "tls.crt"), "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
    )
    names = set(re.findall(r"DNS:([^,\s]+)", out.stdout))
    missing = set(serving_names(namespace)) - names
    if out.returncode != 0 or missing:
        fail(f"serving certificate names {sorted(names)}; missing {sorted(missing)} {out.stderr}")
    else:
        ok(f"the serving certificate names {sorted(names)}")
    # The controller's own code loads the Helm-made CA (`kdoctor certs --dir` reuses a CA kept
    # there) and keeps it unchanged.
    keep = tmp / f"ca-dir-{namespace}"
    keep.mkdir()
    (keep / "ca.crt").write_text(pems["ca.crt"])
    (keep / "ca.key").write_text(pems["ca.key"])
    out = kdoctor(binary, "certs", "--dir", str(keep), "--namespace", namespace, "-o", "json")
    if out.returncode != 0:
        fail(f"kdoctor cannot use the Helm-made CA: {out.stderr}")
    else:
        items = json.loads(out.stdout)["items"]
        ca = find(items, "Secret", "kdoctor-ca")
        if not ca or b64(ca["data"]["ca.crt"]) != pems["ca.crt"]:
            fail("kdoctor certs --dir replaced the Helm-made CA instead of using it")
        else:
            ok("kdoctor's PKI loads the Helm-made CA and signs with it")
    serve_and_connect(binary, d, namespace, tmp)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_and_connect(binary: str, d: Path, namespace: str, tmp: Path) -> None:
    """The API server (rustls) serves the Helm-made certificate and a client trusting only the
    Helm-made CA accepts it under the Service's name, as the aggregator does."""
    port = free_port()
    data = tmp / f"store-{namespace}"
    proc = subprocess.Popen(
        [
            binary,
            "apiserver",
            "--data",
            str(data),
            "--listen",
            f"127.0.0.1:{port}",
            "--tls-cert",
            str(d / "tls.crt"),
            "--tls-key",
            str(d / "tls.key"),
        ],
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
        name = f"{SERVICE}.{namespace}.svc"
        last = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                fail(f"kdoctor apiserver exited: {proc.stderr.read()}")
                return
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                    with ctx.wrap_socket(raw, server_hostname=name) as tls:
                        tls.sendall(f"GET /healthz HTTP/1.1\r\nHost: {name}\r\n\r\n".encode())
                        status = tls.recv(64).decode(errors="replace").split("\r\n")[0]
                        ok(f"TLS to kdoctor apiserver as {name} with the Helm-made certificate: {status}")
                        return
            except ConnectionRefusedError as e:
                last = e
                time.sleep(0.2)
            except (ssl.SSLError, OSError) as e:
                fail(f"TLS handshake with the Helm-made certificate as {name}: {e}")
                return
        fail(f"kdoctor apiserver never listened on {port}: {last}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- the checks -----------------------------------------------------------------------------


def check_crds() -> None:
    with helm.Chart.load(CHART) as chart:
        crds = {Path(c["filename"]).name: c["data"] for c in chart.crds}
    shipped = {p.name: p.read_text() for p in (REPO / "manifests" / "crds").glob("*.yaml")}
    if crds != shipped:
        fail(
            "charts/kdoctor/crds/ differs from manifests/crds/ "
            f"(chart: {sorted(crds)}, manifests: {sorted(shipped)}); "
            "copy them: cp manifests/crds/*.yaml charts/kdoctor/crds/"
        )
    else:
        ok(f"charts/kdoctor/crds/ equals manifests/crds/ ({len(crds)} CRDs, byte for byte)")


def args_of(objects: list[dict], kind: str, name: str) -> list[str]:
    o = find(objects, kind, name)
    return o["spec"]["template"]["spec"]["containers"][0]["args"] if o else []


def check_binary_accepts(binary: str, objects: list[dict], what: str) -> None:
    for kind, name in [("DaemonSet", "kdoctor-agent"), ("StatefulSet", "kdoctor-controller")]:
        args = args_of(objects, kind, name)
        out = kdoctor(binary, *args, "--help")
        if out.returncode != 0:
            fail(f"{what}: kdoctor rejects the arguments of {kind} {name} {args}: {out.stderr}")
    ok(f"{what}: kdoctor accepts the rendered agent and controller arguments")


def check_defaults(binary: str, tmp: Path) -> None:
    shipped = manifests()
    # Exactly manifests/ when Helm makes no certificates and creates the namespace.
    compare(
        "namespace.create=true, tls.server.method=controller",
        shipped,
        render({"namespace": {"create": True}, "tls": {"server": {"method": "controller"}}}),
    )
    # The defaults: manifests/ without the Namespace (Helm's --create-namespace makes it), plus
    # the certificates the controller would otherwise create, with the same shapes.
    rendered = render()
    check_binary_accepts(binary, rendered, "defaults")
    pems = take_certificates(rendered, NAMESPACE)
    expected = [o for o in shipped if o["kind"] != "Namespace"] + expected_secrets(
        binary, NAMESPACE
    )
    compare("default values (certificate data aside)", expected, rendered)
    if pems:
        check_certificates(binary, pems, NAMESPACE, tmp)


def check_other_namespace(binary: str, tmp: Path) -> None:
    ns = "netcheck"
    rendered = render(namespace=ns)
    pems = take_certificates(rendered, ns)
    # manifests/ with every kdoctor namespace replaced: the chart names no namespace itself.
    text = "\n---\n".join(
        yaml.safe_dump(o) for o in manifests() + expected_secrets(binary, ns)
        if o["kind"] != "Namespace"
    )
    text = re.sub(r"namespace: kdoctor$", f"namespace: {ns}", text, flags=re.M)
    compare(f"namespace {ns}", documents(text), rendered)
    if pems:
        check_certificates(binary, pems, ns, tmp)


def metric_sources() -> str:
    text = ""
    for d in ["reconciler/src", "agent/src", "apiserver/src"]:
        for p in (REPO / d).rglob("*.rs"):
            text += p.read_text()
    return text


def registered(name: str, sources: str) -> bool:
    base = re.sub(r"_(bucket|sum|count)$", "", name)
    if f'"{base}"' in sources:
        return True
    # The agent registers its metrics under the registry prefix kdoctor_agent.
    return base.startswith("kdoctor_agent_") and f'"{base[len("kdoctor_agent_"):]}"' in sources


def check_monitoring(binary: str) -> None:
    values = {
        "kdoctorAgent": {"prometheus": {"serviceMonitor": {"install": True}}},
        "kdoctorController": {
            "prometheus": {"serviceMonitor": {"install": True}, "prometheusRule": {"install": True}}
        },
        "grafanaDashboard": {"install": True},
    }
    lint(values, "ServiceMonitors, alerts and dashboard on")
    rendered = render(values)
    base = render()
    added = sorted(set(map(key, rendered)) - set(map(key, base)))
    want = [
        f"ConfigMap {NAMESPACE}/kdoctor-grafana-dashboard",
        f"PrometheusRule {NAMESPACE}/kdoctor",
        f"Service {NAMESPACE}/kdoctor-agent-metrics",
        f"ServiceMonitor {NAMESPACE}/kdoctor-agent",
        f"ServiceMonitor {NAMESPACE}/kdoctor-controller",
    ]
    if added != want:
        fail(f"monitoring on: added {added}, expected {want}")
    # (Rendered by default, they would not count as added.)
    # Each ServiceMonitor selects a Service whose named port reaches the metrics port.
    for monitor, service, port in [
        ("kdoctor-controller", "kdoctor-controller-metrics", 5721),
        ("kdoctor-agent", "kdoctor-agent-metrics", 5711),
    ]:
        sm = find(rendered, "ServiceMonitor", monitor)
        svc = find(rendered, "Service", service)
        if not (sm and svc):
            fail(f"ServiceMonitor {monitor} or Service {service} missing")
            continue
        selector = sm["spec"]["selector"]["matchLabels"]
        if any(svc["metadata"]["labels"].get(k) != v for k, v in selector.items()):
            fail(f"ServiceMonitor {monitor} does not select Service {service}")
        endpoint = sm["spec"]["endpoints"][0]["port"]
        ports = {p["name"]: p for p in svc["spec"]["ports"]}
        if endpoint not in ports or ports[endpoint]["port"] != port:
            fail(f"ServiceMonitor {monitor} scrapes port {endpoint}, not {port} of {service}")
    # The report API's Service has no selector (the leading replica keeps its endpoints);
    # the metrics Service selects every replica's pod, ready or not.
    api_svc = find(rendered, "Service", SERVICE)
    if api_svc and api_svc["spec"].get("selector"):
        fail(f"Service {SERVICE} has a selector: Kubernetes, not the leading replica, would keep its endpoints")
    controller_pod = find(rendered, "StatefulSet", "kdoctor-controller")["spec"]["template"]
    controller_metrics = find(rendered, "Service", "kdoctor-controller-metrics")
    if controller_metrics:
        if not selects(controller_metrics, controller_pod):
            fail("kdoctor-controller-metrics does not select the controller's pods")
        if not controller_metrics["spec"].get("publishNotReadyAddresses"):
            fail("kdoctor-controller-metrics leaves out unready replicas")
    agent_pod = find(rendered, "DaemonSet", "kdoctor-agent")["spec"]["template"]
    metrics_svc = find(rendered, "Service", "kdoctor-agent-metrics")
    if metrics_svc:
        if not selects(metrics_svc, agent_pod):
            fail("kdoctor-agent-metrics does not select the default agent's pods")
        container_ports = {p["name"]: p["containerPort"] for p in agent_pod["spec"]["containers"][0]["ports"]}
        if container_ports.get("metrics") != 5711:
            fail(f"the agent's port metrics is {container_ports.get('metrics')}, not 5711")
    # The alerts are manifests/monitoring/prometheusrule.yaml's, Prometheus templates untouched.
    rule = find(rendered, "PrometheusRule", "kdoctor")
    manifest = documents((REPO / "manifests/monitoring/prometheusrule.yaml").read_text())[0]
    if not rule or rule["spec"] != manifest["spec"]:
        fail("the chart's PrometheusRule spec differs from manifests/monitoring/prometheusrule.yaml")
    elif any(rule["metadata"]["labels"].get(k) != v for k, v in manifest["metadata"]["labels"].items()):
        fail("the chart's PrometheusRule lacks the manifest's labels")
    else:
        ok(f"PrometheusRule: {sum(len(g['rules']) for g in rule['spec']['groups'])} alerts, as in manifests/monitoring")
    # The dashboard is JSON whose queries use only metrics the code registers.
    cm = find(rendered, "ConfigMap", "kdoctor-grafana-dashboard")
    if cm:
        try:
            dash = json.loads(cm["data"]["kdoctor.json"])
        except (KeyError, ValueError) as e:
            fail(f"the dashboard is not JSON: {e}")
            return
        sources = metric_sources()
        exprs = [t["expr"] for p in dash.get("panels", []) for t in p.get("targets", [])]
        names = set()
        for e in exprs:
            names |= {
                n for n in re.findall(r"[a-z_][a-z0-9_]*", e)
                if n.startswith(("kdoctor_", "apiserver_"))
            }
        unknown = sorted(n for n in names if not registered(n, sources))
        if len(exprs) < 6 or unknown:
            fail(f"dashboard: {len(exprs)} queries; metrics no code registers: {unknown}")
        else:
            ok(f"dashboard: {len(dash['panels'])} panels on {len(names)} registered metrics")
        if cm["metadata"]["labels"].get("grafana_dashboard") != "1":
            fail("the dashboard ConfigMap lacks the sidecar label grafana_dashboard=1")
    ok("ServiceMonitors, the agent metrics Service, the alerts and the dashboard render when enabled")


def check_values_reach_objects(binary: str) -> None:
    """Non-default values land where the code reads them, and the binary accepts the flags."""
    values = {
        "image": {"repository": "registry.example/kdoctor", "tag": "9.9.9", "pullPolicy": "Always"},
        "feature": {
            "enableIPv6": True,
            "netReachRequestMaxQPS": 50,
            "taskInputNamespaces": ["apps", "apps"],
            "aggregateReport": {
                "cleanAgedReportIntervalInMinute": 5,
                "controller": {
                    "pvc": {"storageClass": "fast", "storageRequests": "5Gi"},
                    "maxAgeInDay": 7,
                    "maxStoreGiB": 20,
                },
            },
        },
        "kdoctorAgent": {
            "service": {"type": "NodePort"},
            "ingress": {"ingressClass": "nginx"},
            "priorityClassName": "system-node-critical",
            "resources": {"limits": {"cpu": "2", "memory": "2Gi"}},
        },
        "kdoctorController": {"extraArgs": ["--cert-renew-before-days=60"], "replicas": 3},
        "global": {"clusterDnsDomain": "corp.local"},
    }
    lint(values, "non-default values")
    r = render(values)
    check_binary_accepts(binary, r, "non-default values")
    controller = args_of(r, "StatefulSet", "kdoctor-controller")
    agent = args_of(r, "DaemonSet", "kdoctor-agent")
    for flag in [
        "--retention-interval-minutes=5",
        "--report-max-age-days=7",
        "--store-max-gib=20",
        "--agent-service-type=NodePort",
        "--agent-ingress-class=nginx",
        "--agent-image-pull-policy=Always",
        "--cluster-domain=corp.local",
        "--cert-renew-before-days=60",
    ]:
        if flag not in controller:
            fail(f"controller args lack {flag}: {controller}")
    if "--service-ipv6-name=kdoctor-agent-ipv6" not in agent:
        fail(f"agent args lack the IPv6 Service: {agent}")
    v6 = find(r, "Service", "kdoctor-agent-ipv6")
    if not v6 or v6["spec"]["ipFamilies"] != ["IPv6"] or v6["spec"]["type"] != "NodePort":
        fail(f"Service kdoctor-agent-ipv6: {v6}")
    conf = yaml.safe_load(find(r, "ConfigMap", "kdoctor")["data"]["conf.yml"])
    if conf.get("enableIPv6") is not True or conf.get("netReachRequestMaxQPS") != 50:
        fail(f"conf.yml does not carry the feature values: {conf}")
    # Task inputs: conf.yml lists the namespaces, and each (the release's too) has the Role
    # and binding that let the controller read and grant there; duplicates render once.
    if conf.get("taskInputNamespaces") != ["apps", "apps"]:
        fail(f"conf.yml does not carry taskInputNamespaces: {conf}")
    roles = sorted(o["metadata"]["namespace"] for o in r
                   if o["kind"] == "Role" and o["metadata"]["name"] == "kdoctor-controller-task-inputs")
    bindings = sorted(o["metadata"]["namespace"] for o in r
                      if o["kind"] == "RoleBinding" and o["metadata"]["name"] == "kdoctor-controller-task-inputs")
    if roles != sorted(["apps", NAMESPACE]) or bindings != roles:
        fail(f"task-input Roles {roles} and bindings {bindings}, expected apps and {NAMESPACE}")
    ing = find(r, "Ingress", "kdoctor-agent")
    if not ing or ing["spec"].get("ingressClassName") != "nginx":
        fail(f"Ingress class not set: {ing}")
    if find(r, "StatefulSet", "kdoctor-controller")["spec"]["replicas"] != 3:
        fail("kdoctorController.replicas does not reach the StatefulSet")
    pvc = find(r, "StatefulSet", "kdoctor-controller")["spec"]["volumeClaimTemplates"][0]["spec"]
    if pvc.get("storageClassName") != "fast" or pvc["resources"]["requests"]["storage"] != "5Gi":
        fail(f"the controller's volume claim template: {pvc}")
    for o in r:
        for c in o.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if c["image"] != "registry.example/kdoctor:9.9.9" or c["imagePullPolicy"] != "Always":
                fail(f"{key(o)} image {c['image']} {c['imagePullPolicy']}")
    env = find(r, "StatefulSet", "kdoctor-controller")["spec"]["template"]["spec"]["containers"][0]["env"]
    if {"name": "ENV_AGENT_IMAGE", "value": "registry.example/kdoctor:9.9.9"} not in env:
        fail("the controller's ENV_AGENT_IMAGE (the carriers' image) is not the chart's image")
    ds = find(r, "DaemonSet", "kdoctor-agent")["spec"]["template"]["spec"]
    if ds.get("priorityClassName") != "system-node-critical":
        fail("agent priorityClassName not set")
    pems = take_certificates(r, NAMESPACE)
    if pems:
        out = subprocess.run(
            ["openssl", "x509", "-noout", "-ext", "subjectAltName"],
            input=pems["tls.crt"], capture_output=True, text=True,
        )
        if f"DNS:{SERVICE}.{NAMESPACE}.svc.corp.local" not in out.stdout:
            fail(f"the serving certificate does not use global.clusterDnsDomain: {out.stdout}")
    off = render({"kdoctorAgent": {"ingress": {"enable": False}}})
    if find(off, "Ingress", "kdoctor-agent"):
        fail("kdoctorAgent.ingress.enable=false still renders the Ingress")
    # cert-manager makes the CA; Helm renders no certificate Secret and no caBundle.
    values = {"tls": {"server": {"method": "certmanager"}}}
    lint(values, "tls.server.method=certmanager")
    cm = render(values)
    ca = find(cm, "Certificate", "kdoctor-ca")
    issuer = find(cm, "Issuer", "kdoctor-selfsigned")
    if not (ca and issuer):
        fail("tls.server.method=certmanager: the CA Certificate or its Issuer is missing")
    elif not (ca["spec"].get("isCA") and ca["spec"]["secretName"] == "kdoctor-ca"
              and ca["spec"]["privateKey"].get("encoding") == "PKCS8"
              and ca["spec"]["issuerRef"]["name"] == "kdoctor-selfsigned"):
        fail(f"tls.server.method=certmanager: the CA Certificate is not what the controller reads: {ca['spec']}")
    if [o for o in cm if o["kind"] == "Secret"]:
        fail("tls.server.method=certmanager still renders certificate Secrets")
    if "caBundle" in find(cm, "APIService", "v1beta1.system.kdoctor.io")["spec"]:
        fail("tls.server.method=certmanager renders a caBundle (the controller sets it)")
    try:
        render({"tls": {"server": {"method": "vault"}}})
        fail("tls.server.method=vault rendered instead of failing")
    except helm.HelmError as e:
        if "tls.server.method" not in str(e):
            fail(f"unexpected error for an unknown tls.server.method: {e}")
    ok("non-default values reach conf.yml, arguments, Services, Ingress, replicas, volume claims, images and certificates")


def values_of(settings: list[str]) -> dict:
    """Values from `--set a.b=c` arguments, as helm --set reads them (c parsed as YAML; a dot
    escaped with a backslash is part of a key: `nodeSelector.kubernetes\\.io/hostname=x`)."""
    values: dict = {}
    for setting in settings:
        path, sep, text = setting.partition("=")
        if not sep or not path:
            raise SystemExit(f"--set {setting}: expected KEY=VALUE")
        node = values
        *parents, leaf = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", path)]
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(text)
    return values


def template(settings: list[str]) -> int:
    """Prints the chart's objects as `helm template` does (CRDs apart: they are crds/)."""
    rendered = rendered_files(values_of(settings))
    for path in sorted(rendered):
        text = rendered[path].strip()
        if text:
            print(f"---\n# Source: {path}\n{text}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kdoctor", help="the kdoctor binary (cargo build -p kdoctor)")
    parser.add_argument(
        "--template",
        action="store_true",
        help="print the chart's objects, as `helm template kdoctor charts/kdoctor -n kdoctor`, and stop",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a value for --template"
    )
    args = parser.parse_args()
    if args.template:
        return template(args.set)
    if not args.kdoctor:
        parser.error("--kdoctor is required for the checks")
    binary = str(Path(args.kdoctor).resolve())
    if not os.access(binary, os.X_OK):
        print(f"FAIL: {binary} is not an executable kdoctor binary", file=sys.stderr)
        return 1
    print(f"Helm SDK {helm.helm_sdk_version()} (helm-python-sdk {helm.__version__})")
    with tempfile.TemporaryDirectory(prefix="kdoctor-helm-check-") as tmp:
        lint(None, "default values")
        check_crds()
        check_defaults(binary, Path(tmp))
        check_other_namespace(binary, Path(tmp))
        check_monitoring(binary)
        check_values_reach_objects(binary)
    if failures:
        print(f"\n{len(failures)} check(s) failed.", file=sys.stderr)
        return 1
    print("\nhelm-check: all checks passed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
