#!/usr/bin/env bash
# Installs the peer proxies the benchmark compares sluice with, from
# Debian's packages, and mitmproxy (for the intercepted rows) from PyPI
# when pip can install it. The benchmark writes its own fair configs for them
# (no cache, no access log, CONNECT to any port, many descriptors) and
# starts them itself on 127.0.0.1; their system services are stopped.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq squid tinyproxy
for s in squid tinyproxy; do
  systemctl stop "$s" 2>/dev/null || service "$s" stop 2>/dev/null || true
done
if python3 -m pip install --quiet mitmproxy 2>/dev/null && command -v mitmdump >/dev/null; then
  mitm="; $(mitmdump --version | head -1)"
else
  mitm="; mitmproxy not installed (its rows are left out)"
fi
echo "installed: $(squid -v | head -1); $(tinyproxy -v 2>&1 | head -1)$mitm"
