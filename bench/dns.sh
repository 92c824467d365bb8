#!/usr/bin/env bash
# bench/dns.sh (make bench-dns): server CPU per query of kuma-dp's resolver against its
# peers, in one run, on this machine.
#
# Servers, each serving the same N names (svc-<i>.mesh, A + AAAA) on 127.0.0.1:
#   kuma-dp           bench/vipdns: package dnsserver (CoreDNS + kumavip + UDP fast path)
#   kuma-dp-swapping  the same, swapping a whole N-name table every SWAP_EVERY under load
#   coredns-hosts     CoreDNS v1.15.0 (from the Go module proxy) with the hosts plugin
#   miekg             bench/miekgdns: a bare github.com/miekg/dns map server
#   nsd               nsd, the names as a zone file, one server process
#   unbound           unbound, the names as local-data of a static local zone, one thread
#   knot-resolver     kresd (Knot Resolver), the names as hints from the hosts file
#   dnsmasq           dnsmasq, the names from the hosts file (--addn-hosts), no cache
# The C peers are Debian's packages (installed with apt-get when missing, as root); one that
# cannot be installed is skipped with a message.
# The Go servers are built static (CGO_ENABLED=0, -trimpath, -s -w), as they ship.
# Each server is pinned to SERVER_CPU with taskset (so a Go server runs with GOMAXPROCS=1),
# dnsperf to LOADGEN_CPU. Per run: dnsperf -c CLIENTS -l DURATION (unthrottled) over a
# query file of existing names (7:2 A:AAAA); the server's CPU time (utime+stime from
# /proc/<pid>/stat) divided by the answered queries gives "server CPU us/query", the
# figure to compare (QPS is capped by the load generator on 2 cores). REPS rounds, the
# server order rotating per round; the table shows medians.
#
# Knobs: N REPS DURATION CLIENTS SERVER_CPU LOADGEN_CPU PORT_BASE SWAP_EVERY BENCH SERVERS
# Example (quick): N=100000 REPS=3 DURATION=5 bench/dns.sh
# Example (the agent beside the C peers): SERVERS="kuma-dp nsd unbound knot-resolver dnsmasq" bench/dns.sh
# Needs: go, dnsperf (installed with apt-get when missing), dig, taskset, ss.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=${BENCH:-/tmp/kuma-dp-bench-dns}
N=${N:-100000}
REPS=${REPS:-3}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-10}
SERVER_CPU=${SERVER_CPU:-1}
LOADGEN_CPU=${LOADGEN_CPU:-0}
PORT_BASE=${PORT_BASE:-25300}
SWAP_EVERY=${SWAP_EVERY:-500ms}
SERVERS=${SERVERS:-"kuma-dp kuma-dp-swapping coredns-hosts miekg nsd unbound knot-resolver dnsmasq"}
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin

log() { echo "[$(date +%T)] $*" >&2; }
# shellcheck source=bench/build.sh
source "$ROOT/bench/build.sh"

# ------------------------------------------------------------- tools ----
# server name -> the command it needs, and the Debian package that has it
declare -A TOOL=([nsd]=nsd [unbound]=unbound [knot-resolver]=kresd [dnsmasq]=dnsmasq)
declare -A PKG=([nsd]=nsd [unbound]=unbound [knot-resolver]=knot-resolver [dnsmasq]=dnsmasq)
want=()
command -v dnsperf >/dev/null || want+=(dnsperf)
for s in $SERVERS; do
  [[ -n ${TOOL[$s]:-} ]] && ! command -v "${TOOL[$s]}" >/dev/null && want+=("${PKG[$s]}")
done
if [[ ${#want[@]} -gt 0 ]]; then
  log "installing ${want[*]} (apt-get)"
  if [[ $(id -u) == 0 ]]; then SUDO=""; else SUDO=sudo; fi
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null || true
fi
kept=""
for s in $SERVERS; do
  if [[ -n ${TOOL[$s]:-} ]] && ! command -v "${TOOL[$s]}" >/dev/null; then
    log "$s: ${TOOL[$s]} is not installed: skipped"; continue
  fi
  kept="$kept $s"
done
SERVERS=${kept# }
for t in dnsperf dig taskset ss; do
  command -v $t >/dev/null || { echo "bench-dns: $t is missing" >&2; exit 1; }
done

mkdir -p "$BENCH/bin" "$BENCH/data/$N" "$BENCH/run"
log "building vipdns and miekgdns"
go_build "$BENCH/bin" ./bench/vipdns ./bench/miekgdns
build_coredns "$BENCH/bin"
DATA=$BENCH/data/$N
[[ -s $DATA/queries.txt ]] || "$BENCH/bin/vipdns" --gen "$N" --out "$DATA"
# The same names as a zone file (nsd) and as unbound's local-data.
[[ -s $DATA/db.mesh ]] || awk 'BEGIN { print "$ORIGIN mesh.\n$TTL 3600\n@ IN SOA ns.mesh. hostmaster.mesh. 1 7200 3600 1209600 3600\n@ IN NS ns.mesh.\nns IN A 127.0.0.1" }
     { sub(/\.mesh$/, "", $2); print $2, "IN", ($1 ~ /:/ ? "AAAA" : "A"), $1 }' "$DATA/hosts" > "$DATA/db.mesh"
[[ -s $DATA/unbound-data.conf ]] || awk '{ printf "    local-data: \"%s. 3600 IN %s %s\"\n", $2, ($1 ~ /:/ ? "AAAA" : "A"), $1 }' \
  "$DATA/hosts" > "$DATA/unbound-data.conf"

# ----------------------------------------------------------- servers ----
declare -A PORT PID
i=0
for s in $SERVERS; do PORT[$s]=$((PORT_BASE + i)); i=$((i + 1)); done

server_cmd() {  # name -> foreground command serving DATA on 127.0.0.1:PORT[name]
  local p=${PORT[$1]}
  case $1 in
  kuma-dp) echo "$BENCH/bin/vipdns --hosts $DATA/hosts --addr 127.0.0.1:$p" ;;
  kuma-dp-swapping) echo "$BENCH/bin/vipdns --hosts $DATA/hosts --addr 127.0.0.1:$p --swap-every $SWAP_EVERY" ;;
  miekg) echo "$BENCH/bin/miekgdns --hosts $DATA/hosts --addr 127.0.0.1:$p" ;;
  coredns-hosts)
    printf 'mesh:%s {\n    bind 127.0.0.1\n    errors\n    hosts %s mesh {\n        reload 0\n    }\n}\n' \
      "$p" "$DATA/hosts" > "$BENCH/run/Corefile"
    echo "$BENCH/bin/coredns -quiet -conf $BENCH/run/Corefile" ;;
  nsd)
    mkdir -p "$BENCH/run/nsd"
    printf 'server:\n  ip-address: 127.0.0.1@%s\n  port: %s\n  server-count: 1\n  username: ""\n  chroot: ""\n  zonesdir: "%s"\n  database: ""\n  pidfile: "%s/nsd.pid"\n  xfrdfile: "%s/xfrd.state"\n  zonelistfile: "%s/zone.list"\n  do-ip6: no\n  verbosity: 0\nremote-control:\n  control-enable: no\nzone:\n  name: "mesh"\n  zonefile: "%s"\n' \
      "$p" "$p" "$BENCH/run/nsd" "$BENCH/run/nsd" "$BENCH/run/nsd" "$BENCH/run/nsd" "$DATA/db.mesh" > "$BENCH/run/nsd/nsd.conf"
    echo "nsd -d -c $BENCH/run/nsd/nsd.conf" ;;
  unbound)
    { printf 'server:\n  interface: 127.0.0.1@%s\n  port: %s\n  num-threads: 1\n  username: ""\n  chroot: ""\n  directory: "%s"\n  pidfile: ""\n  do-ip6: no\n  use-syslog: no\n  verbosity: 0\n  access-control: 127.0.0.0/8 allow\n  local-zone: "mesh." static\n' \
        "$p" "$p" "$BENCH/run"
      echo "    include: \"$DATA/unbound-data.conf\""
      printf 'remote-control:\n  control-enable: no\n'; } > "$BENCH/run/unbound.conf"
    echo "unbound -d -p -c $BENCH/run/unbound.conf" ;;
  knot-resolver)
    mkdir -p "$BENCH/run/kresd"
    printf "net.listen('127.0.0.1', %s, { kind = 'dns' })\nmodules = { 'hints > iterate' }\nhints.add_hosts('%s')\ncache.size = 50 * MB\n" \
      "$p" "$DATA/hosts" > "$BENCH/run/kresd/config"
    echo "kresd -n -q -c $BENCH/run/kresd/config $BENCH/run/kresd" ;;
  dnsmasq)
    echo "dnsmasq --keep-in-foreground --conf-file=/dev/null --user=root --pid-file= --port=$p \
--listen-address=127.0.0.1 --bind-interfaces --no-resolv --no-poll --no-hosts --addn-hosts=$DATA/hosts \
--local=/mesh/ --cache-size=0" ;;
  *) echo "bench-dns: unknown server $1" >&2; exit 1 ;;
  esac
}

stop_all() {
  local s p
  for s in "${!PID[@]}"; do
    p=${PID[$s]}; kill "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true
  done
}
trap stop_all EXIT

for s in $SERVERS; do
  if [[ -n $(ss -Hlun "sport = :${PORT[$s]}") ]]; then
    echo "bench-dns: port ${PORT[$s]} is in use (set PORT_BASE)" >&2; exit 1
  fi
  # shellcheck disable=SC2046  # the command line is split on purpose
  taskset -c "$SERVER_CPU" $(server_cmd "$s") > "$BENCH/run/$s.log" 2>&1 &
  PID[$s]=$!
  ok=""
  for _ in $(seq 240); do   # wait up to 120 s for the names to load
    if dig +tries=1 +time=1 +short @127.0.0.1 -p "${PORT[$s]}" svc-0.mesh A | grep -q '^240\.0\.0\.1$'; then ok=1; break; fi
    kill -0 "${PID[$s]}" 2>/dev/null || break
    sleep 0.5
  done
  [[ -n $ok ]] || { echo "bench-dns: $s did not answer: $(tail -3 "$BENCH/run/$s.log")" >&2; exit 1; }
  log "$s up on port ${PORT[$s]} (pid ${PID[$s]})"
done

# ------------------------------------------------------------ measure ----
# ticks PID: utime+stime of the process and of its children alive (nsd serves from a child).
ticks() {
  local t=0 c
  t=$(sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}')
  for c in $(pgrep -P "$1"); do t=$((t + $(ticks "$c"))); done
  echo "$t"
}
HZ=$(getconf CLK_TCK)
RAW=$BENCH/run/raw.tsv
: > "$RAW"
read -ra ORDER <<< "$SERVERS"
for rep in $(seq "$REPS"); do
  k=$(( (rep - 1) % ${#ORDER[@]} ))
  for s in "${ORDER[@]:k}" "${ORDER[@]:0:k}"; do
    out=$BENCH/run/$s-$rep.txt
    c0=$(ticks "${PID[$s]}")
    taskset -c "$LOADGEN_CPU" dnsperf -s 127.0.0.1 -p "${PORT[$s]}" -d "$DATA/queries.txt" \
      -c "$CLIENTS" -l "$DURATION" -Q 1000000 > "$out" 2>&1 || true
    c1=$(ticks "${PID[$s]}")
    done_q=$(awk '/Queries completed/ {print $3}' "$out")
    lost=$(awk '/Queries lost/ {print $3}' "$out")
    qps=$(awk '/Queries per second/ {printf "%.0f", $4}' "$out")
    us=$(awk -v t=$((c1 - c0)) -v hz="$HZ" -v q="${done_q:-0}" 'BEGIN {printf "%.2f", (q > 0 ? t / hz / q * 1e6 : 0)}')
    printf '%s\t%s\t%s\t%s\t%s\n' "$s" "$rep" "${qps:-0}" "$us" "${lost:-NA}" >> "$RAW"
    log "rep $rep $s: $qps qps, server CPU $us us/query, lost $lost"
  done
done
stop_all
trap - EXIT
PID=()

med() {  # server column -> median over reps
  awk -F'\t' -v s="$1" -v c="$2" '$1 == s {print $c}' "$RAW" | sort -g |
    awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
echo
echo "N=$N names, ${DURATION}s x $REPS runs, dnsperf -c $CLIENTS on CPU $LOADGEN_CPU, servers on CPU $SERVER_CPU"
echo
echo "| server | QPS | server CPU us/query | lost queries (sum) |"
echo "|---|---:|---:|---:|"
for s in $SERVERS; do
  lost=$(awk -F'\t' -v s="$s" '$1 == s {t += $5} END {print t + 0}' "$RAW")
  echo "| $s | $(med "$s" 3) | $(med "$s" 4) | $lost |"
done
if [[ $SERVERS == *kuma-dp-swapping* ]]; then
  echo
  echo "kuma-dp-swapping: $(grep '^swaps:' "$BENCH/run/kuma-dp-swapping.log" || echo 'no swap report')"
fi
