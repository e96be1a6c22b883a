#!/usr/bin/env bash
# Runs every fuzz target from the seed corpus in fuzz/seeds (findings
# accumulate in fuzz/corpus). Needs cargo-fuzz (`cargo install
# cargo-fuzz`); on a stable toolchain RUSTC_BOOTSTRAP=1 lets it pass its -Z
# flags. Safe Rust: no sanitizer (-s none); panics and failed assertions
# are the finds. Exits non-zero if any target crashed, printing the end of
# its output and the artifact.
#
#   fuzz/run.sh SECONDS   explore: each target for SECONDS (default 60),
#                         randomly seeded (done by hand; a find becomes a
#                         seed in fuzz/seeds and a unit test)
#   fuzz/run.sh ci        the CI smoke: each target from its seeds alone,
#                         with a fixed seed and a fixed number of runs, so
#                         the same code gives the same result every time
set -euo pipefail
cd "$(dirname "$0")"
mode=${1:-60}
export RUSTC_BOOTSTRAP=1
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in target_parse classify taint_scan config_load client_hello body_decode; do
  if [ "$mode" = ci ]; then
    echo "== $t (fixed seed, 20000 runs)"
    work=$(mktemp -d)
    dirs=("$work" "seeds/$t")
    args=(-seed=1 -runs=20000)
  else
    echo "== $t ($mode s)"
    mkdir -p "corpus/$t"
    dirs=("corpus/$t" "seeds/$t")
    args=(-max_total_time="$mode")
  fi
  if cargo fuzz run -s none "$t" "${dirs[@]}" -- "${args[@]}" -rss_limit_mb=2048 >"$log" 2>&1; then
    grep -E "^Done|DONE" "$log" || true
  else
    echo "!! $t failed:"
    tail -40 "$log"
    status=1
  fi
  if [ "$mode" = ci ]; then rm -rf "$work"; fi
done
exit $status
