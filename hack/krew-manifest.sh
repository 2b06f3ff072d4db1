#!/usr/bin/env bash
# Renders .krew.yaml as krew-release-bot would, for a local install or a krew-index PR:
#   hack/krew-manifest.sh TAG ARCHIVE_DIR > kdoctor.yaml
# Each `addURIAndSha "URL" .TagName` becomes `uri: URL` and `sha256:` of the archive of the
# same file name in ARCHIVE_DIR (made by hack/release-archive.sh); a missing archive is an error.
set -euo pipefail
tag=${1:?usage: hack/krew-manifest.sh TAG ARCHIVE_DIR}
dir=${2:?usage: hack/krew-manifest.sh TAG ARCHIVE_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
python3 - "$root/.krew.yaml" "$tag" "$dir" <<'PY'
import hashlib, os, re, sys
template, tag, folder = sys.argv[1:4]
out = []
for line in open(template):
    if line.startswith("#"):
        continue
    m = re.match(r'^(\s*)\{\{ addURIAndSha "([^"]+)" \.TagName \}\}\s*$', line)
    if m:
        indent, uri = m.group(1), m.group(2).replace("{{ .TagName }}", tag)
        path = os.path.join(folder, uri.rsplit("/", 1)[1])
        if not os.path.isfile(path):
            sys.exit(f"krew-manifest: {path} is missing (hack/release-archive.sh makes it)")
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
        out.append(f"{indent}uri: {uri}\n{indent}sha256: {digest}\n")
        continue
    if "{{" in line.replace("{{ .TagName }}", ""):
        sys.exit(f"krew-manifest: unknown template in: {line.strip()}")
    out.append(line.replace("{{ .TagName }}", tag))
sys.stdout.write("".join(out))
PY
