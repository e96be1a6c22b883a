#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 60) each, from the seed
# corpus in fuzz/seeds (findings accumulate in fuzz/corpus). Needs
# cargo-fuzz (`cargo install cargo-fuzz`); on a stable toolchain
# RUSTC_BOOTSTRAP=1 lets it pass its -Z flags. Safe Rust: no sanitizer
# (-s none); panics and failed assertions are the finds. Exits non-zero if
# any target crashed, printing the end of its output and the artifact.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
export RUSTC_BOOTSTRAP=1
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in target_parse classify taint_scan config_load client_hello body_decode; do
  echo "== $t ($secs s)"
  mkdir -p "corpus/$t"
  if cargo fuzz run -s none "$t" "corpus/$t" "seeds/$t" -- \
      -max_total_time="$secs" -rss_limit_mb=2048 >"$log" 2>&1; then
    grep -E "^Done|DONE" "$log" || true
  else
    echo "!! $t failed:"
    tail -40 "$log"
    status=1
  fi
done
exit $status
