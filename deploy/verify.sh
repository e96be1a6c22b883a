#!/usr/bin/env bash
# Checks the deployment recipes without a cluster or a container runtime:
# the systemd unit with systemd-analyze, the Kubernetes manifests against
# the API schemas (kubernetes-validate, from PyPI), and the configs they
# ship with `sluice check`. Run by .ci/run after the tests; takes a binary.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/debug/sluice}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# systemd: verify a copy whose ExecStart names the binary at hand.
if command -v systemd-analyze >/dev/null 2>&1; then
  sed "s#/usr/local/bin/sluice#$(realpath "$bin")#g" deploy/sluice.service > "$tmp/sluice.service"
  systemd-analyze verify "$tmp/sluice.service"
  echo "deploy/sluice.service: systemd-analyze verify ok"
else
  echo "systemd-analyze is missing (Debian package systemd)" >&2
  exit 1
fi

# Kubernetes: every resource against the API schemas.
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  python3 -m pip install -q kubernetes-validate
fi
kubernetes-validate --strict --quiet deploy/kubernetes.yaml
echo "deploy/kubernetes.yaml: kubernetes-validate ok"

# The configs the recipes ship, and the one inside the manifest.
for c in deploy/sidecar.toml deploy/host.toml; do
  "$bin" check --config "$c" > /dev/null
  echo "$c: sluice check ok"
done
python3 - "$tmp/k8s.toml" <<'PY'
import sys, re
text = open("deploy/kubernetes.yaml").read()
m = re.search(r"sluice.toml: \|\n((?:    .*\n)+)", text)
open(sys.argv[1], "w").write("".join(l[4:] + "\n" for l in m.group(1).splitlines()))
PY
"$bin" check --config "$tmp/k8s.toml" > /dev/null
echo "deploy/kubernetes.yaml's sluice.toml: sluice check ok"
