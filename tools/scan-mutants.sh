#!/usr/bin/env bash
# Mutation testing of the taint scanner (docs/src/development.md, Mutation testing).
#
# The scanner (proxy/taint/scan/) and the one policy file it uses
# (policy/target.rs) are copied into a throwaway crate, so a mutant
# rebuilds about 3,700 lines at opt-level 0 (about a second) instead of
# the whole library (10-15 s here). Its own tests run, as they do in the
# library. Two passes: every mutant with the tests as CI runs them, then
# the survivors again with 10,000 cases per property test, so a survivor
# that only needs a rarer input is told from one that changes nothing.
#
#   tools/scan-mutants.sh [OUT_DIR [cargo-mutants args…]]
#
# OUT_DIR defaults to target/scan-mutants; further arguments go to both
# passes (`--list` to see the mutants, `-F judge` to run some).
#
# Survivors: OUT_DIR/mutants.out/missed.txt. Needs cargo-mutants
# (`cargo install cargo-mutants`). Touches nothing outside OUT_DIR and a
# temporary directory it removes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/target/scan-mutants}" && cd "${1:-$root/target/scan-mutants}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/src/policy" "$work/src/taint" "$work/.cargo"
cp -r "$root/proxy/taint/scan" "$work/src/taint/"
cp "$root/proxy/policy/target.rs" "$work/src/policy/"
cp "$root/Cargo.lock" "$work/"
printf 'pub mod policy;\npub mod taint {\n    pub mod scan;\n}\n' > "$work/src/lib.rs"
printf 'pub mod target;\npub use target::Host;\n' > "$work/src/policy/mod.rs"
# The same dependencies as the library's Cargo.toml (Cargo.lock pins them).
cat > "$work/Cargo.toml" <<'TOML'
[package]
name = "scanmut"
version = "0.0.0"
edition = "2021"

[dependencies]
memchr = "2.8"
foldhash = "0.2"
idna = "1.1"
psl = "2"
thiserror = "2"

[target.'cfg(target_arch = "x86_64")'.dependencies]
safe_arch = "1"

[dev-dependencies]
proptest = "1"

[profile.dev]
debug = 0
opt-level = 0

# Dependencies optimised: the property tests spend their time in psl and
# proptest, and these are built once.
[profile.dev.package."*"]
opt-level = 3
TOML
cat > "$work/.cargo/mutants.toml" <<'TOML'
additional_cargo_test_args = ["--lib"]
exclude_globs = ["src/**/tests.rs", "src/taint/scan/cases.rs", "src/taint/scan/edges.rs", "src/taint/scan/properties.rs", "src/policy/**"]
TOML

cd "$work"
shift || true
cargo mutants -f 'src/taint/scan/*.rs' -j 2 --timeout 6 -o "$out" "$@" || true
PROPTEST_CASES=10000 cargo mutants -f 'src/taint/scan/*.rs' -j 2 --timeout 60 --iterate -o "$out" "$@" || true
if [ -f "$out/mutants.out/missed.txt" ]; then
  echo "survivors: $(wc -l < "$out/mutants.out/missed.txt") (list: $out/mutants.out/missed.txt)"
fi
