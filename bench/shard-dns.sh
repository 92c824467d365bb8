#!/usr/bin/env bash
# The control plane's shard DNS (package authdns) beside nsd and CoreDNS's `file` plugin
# serving the same zones (written by the same code), in one run: each server pinned to CPU 0,
# dnsperf on CPU 1, the same queries (half wildcard names of 10 router zones, half user names
# CNAMEd to them). Prints answers per second and the server's CPU microseconds per answer.
#   bench/shard-dns.sh            (needs dnsperf and nsd: apt-get install dnsperf nsd; CoreDNS
#                                  is built once from the Go module proxy into $BENCH/bin, the
#                                  same binary bench/dns.sh uses)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DUR=${DURATION:-10}
BENCH=${BENCH:-/tmp/kuma-dp-bench-dns}
log() { echo "[$(date +%T)] $*" >&2; }
# shellcheck source=bench/build.sh
source bench/build.sh
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT
go_build "$W" ./bench/shardzones
"$W/shardzones" -write "$W"
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
# CPU ticks (utime+stime) of a process and of nsd's forked children; the process name may
# hold spaces ("nsd: server 1"), so the fields are counted after it
cpu_ticks() { local t=0; for p in $1 $(pgrep -f "$W/nsd.conf" | grep -vx "$1"); do t=$((t + $(sed 's/.*) //' /proc/$p/stat 2>/dev/null | awk '{print $12+$13}'))); done; echo $t; }
measure() { # name pid port
  local name=$1 pid=$2 p=$3
  for _ in $(seq 50); do dig +short +time=1 +tries=1 @127.0.0.1 -p "$p" app1.users.test >/dev/null 2>&1 && break; sleep 0.1; done
  local t0; t0=$(cpu_ticks "$pid")
  local out; out=$(taskset -c 1 dnsperf -s 127.0.0.1 -p "$p" -d "$W/queries.txt" -l "$DUR" -c 4 -Q 1000000 2>&1)
  local t1; t1=$(cpu_ticks "$pid")
  local answered qps; answered=$(echo "$out" | awk '/Queries completed/{print $3}'); qps=$(echo "$out" | awk '/Queries per second/{print $4}')
  local hz; hz=$(getconf CLK_TCK)
  printf "%-22s %10s qps  %6.2f us CPU/answer  (%s answered)\n" "$name" "$qps" "$(echo "($t1-$t0)*1000000/$hz/$answered" | bc -l)" "$answered"
}
P1=$(port); taskset -c 0 "$W/shardzones" -serve "127.0.0.1:$P1" 2>/dev/null & measure "kuma-cp authdns" $! "$P1"
P2=$(port)
{
  echo "server:"; echo "  ip-address: 127.0.0.1@$P2"; echo "  port: $P2"; echo "  username: \"\""; echo "  chroot: \"\""
  echo "  zonesdir: \"$W\""; echo "  database: \"\""; echo "  zonelistfile: \"$W/zone.list\""; echo "  xfrdfile: \"$W/xfrd.state\""
  echo "  pidfile: \"$W/nsd.pid\""; echo "  logfile: \"$W/nsd.log\""; echo "  server-count: 1"; echo "  verbosity: 0"; echo "  rrl-ratelimit: 0"
  echo "remote-control:"; echo "  control-enable: no"
  for z in "$W"/*.zone; do b=$(basename "$z" .zone); echo "zone:"; echo "  name: $b"; echo "  zonefile: $z"; done
} > "$W/nsd.conf"
kill %1 2>/dev/null || true
taskset -c 0 nsd -d -c "$W/nsd.conf" 2>/dev/null & NSD=$!; sleep 1; measure "nsd $(nsd -v 2>&1 | head -1 | awk '{print $3}')" "$NSD" "$P2"
kill "$NSD" 2>/dev/null || true; wait "$NSD" 2>/dev/null || true
mkdir -p "$BENCH/bin"
build_coredns "$BENCH/bin"
P3=$(port)
for z in "$W"/*.zone; do b=$(basename "$z" .zone); printf '%s:%s {\n    bind 127.0.0.1\n    file %s\n}\n' "$b" "$P3" "$z"; done > "$W/Corefile"
taskset -c 0 "$BENCH/bin/coredns" -quiet -conf "$W/Corefile" >/dev/null 2>&1 & CD=$!; sleep 1
measure "CoreDNS $COREDNS_VERSION file" "$CD" "$P3"
