#!/usr/bin/env bash
# bench/memory.sh: resident memory of kuma-dp beside DNS servers that
# answer the same names, in one run, on this machine.
#
# For each N in SIZES, every server serves svc-<i>.mesh (A + AAAA) for i < N:
#   kuma-dp         `kuma-dp run --envoy=false` (this tree's binary) with a mesh of N
#                   one-inbound dataplanes (service svc-<i>), whose default <service>.mesh
#                   names are those hostnames, plus its own dataplane
#   coredns-hosts   CoreDNS v1.15.0 (from the Go module proxy) with the hosts plugin
#   miekg           bench/miekgdns: a bare github.com/miekg/dns map server
#   nsd             nsd from the zone file, one server process (when nsd is installed)
#   dnsmasq         dnsmasq with the hosts file (when dnsmasq is installed)
#   kuma-dp-baseline  with BASELINE=/path/to/another/kuma-dp: that build, run as kuma-dp
#   kuma-dp-reach   kuma-dp on the same mesh, its dataplane listing REACH (10) services
#                   (svc-0 ...) in transparentProxying.reachableServices: it keeps only
#                   their dataplanes (no dnsperf run: the other names are not its own)
# and SIZES may hold "example": kuma-dp alone with the bundled example mesh (testdata/mesh).
# LAYOUT=files writes the mesh as a file per dataplane (as a directory kept in git, or
# synced from one, may be) instead of one inventory file (LAYOUT=file, the default).
#
# The Go servers are built as their releases ship (CGO_ENABLED=0, -trimpath, -ldflags
# "-s -w": static binaries, as the kuma-dp image and CoreDNS's releases are). Run as root,
# the kuma-dp servers run as AGENT_USER (nobody), a user that does not own the binary, as
# the image runs kuma-dp (UID 5678, the binary root's): the kernel then treats the
# binary's pages as it does in a pod (docs/run.md, Memory).
#
# Servers run one after another, each pinned to SERVER_CPU (a Go server then runs with
# GOMAXPROCS=1). Per server: the time from start to the first answer, then after SETTLE
# seconds VmRSS summed over its processes ("load"; in brackets RssAnon, the part that is
# not the pages of its own binary, which every process running that binary shares), its
# peak VmHWM and, sampled every millisecond from its start to that reading (bench/rsspeak),
# its largest RSS and largest anonymous part while starting and loading, then dnsperf on
# LOADGEN_CPU for DURATION seconds over existing names and VmRSS again ("after queries");
# for kuma-dp also after a touch of the (unchanged) inventory and SETTLE seconds. "anonymous
# bytes per name" is the anonymous part after load over N, the server's fixed part
# included (kuma-dp's ~5.5 MiB is ~58 bytes a name at 100,000).
# BUSY=1 keeps the other core busy (a shell loop on LOADGEN_CPU) while each server starts,
# for start times on a busy node.
#
# Knobs: SIZES SETTLE DURATION CLIENTS SERVER_CPU LOADGEN_CPU PORT_BASE BENCH SERVERS BUSY
#   BASELINE REACH AGENT_USER LAYOUT
# Example: SIZES="100000 10000 example" bench/memory.sh
# Needs: go, dig, taskset, ss; dnsperf (apt-get install dnsperf) for the query runs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=${BENCH:-/tmp/kuma-dp-bench-memory}
SIZES=${SIZES:-"100000 10000 example"}
SETTLE=${SETTLE:-5}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-10}
SERVER_CPU=${SERVER_CPU:-1}
LOADGEN_CPU=${LOADGEN_CPU:-0}
PORT_BASE=${PORT_BASE:-25400}
BUSY=${BUSY:-0}
SERVERS=${SERVERS:-"kuma-dp kuma-dp-reach coredns-hosts miekg nsd dnsmasq"}
BASELINE=${BASELINE:-}
REACH=${REACH:-10}
LAYOUT=${LAYOUT:-file}
[[ $LAYOUT == file || $LAYOUT == files ]] || { echo "bench-memory: LAYOUT must be file or files (value \"$LAYOUT\")" >&2; exit 2; }
DATA=$BENCH/data/$LAYOUT
# Run as root, the kuma-dp servers run as this user (the binary must be readable by it).
AGENT_USER=${AGENT_USER-$([[ $(id -u) == 0 ]] && echo nobody)}
[[ -n $BASELINE && " $SERVERS " != *" kuma-dp-baseline "* ]] && SERVERS="kuma-dp-baseline $SERVERS"
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin

log() { echo "[$(date +%T)] $*" >&2; }
# shellcheck source=bench/build.sh
source "$ROOT/bench/build.sh"
for t in dig taskset ss; do command -v $t >/dev/null || { echo "bench-memory: $t is missing" >&2; exit 1; }; done
HAVE_DNSPERF=$(command -v dnsperf || true)
[[ -n $HAVE_DNSPERF ]] || log "no dnsperf: the 'after queries' column stays empty (apt-get install dnsperf)"

mkdir -p "$BENCH/bin" "$BENCH/run"
log "building kuma-dp, vipdns (data), miekgdns and rsspeak"
go_build "$BENCH/bin" ./cmd/kuma-dp ./bench/vipdns ./bench/miekgdns ./bench/rsspeak
[[ $SERVERS == *coredns-hosts* ]] && build_coredns "$BENCH/bin"

# gen N: hosts + queries (vipdns --gen), a zone file, and the kuma-dp mesh of N dataplanes.
gen() {
  local n=$1 d=$DATA/$1
  [[ -s $d/queries.txt ]] && return 0
  mkdir -p "$d/mesh/policies"
  "$BENCH/bin/vipdns" --gen "$n" --out "$d"
  awk 'BEGIN { print "$ORIGIN mesh.\n$TTL 3600\n@ IN SOA ns.mesh. hostmaster.mesh. 1 7200 3600 1209600 3600\n@ IN NS ns.mesh.\nns IN A 127.0.0.1" }
       { sub(/\.mesh$/, "", $2); print $2, "IN", ($1 ~ /:/ ? "AAAA" : "A"), $1 }' "$d/hosts" > "$d/db.mesh"
  printf 'type: Dataplane\nmesh: default\nname: bench-client\nnetworking:\n  address: 127.0.0.1\n  inbound:\n  - port: 7000\n    tags:\n      kuma.io/service: bench-client\n' > "$d/mesh/dp.yaml"
  awk -v n="$n" -v files="$([[ $LAYOUT == files ]] && echo "$d/mesh/policies")" 'BEGIN {
    for (i = 0; i < n; i++) {
      doc = sprintf("type: Dataplane\nmesh: default\nname: svc-%d-1\nnetworking:\n  address: 10.%d.%d.%d\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: svc-%d\n", i, int(i / 62500) + 1, int(i / 250) % 250, i % 250 + 1, i)
      if (files == "") { printf "%s---\n", doc; continue }
      f = sprintf("%s/svc-%06d.yaml", files, i); printf "%s", doc > f; close(f)
    } }' > "$([[ $LAYOUT == files ]] && echo /dev/null || echo "$d/mesh/policies/dataplanes.yaml")"
}

declare -A PORT
i=0
for s in $SERVERS; do PORT[$s]=$((PORT_BASE + i)); i=$((i + 1)); done

# server_cmd NAME SIZE RUNDIR: the foreground command serving SIZE's names on PORT[NAME].
server_cmd() {
  local name=$1 size=$2 dir=$3 p=${PORT[$1]} d=$DATA/$2
  case $name in
  kuma-dp|kuma-dp-baseline|kuma-dp-reach)
    local dp=$d/mesh/dp.yaml pol=$d/mesh/policies bin=$BENCH/bin/kuma-dp
    [[ $size == example ]] && dp=$dir/mesh/dataplane.yaml pol=$dir/mesh/policies
    if [[ $name == kuma-dp-reach ]]; then
      dp=$dir/dp-reach.yaml
      { printf 'type: Dataplane\nmesh: default\nname: bench-client\nnetworking:\n  address: 127.0.0.1\n  inbound:\n  - port: 7000\n    tags:\n      kuma.io/service: bench-client\n  transparentProxying:\n    reachableServices: ['
        for ((r = 0; r < REACH; r++)); do printf '%ssvc-%d' "$([[ $r -gt 0 ]] && echo ', ')" "$r"; done
        printf ']\n'; } > "$dp"
    fi
    [[ $name == kuma-dp-baseline ]] && bin=$BASELINE
    echo "${AGENT_USER:+setpriv --reuid=$(id -u "$AGENT_USER") --regid=$(id -g "$AGENT_USER") --clear-groups }$bin run --dataplane-file $dp --policies-dir $pol --envoy=false --dns-address 127.0.0.1 \
--dns-proxy-port $p --dns-upstream 127.0.0.1:9 --admin-address 127.0.0.1:0 --work-dir $dir/work \
--ready-file $dir/ready.json --drain-time 0s --log-level warn" ;;
  coredns-hosts)
    printf 'mesh:%s {\n    bind 127.0.0.1\n    errors\n    hosts %s mesh {\n        reload 0\n    }\n}\n' "$p" "$d/hosts" > "$dir/Corefile"
    echo "$BENCH/bin/coredns -quiet -conf $dir/Corefile" ;;
  miekg) echo "$BENCH/bin/miekgdns --hosts $d/hosts --addr 127.0.0.1:$p" ;;
  nsd)
    printf 'server:\n  ip-address: 127.0.0.1@%s\n  port: %s\n  server-count: 1\n  username: ""\n  chroot: ""\n  zonesdir: "%s"\n  database: ""\n  pidfile: "%s/nsd.pid"\n  xfrdfile: "%s/xfrd.state"\n  zonelistfile: "%s/zone.list"\n  do-ip6: no\n  verbosity: 0\nremote-control:\n  control-enable: no\nzone:\n  name: "mesh"\n  zonefile: "%s"\n' \
      "$p" "$p" "$dir" "$dir" "$dir" "$dir" "$d/db.mesh" > "$dir/nsd.conf"
    echo "nsd -d -c $dir/nsd.conf" ;;
  dnsmasq)
    echo "dnsmasq --keep-in-foreground --conf-file=/dev/null --user=root --pid-file= --port=$p \
--listen-address=127.0.0.1 --bind-interfaces --no-resolv --no-poll --no-hosts --addn-hosts=$d/hosts \
--local=/mesh/ --cache-size=0" ;;
  *) echo "bench-memory: unknown server $name" >&2; return 1 ;;
  esac
}

tree() { local p; echo "$1"; for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree "$p"; done; }
rss_kib() { local s=0 p v; for p in $(tree "$1"); do v=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null); s=$((s + ${v:-0})); done; echo $s; }
anon_kib() { local s=0 p v; for p in $(tree "$1"); do v=$(awk '/^RssAnon:/ {print $2}' "/proc/$p/status" 2>/dev/null); s=$((s + ${v:-0})); done; echo $s; }
hwm_kib() { local s=0 p v; for p in $(tree "$1"); do v=$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null); s=$((s + ${v:-0})); done; echo $s; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

PID=""; BUSYPID=""; SAMPLERPID=""
stop() {
  [[ -n $SAMPLERPID ]] && { kill "$SAMPLERPID" 2>/dev/null || true; wait "$SAMPLERPID" 2>/dev/null || true; SAMPLERPID=""; }
  [[ -n $BUSYPID ]] && { kill "$BUSYPID" 2>/dev/null || true; wait "$BUSYPID" 2>/dev/null || true; BUSYPID=""; }
  [[ -n $PID ]] || return 0
  kill "$PID" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=""
}
trap stop EXIT

ROWS=$BENCH/run/rows.tsv
: > "$ROWS"
for size in $SIZES; do
  [[ $size == example ]] || gen "$size"
  for s in $SERVERS; do
    [[ $size == example && $s != kuma-dp* ]] && continue
    [[ $size == example && $s == kuma-dp-reach ]] && continue
    case $s in nsd|dnsmasq) command -v "$s" >/dev/null || { log "$s is not installed: skipped"; continue; } ;; esac
    if [[ -n $(ss -Hlun "sport = :${PORT[$s]}") ]]; then
      echo "bench-memory: port ${PORT[$s]} is in use (set PORT_BASE)" >&2; exit 1
    fi
    dir=$BENCH/run/$size/$s
    rm -rf "$dir"; mkdir -p "$dir/work"
    [[ $size == example ]] && cp -r "$ROOT/testdata/mesh" "$dir/mesh"
    [[ $s == kuma-dp* && -n $AGENT_USER ]] && chown -R "$AGENT_USER" "$dir"
    cmd=$(server_cmd "$s" "$size" "$dir")
    if [[ $BUSY == 1 ]]; then
      taskset -c "$LOADGEN_CPU" bash -c 'while :; do :; done' & BUSYPID=$!
    fi
    t0=$(date +%s%N)
    # shellcheck disable=SC2086  # the command line is split on purpose
    taskset -c "$SERVER_CPU" $cmd > "$dir/log" 2>&1 &
    PID=$!
    taskset -c "$LOADGEN_CPU" "$BENCH/bin/rsspeak" --pid "$PID" > "$dir/peak.txt" 2>&1 &
    SAMPLERPID=$!
    ok=""
    for _ in $(seq 12000); do   # up to 120 s
      if dig +tries=1 +time=1 +short @127.0.0.1 -p "${PORT[$s]}" svc-0.mesh A 2>/dev/null | grep -q '^[0-9]'; then ok=1; break; fi
      if [[ $size == example && -s $dir/ready.json ]]; then ok=1; break; fi
      kill -0 "$PID" 2>/dev/null || break
      sleep 0.01
    done
    t1=$(date +%s%N)
    [[ -n $BUSYPID ]] && { kill "$BUSYPID"; wait "$BUSYPID" 2>/dev/null || true; BUSYPID=""; }
    if [[ -z $ok ]]; then log "$s (N=$size) did not answer: $(tail -3 "$dir/log")"; stop; continue; fi
    start_ms=$(( (t1 - t0) / 1000000 ))
    sleep "$SETTLE"
    load=$(rss_kib "$PID") anon=$(anon_kib "$PID")
    kill "$SAMPLERPID" 2>/dev/null || true; wait "$SAMPLERPID" 2>/dev/null || true; SAMPLERPID=""
    read -r peak_rss peak_anon _ < "$dir/peak.txt" || true
    after=""
    if [[ -n $HAVE_DNSPERF && $size != example && $s != kuma-dp-reach ]]; then
      taskset -c "$LOADGEN_CPU" dnsperf -s 127.0.0.1 -p "${PORT[$s]}" -d "$DATA/$size/queries.txt" \
        -c "$CLIENTS" -l "$DURATION" -Q 1000000 > "$dir/dnsperf.txt" 2>&1 || true
      after="$(mib "$(rss_kib "$PID")") ($(mib "$(anon_kib "$PID")"))"
      qps=$(awk '/Queries per second/ {printf "%.0f", $4}' "$dir/dnsperf.txt")
      after="$after, $qps qps"
    fi
    touched=""
    if [[ $s == kuma-dp* ]]; then
      if [[ $size == example ]]; then touch "$dir"/mesh/policies/*; else find "$DATA/$size/mesh/policies" -type f -exec touch {} +; fi
      sleep "$SETTLE"
      touched="$(mib "$(rss_kib "$PID")") ($(mib "$(anon_kib "$PID")"))"
    fi
    hwm=$(hwm_kib "$PID")
    sampled="$(mib "${peak_rss:-0}") ($(mib "${peak_anon:-0}"))"
    per=-
    [[ $size =~ ^[0-9]+$ ]] && per=$((anon * 1024 / size))
    printf '%s\t%s\t%s\t%s (%s)\t%s\t%s\t%s\t%s\t%s\n' "$size" "$s" "$start_ms" "$(mib "$load")" "$(mib "$anon")" "$per" "$(mib "$hwm")" "$sampled" "${after:--}" "${touched:--}" >> "$ROWS"
    log "N=$size $s: first answer after ${start_ms} ms, RSS $(mib "$load") MiB (anonymous $(mib "$anon"), peak $(mib "$hwm"), sampled while loading $sampled), after queries ${after:--}, after a touch ${touched:--}"
    stop
  done
done

echo
echo "one run, $(date -u +%F), $(nproc) CPUs, servers on CPU $SERVER_CPU$([[ $BUSY == 1 ]] && echo ", the other core busy while starting")$([[ $LAYOUT == files ]] && echo ", the mesh a file per dataplane"); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| N | server | ms to first answer | RSS MiB after load (anonymous) | anonymous bytes per name | peak (VmHWM) MiB | peak sampled while loading MiB (anonymous) | RSS MiB after ${DURATION}s of queries (anonymous) | RSS MiB after a touch (anonymous) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }' "$ROWS"
