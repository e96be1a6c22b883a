#!/usr/bin/env bash
# Installs the peer proxies the benchmark compares sluice with, from
# Debian's packages. The benchmark writes its own fair configs for them
# (no cache, no access log, CONNECT to any port, many descriptors) and
# starts them itself on 127.0.0.1; their system services are stopped.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq squid tinyproxy
for s in squid tinyproxy; do
  systemctl stop "$s" 2>/dev/null || service "$s" stop 2>/dev/null || true
done
echo "installed: $(squid -v | head -1); $(tinyproxy -v 2>&1 | head -1)"
