#!/usr/bin/env bash
# Lints and renders charts/kdoctor with Helm's own engine (PyPI helm-python-sdk, which bundles
# Helm's Go SDK; no helm binary needed) and compares the objects with manifests/. Installs the
# Python packages when missing; any failure, including a failed install, fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import helm_python, yaml' 2>/dev/null; then
  python3 -m pip install --quiet helm-python-sdk pyyaml
fi
python3 -c 'import helm_python, yaml'

# The checks run the binary too: it must accept the rendered arguments and load Helm's CA.
cargo build --locked --quiet -p kdoctor --bin kdoctor
exec python3 hack/helm-check.py --kdoctor "${CARGO_TARGET_DIR:-target}/debug/kdoctor"
