#!/usr/bin/env bash
# Proves the README's first hour on a bare machine. In a podman container
# of a minimal Debian (curl and a C linker; no npm, node, git, python3,
# chromium, nft or ip), as a non-root user with no network, it runs what a
# newcomer runs, as the README writes it:
#
#   cargo install --locked --path .
#   the quick start: `sluice run` on the embedded default config, and a
#     request it refuses (a refused one: nothing may leave this machine)
#   cargo test --locked
#
# The Rust toolchain is this machine's (mounted read-only, as rustup would
# have installed it) and the crates come from its cargo cache (copied):
# nothing is fetched. The image and the container are removed at the end.
#
#   .ci/bare-machine.sh          (as root; .ci/run calls it)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root (rootful podman)" >&2; exit 2; }
t0=$SECONDS
step() { printf '\n== %s (%ss)\n' "$*" "$((SECONDS - t0))"; }

id=sluicebare$$
tmp=$(mktemp -d "/tmp/$id.XXXXXX")
img=localhost/$id:test
cleanup() {
  rc=$?
  set +e
  podman rm -f -t 0 "$id" >/dev/null 2>&1
  podman image exists "$img" && podman rmi -f "$img" >/dev/null
  rm -rf "$tmp"
  echo "bare machine: done in $((SECONDS - t0))s"
  exit "$rc"
}
trap cleanup EXIT

# This machine: hybrid cgroups without systemd, a capped RLIMIT_NPROC.
cat > "$tmp/containers.conf" <<'EOF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
EOF
export CONTAINERS_CONF=$tmp/containers.conf

step "a minimal Debian: curl, ca-certificates, gcc (the linker rustc needs)"
command -v mmdebstrap >/dev/null ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
mmdebstrap --quiet --variant=minbase --include=curl,ca-certificates,gcc,libc6-dev \
  bookworm "$tmp/root.tar"
podman import -q "$tmp/root.tar" "$img" >/dev/null
rm -f "$tmp/root.tar"

step "a home: the checkout (as a fresh clone has it) and the crate cache"
home=$tmp/home
mkdir -p "$home/sluice" "$home/.cargo"
git archive HEAD | tar -x -C "$home/sluice"
cp -a "${CARGO_HOME:-$HOME/.cargo}/registry" "$home/.cargo/"
chown -R 1000:1000 "$home"
sysroot=$(rustc --print sysroot)

step "in the container, as uid 1000, no network"
podman run --name "$id" --rm --network none --user 1000:1000 \
  -e HOME=/home/u -e PATH=/home/u/.cargo/bin:/opt/rust/bin:/usr/bin:/bin \
  -e CARGO_NET_OFFLINE=true -e CARGO_BUILD_JOBS=2 -e CARGO_INCREMENTAL=0 \
  -v "$home:/home/u" -v "$sysroot:/opt/rust:ro" -w /home/u/sluice \
  "$img" bash -euo pipefail -c '
    for t in npm node git python3 chromium nft ip podman sudo; do
      if command -v "$t" >/dev/null; then echo "FAIL $t is here: not a bare machine"; exit 1; fi
    done
    echo "uid $(id -u), no npm, node, git, python3, chromium, nft, ip"

    echo "== cargo install --locked --path ."
    cargo install --locked --path .
    size=$(stat -c %s "$HOME/.cargo/bin/sluice")
    echo "sluice $(sluice --version): $size bytes"
    [ "$size" -lt 20000000 ] || { echo "FAIL the binary is not under 20 MB"; exit 1; }

    echo "== quick start: sluice run on the embedded default"
    mkdir -p "$HOME/quick" && cd "$HOME/quick"
    sluice run > run.log 2>&1 &
    for _ in $(seq 200); do
      curl -s -o /dev/null http://127.0.0.1:3128/ && break
      sleep 0.05
    done
    said=$(curl -s -x http://127.0.0.1:3128 http://example.com/)
    echo "$said"
    case "$said" in
      *"refused GET http://example.com/"*"not on the task'"'"'s allow-list"*) ;;
      *) echo "FAIL no refusal sentence"; cat run.log; exit 1 ;;
    esac
    for _ in $(seq 200); do
      grep -q "\"rule\":\"not-allowed\"" sluice-state/tasks/default/access.jsonl 2>/dev/null && break
      sleep 0.05
    done
    tail -1 sluice-state/tasks/default/access.jsonl
    grep -q "\"rule\":\"not-allowed\"" sluice-state/tasks/default/access.jsonl
    kill %1
    wait || true

    echo "== cargo test --locked"
    cd "$HOME/sluice"
    cargo test --locked
  '
