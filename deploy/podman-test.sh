#!/usr/bin/env bash
# Proves deploy/Dockerfile and deploy/compose.yaml for real, with podman and
# podman-compose, offline (no image registry): builds the runtime stage of
# deploy/Dockerfile on local base images, brings the compose topology up
# with deploy/compose.test.yaml (images and sluice's config swapped; the
# networks, volumes and users are compose.yaml's), and checks from inside
# the task container that sluice is its only way out.
#
#   deploy/podman-test.sh target/debug/sluice      (as root)
#
# SLUICE_COMPOSE_FILE=path runs another compose file in place of
# deploy/compose.yaml (to try a change to it); the override still applies.
#
# Local images, made here and removed at the end:
#   base    `podman import` of the binary's shared libraries (ldd), the
#           system CA roots and an /etc/passwd + /etc/group with nonroot
#           65532, like distroless cc-debian12:nonroot
#   build   busybox plus stand-ins for cargo and strip that hand out the
#           given binary: deploy/Dockerfile's build stage runs as written,
#           minus the compiler
#   busybox (busybox-static) for the task and the upstream containers
# Everything runs on the container networks compose creates; the upstream
# is a busybox httpd on `egress`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:?usage: deploy/podman-test.sh BINARY}")
[ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run as root (rootful podman)" >&2; exit 2; }
t0=$SECONDS

step() { printf '\n== %s (%ss)\n' "$*" "$((SECONDS - t0))"; }
ok() { printf 'ok   %s\n' "$*"; }
fail() {
  printf 'FAIL %s\n' "$*" >&2
  exit 1
}

# --- tools --------------------------------------------------------------
step "tools"
pkgs=()
command -v podman >/dev/null || pkgs+=(podman)
command -v runc >/dev/null || pkgs+=(runc)
dpkg -s busybox-static >/dev/null 2>&1 || pkgs+=(busybox-static)
if [ ${#pkgs[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
command -v podman-compose >/dev/null || python3 -m pip install -q podman-compose
busybox=$(command -v busybox)
file -L "$busybox" 2>/dev/null | grep -q 'statically linked' ||
  ldd "$busybox" 2>&1 | grep -q 'not a dynamic' ||
  fail "$busybox is not static (Debian package busybox-static)"
echo "$(podman --version), $(runc --version | head -1), $(podman-compose --version 2>/dev/null | head -1)"

id=sluicepodtest$$
tmp=$(mktemp -d "/tmp/$id.XXXXXX")
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
base_img=localhost/$id-base:test
build_img=localhost/$id-build:test
bb_img=localhost/$id-busybox:test
sluice_img=localhost/$id-sluice:test
export SLUICE_TEST_IMAGE=$sluice_img SLUICE_TEST_BUSYBOX=$bb_img
export SLUICE_TEST_CONFIG=$tmp/sidecar.toml
compose_file=${SLUICE_COMPOSE_FILE:-deploy/compose.yaml}
compose() { # bounded: podman-compose waits on podman
  timeout 120 podman-compose -p "$id" -f "$compose_file" -f deploy/compose.test.yaml "$@"
}

# Always: the project's containers, volumes and networks, then our images.
cleanup() {
  rc=$?
  set +e
  printf '\n== teardown\n'
  compose down -v -t 2 >"$tmp/down.log" 2>&1 || cat "$tmp/down.log" >&2
  # Whatever down left (a failed up leaves some): by the project's label.
  podman ps -aq --filter "label=io.podman.compose.project=$id" | xargs -r podman rm -f -t 0 >/dev/null
  podman volume ls -q --filter "label=io.podman.compose.project=$id" | xargs -r podman volume rm -f >/dev/null
  podman network ls -q --filter "label=io.podman.compose.project=$id" | xargs -r podman network rm -f >/dev/null
  for i in "$sluice_img" "$build_img" "$base_img" "$bb_img"; do
    podman image exists "$i" && podman rmi -f "$i" >/dev/null
  done
  left=$(podman ps -aq --filter "label=io.podman.compose.project=$id"
    podman volume ls -q --filter "label=io.podman.compose.project=$id"
    podman network ls -q --filter "label=io.podman.compose.project=$id"
    podman images -q --filter "reference=localhost/$id-*")
  [ -z "$left" ] || echo "teardown left: $left" >&2
  rm -rf "$tmp"
  echo "done in $((SECONDS - t0))s"
  exit "$rc"
}
trap cleanup EXIT

# --- images -------------------------------------------------------------
step "images"
# busybox: the static binary and its applets.
mkdir -p "$tmp/bb/bin" "$tmp/bb/tmp" "$tmp/bb/etc"
cp "$busybox" "$tmp/bb/bin/busybox"
for a in $("$busybox" --list); do
  [ "$a" = busybox ] || ln -s busybox "$tmp/bb/bin/$a"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$tmp/bb/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\n' > "$tmp/bb/etc/group"
chmod 1777 "$tmp/bb/tmp"
tar --numeric-owner --owner=0 --group=0 -C "$tmp/bb" -cf "$tmp/bb.tar" .
podman import -q --change 'ENV PATH=/bin' "$tmp/bb.tar" "$bb_img" >/dev/null

# build: busybox + cargo/strip stand-ins + the binary (stripped here if we
# can: the image then weighs what a release build would).
mkdir -p "$tmp/build/usr/local/bin" "$tmp/build/prebuilt"
cp -a "$tmp/bb/." "$tmp/build/"
strip -o "$tmp/build/prebuilt/sluice" "$bin" 2>/dev/null || cp "$bin" "$tmp/build/prebuilt/sluice"
cat > "$tmp/build/usr/local/bin/cargo" <<'EOF'
#!/bin/sh
# deploy/podman-test.sh's stand-in: "builds" the prebuilt binary.
mkdir -p target/release && cp /prebuilt/sluice target/release/sluice
EOF
printf '#!/bin/sh\nexit 0\n' > "$tmp/build/usr/local/bin/strip"
chmod 755 "$tmp/build/usr/local/bin/"*
tar --numeric-owner --owner=0 --group=0 -C "$tmp/build" -cf "$tmp/build.tar" .
podman import -q --change 'ENV PATH=/usr/local/bin:/bin' "$tmp/build.tar" "$build_img" >/dev/null

# base: what distroless cc-debian12:nonroot gives: glibc, libgcc, the CA
# roots, users root/nobody/nonroot (65532), a /tmp.
mkdir -p "$tmp/base/etc/ssl/certs" "$tmp/base/tmp" "$tmp/base/home/nonroot" "$tmp/base/var/lib"
for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
  cp -L --parents "$lib" "$tmp/base/"
done
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$tmp/base/etc/ssl/certs/"
cat > "$tmp/base/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' > "$tmp/base/etc/group"
chmod 1777 "$tmp/base/tmp"
chown 65532:65532 "$tmp/base/home/nonroot"
tar --numeric-owner -C "$tmp/base" -cf "$tmp/base.tar" .
podman import -q --change 'USER 65532:65532' "$tmp/base.tar" "$base_img" >/dev/null

# sluice: deploy/Dockerfile's runtime stage, as written. --format docker:
# the OCI format has no HEALTHCHECK and buildah drops it.
timeout 120 podman build -q --pull=never --network none --layers=false --format docker \
  -f deploy/Dockerfile --target runtime \
  --build-arg BUILD_IMAGE="$build_img" --build-arg RUNTIME_IMAGE="$base_img" \
  -t "$sluice_img" . >/dev/null
cfg=$(podman image inspect --format '{{.Config.User}}|{{if .Config.Healthcheck}}{{json .Config.Healthcheck.Test}}{{end}}|{{json .Config.Entrypoint}}|{{json .Config.Cmd}}' "$sluice_img")
echo "image $sluice_img: $cfg"
case $cfg in
  '65532:65532|["CMD","/usr/local/bin/sluice","healthcheck",'*'|["/usr/local/bin/sluice"]|["run","--config","/etc/sluice/sluice.toml"]') ;;
  *) fail "the image's user/healthcheck/entrypoint/cmd are not deploy/Dockerfile's" ;;
esac
mnt=$(podman image mount "$sluice_img")
perms=$(cd "$mnt" && stat -c '%u:%g %a %n' var/lib var/lib/sluice var/lib/sluice-ca etc/sluice/sluice.toml usr/local/bin/sluice)
podman image unmount "$sluice_img" >/dev/null
echo "$perms"
for d in var/lib/sluice var/lib/sluice-ca; do
  echo "$perms" | grep -qx "65532:65532 755 $d" || fail "the image's /$d is not owned by 65532"
done
ok "image built from deploy/Dockerfile (runtime stage): user 65532, HEALTHCHECK, ENTRYPOINT, CMD; state folders owned by 65532"

# --- topology -----------------------------------------------------------
ctr() { # container of a compose service
  podman ps -a --filter "label=io.podman.compose.project=$id" \
    --filter "label=com.docker.compose.service=$1" --format '{{.Names}}' | head -1
}
step "compose up"
# The upstream first: its address goes into sluice's config, pinned with
# [resolver.hosts] (sluice resolves; the task never does).
started_at=$(date +%s)
compose up -d upstream >"$tmp/up1.log" 2>&1 || { cat "$tmp/up1.log"; fail "compose up upstream"; }
up_ctr=$(ctr upstream)
up_ip=$(podman inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$up_ctr")
[ -n "$up_ip" ] || fail "the upstream has no address"
echo "upstream $up_ctr at $up_ip (network egress)"

# sidecar.toml, with the upstream allowed instead of the public registries.
python3 - deploy/sidecar.toml "$SLUICE_TEST_CONFIG" "$up_ip" <<'PY'
import re, sys
src, dst, ip = sys.argv[1:]
text = open(src).read()
text, n = re.subn(r'(?ms)^allow = \[.*?^\]\n',
    'allow = ["upstream.sluice.test"]\nallow_private = ["%s/32"]\n' % ip, text)
assert n == 1, "no allow list in sidecar.toml"
text += '\n[resolver.hosts]\n"upstream.sluice.test" = ["%s"]\n' % ip
open(dst, "w").write(text)
PY
chmod 644 "$SLUICE_TEST_CONFIG"
"$bin" check --config "$SLUICE_TEST_CONFIG" >/dev/null || fail "sluice check of the test config"
diff -u deploy/sidecar.toml "$SLUICE_TEST_CONFIG" | sed -n '3,$p' || true

compose up -d >"$tmp/up2.log" 2>&1 || { cat "$tmp/up2.log"; fail "compose up"; }
# Expected here: podman's healthcheck timers need systemd; podman < 4.6
# makes podman-compose ignore `condition: service_healthy`.
grep -i 'warn\|error' "$tmp/up2.log" || true
sl_ctr=$(ctr sluice)
task_ctr=$(ctr task)
if [ "$(ctr upstream)" != "$up_ctr" ] ||
  [ "$(podman inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$up_ctr")" != "$up_ip" ]; then
  fail "the upstream was recreated with another address"
fi
echo "containers: $sl_ctr $task_ctr $up_ctr"

# --- checks -------------------------------------------------------------
# Each prints an ok/FAIL line per assertion; a failed one goes on to the
# next check, and the script fails at the end.
failed=()
bad() {
  printf 'FAIL %s\n' "$*"
  failed+=("$*")
  return 1
}
state_vol=${id}_sluice-state
ca_vol=${id}_sluice-ca
state_dir=$(podman volume inspect --format '{{.Mountpoint}}' "$state_vol")
ca_dir=$(podman volume inspect --format '{{.Mountpoint}}' "$ca_vol")
tx() { podman exec "$task_ctr" "$@"; } # in the task container

check1() {
  # podman schedules healthchecks with systemd timers; without systemd
  # none run, so run the container's own healthcheck (compose.yaml's) here,
  # every second, for at most 60 s. The status is podman's.
  local health='' _
  for _ in $(seq 60); do
    podman healthcheck run "$sl_ctr" >/dev/null 2>&1 || true
    health=$(podman inspect --format '{{.State.Health.Status}}' "$sl_ctr")
    [ "$health" = healthy ] && break
    [ "$(podman inspect --format '{{.State.Running}}' "$sl_ctr")" = true ] || break
    sleep 1
  done
  if [ "$health" != healthy ]; then
    podman logs "$sl_ctr" 2>&1 | tail -20
    bad "sluice is not healthy: ${health:-no status}"
    return
  fi
  ok "sluice: podman health status $health ($((SECONDS - t0))s)"
  podman top "$sl_ctr" user group huser comm args
  local pid ids
  pid=$(podman inspect --format '{{.State.Pid}}' "$sl_ctr")
  ids=$(awk '/^(Uid|Gid):/ { printf "%s %s %s %s %s; ", $1, $2, $3, $4, $5 }' "/proc/$pid/status")
  echo "pid $pid: $ids"
  [ "$ids" = "Uid: 65532 65532 65532 65532; Gid: 65532 65532 65532 65532; " ] ||
    bad "sluice does not run as 65532:65532" || return
  ok "sluice runs as uid/gid 65532 (real, effective, saved, fs), not root"
  # compose.yaml's hardening, as podman applied it.
  local caps nnp ro
  caps=$(awk '/^CapEff:/ { print $2 }' "/proc/$pid/status")
  nnp=$(awk '/^NoNewPrivs:/ { print $2 }' "/proc/$pid/status")
  ro=$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$sl_ctr")
  [ "$caps" = 0000000000000000 ] && [ "$nnp" = 1 ] && [ "$ro" = true ] ||
    bad "sluice's hardening: CapEff $caps, NoNewPrivs $nnp, read-only root $ro" || return
  ok "no capabilities (CapEff $caps), NoNewPrivs $nnp, read-only root filesystem"
  # Fresh: made by this run's compose up, from the image's folders.
  local v created owners
  for v in "$state_vol" "$ca_vol"; do
    created=$(podman volume inspect --format '{{.CreatedAt.Unix}}' "$v")
    [ "$created" -ge "$started_at" ] || bad "$v was not created by this run" || return
  done
  owners=$(stat -c '%u:%g %n' "$state_dir" "$state_dir"/* "$ca_dir" "$ca_dir"/*)
  echo "$owners"
  echo "$owners" | awk '$1 != "65532:65532" { bad = 1 } END { exit bad }' ||
    bad "the volumes or what sluice wrote there are not owned by 65532" || return
  ok "fresh volumes $state_vol and $ca_vol owned by 65532; sluice wrote $(cd "$state_dir" && echo *) and $(cd "$ca_dir" && echo *)"
}

check2() {
  local want got size
  want=$(podman exec "$up_ctr" sha256sum /www/blob | cut -d' ' -f1)
  # shellcheck disable=SC2016 # expanded in the task
  tx sh -c 'echo "task: http_proxy=$http_proxy"; timeout 20 wget -q -O /tmp/blob http://upstream.sluice.test/blob' ||
    bad "wget http://upstream.sluice.test/blob through sluice failed" || return
  got=$(tx sha256sum /tmp/blob | cut -d' ' -f1)
  size=$(tx stat -c %s /tmp/blob)
  [ "$got" = "$want" ] || bad "the bytes differ: sha256 $got != $want" || return
  ok "http://upstream.sluice.test/blob via \$http_proxy: $size bytes, sha256 $got as served"
}

# A command in the task that must fail, and fail for want of a network
# (not by crashing: busybox 1.35's static wget segfaults with -T here).
# Prints its last line of output.
fails_unreachable() {
  local out rc
  out=$(tx timeout 10 "$@" 2>&1) && rc=0 || rc=$?
  case $rc in
    0)
      echo "$out" | grep -E '^(Address|Connecting|Name)' | tail -1 | xargs
      return 1
      ;;
    124 | 143) echo "no answer in 10 s" && return 0 ;;
    1)
      echo "$out" | grep . | tail -1
      echo "$out" | grep -qiE "can't connect|unreachable|timed out|refused|no servers|can't find|bad address" ;;
    *) echo "$(echo "$out" | grep . | tail -1) (exit status $rc)" && return 1 ;;
  esac
}

check3() {
  local out
  echo "task addresses: $(tx ip -o -4 addr show | awk '{print $2, $4}' | xargs); routes: $(tx ip route | paste -sd ';')"
  out=$(fails_unreachable wget -Y off -O /dev/null "http://$up_ip/blob") ||
    bad "the task reached the upstream directly at $up_ip, or wget failed otherwise: $out" || return
  ok "direct http://$up_ip/blob (no proxy) fails: $out"
}

check4() {
  local name out gw server
  echo "task /etc/resolv.conf: $(tx grep -v '^#' /etc/resolv.conf | xargs)"
  # With its resolv.conf. Names only: nothing here may leave the machine.
  for name in sluice upstream.sluice.test "$up_ctr"; do
    out=$(fails_unreachable nslookup "$name") || { bad "the task resolved $name: $out"; continue; }
    ok "nslookup $name fails: $out"
  done
  # Nor with another server it can reach: podman runs aardvark-dns on each
  # network's gateway address, and it forwards any name it does not know to
  # the host's resolvers. Ask it for one it answers itself.
  gw=$(podman network inspect --format '{{range .Subnets}}{{.Gateway}} {{end}}' "${id}_task-net" |
    tr ' ' '\n' | grep -v -e '^$' -e nil || true)
  [ -n "$gw" ] || { ok "task-net has no gateway, so no aardvark-dns address"; return; }
  for server in $gw; do
    out=$(fails_unreachable nslookup sluice "$server") || {
      bad "the task resolves names with aardvark-dns on task-net's gateway $server (which forwards other names to the host's resolvers): $out"
      continue
    }
    ok "nslookup sluice $server (task-net's gateway) fails: $out"
  done
}

check5() {
  local listing state_files f found
  listing=$(tx ls -A /sluice-ca | sort | xargs)
  [ "$listing" = "ca-bundle.pem ca.pem" ] || bad "/sluice-ca holds: ${listing:-nothing}" || return
  ok "the task's /sluice-ca holds only: $listing"
  if tx sh -c ': > /sluice-ca/x' 2>/dev/null; then bad "/sluice-ca is writable by the task"; return; fi
  ok "/sluice-ca is read-only in the task"
  # What the task must not see is on the state volume.
  state_files=$(cd "$state_dir" && find . -mindepth 1 | sort | xargs)
  echo "state volume, host side: $state_files"
  for f in ./admin.sock ./ca.key; do
    case " $state_files " in *" $f "*) ;; *) bad "no $f on the state volume" || return ;; esac
  done
  found=$(tx find / \( -path /proc -o -path /sys \) -prune -o \( -name admin.sock \
    -o -name 'access.jsonl*' -o -name 'taint.jsonl*' -o -name ca.key \) -print 2>/dev/null || true)
  [ -z "$found" ] || bad "the task sees: $found" || return
  if tx ls -d /var/lib/sluice >/dev/null 2>&1; then bad "the task has /var/lib/sluice"; return; fi
  # The task's mounts name the volumes they come from (the CA one does).
  tx grep -q "/$ca_vol/" /proc/self/mountinfo || bad "cannot tell the task's volumes from its mountinfo" || return
  if tx grep "/$state_vol/" /proc/self/mountinfo; then bad "the state volume is mounted in the task"; return; fi
  ok "no admin.sock, access/taint log or ca.key anywhere in the task; the state volume is not mounted there"
}

check6() {
  local out row _
  out=$(tx timeout 20 wget -S -q -O /dev/null http://blocked.sluice.test/ 2>&1 || true)
  echo "$out" | grep -q 'HTTP/1.1 403' || { echo "$out"; bad "no 403 for http://blocked.sluice.test/"; return; }
  ok "http://blocked.sluice.test/ via \$http_proxy: $(echo "$out" | grep -m1 'HTTP/1.1 403' | xargs)"
  for _ in $(seq 10); do
    row=$(grep -h 'blocked.sluice.test' "$state_dir"/tasks/task/access.jsonl 2>/dev/null | tail -1)
    [ -n "$row" ] && break
    sleep 0.5
  done
  [ -n "$row" ] || bad "no access-log row for blocked.sluice.test" || return
  ok "its access-log row: $row"
}

step "1: sluice comes up healthy, as its non-root user, on fresh volumes"
check1 || true
step "2: the task reaches the allowed upstream through sluice"
check2 || true
step "3: the task cannot reach the upstream directly"
check3 || true
step "4: the task has no DNS"
check4 || true
step "5: the task cannot see sluice's state"
check5 || true
step "6: a not-allowed host is refused with 403"
check6 || true

if [ ${#failed[@]} -gt 0 ]; then
  step "${#failed[@]} check(s) failed"
  printf '  - %s\n' "${failed[@]}"
  exit 1
fi
step "all checks passed"
