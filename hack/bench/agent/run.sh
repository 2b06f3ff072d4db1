#!/usr/bin/env bash
# Agent benchmark (issue 5): `kdoctor probe http` vs oha and `kdoctor probe dns` vs dnsperf, in the
# same run, against the same nginx and unbound on loopback; agent RSS idle and while probing 100
# targets. Needs nginx, unbound, dnsperf (Debian) and oha (`cargo install oha`). Prints a
# markdown section for docs/benchmarks.md. Options pass through, e.g. `run.sh --secs 5`.
set -euo pipefail
cd "$(dirname "$0")"
for tool in nginx unbound dnsperf; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || {
    echo "missing $tool: apt-get install -y nginx unbound dnsperf" >&2; exit 2; }
done
OHA=${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
[ -x "$OHA" ] || { echo "missing oha: cargo install oha --locked (or set OHA=/path/to/oha)" >&2; exit 2; }
root=$(cd ../../.. && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && CARGO_TARGET_DIR="$target" cargo build --release -q -p kdoctor)
exec cargo run --release -q -- --kdoctor "$target/release/kdoctor" --oha "$OHA" "$@"
