#!/usr/bin/env bash
# bench/change.sh: how long one dataplane's change takes to apply in a large mesh, end to
# end (files source): kuma-dp run on a mesh of N one-inbound dataplanes (one inventory
# file, as bench/memory.sh makes it), then one dataplane added in a file of its own, edited,
# and removed, ROUNDS times; prints each change's `load=` (the source: files checked,
# decoded, the snapshot built) and `took=` (load + the VIPs allocated and the resolver's
# table swapped) from the agent's "model applied" log lines, with BASELINE's beside it
# when given (another kuma-dp build, run the same way).
#
# Knobs: N ROUNDS BENCH BASELINE SERVER_CPU
# Example: BASELINE=/path/to/old/kuma-dp bench/change.sh
# Needs: go, taskset.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=${BENCH:-/tmp/kuma-dp-bench-change}
N=${N:-100000}
ROUNDS=${ROUNDS:-2}
SERVER_CPU=${SERVER_CPU:-1}
BASELINE=${BASELINE:-}
export PATH=/usr/local/go/bin:$PATH

log() { echo "[$(date +%T)] $*" >&2; }
# shellcheck source=bench/build.sh
source "$ROOT/bench/build.sh"
mkdir -p "$BENCH/bin"
go_build "$BENCH/bin" ./cmd/kuma-dp

d=$BENCH/data/$N
if [[ ! -s $d/policies/dataplanes.yaml ]]; then
  mkdir -p "$d/policies"
  printf 'type: Dataplane\nmesh: default\nname: bench-client\nnetworking:\n  address: 127.0.0.1\n  inbound:\n  - port: 7000\n    tags:\n      kuma.io/service: bench-client\n' > "$d/dp.yaml"
  awk -v n="$N" 'BEGIN { for (i = 0; i < n; i++) printf "type: Dataplane\nmesh: default\nname: svc-%d-1\nnetworking:\n  address: 10.%d.%d.%d\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: svc-%d\n---\n", i, int(i / 62500) + 1, int(i / 250) % 250, i % 250 + 1, i }' \
    > "$d/policies/dataplanes.yaml"
fi

extra() { printf 'type: Dataplane\nmesh: default\nname: extra-1\nnetworking:\n  address: %s\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: extra\n' "$1" > "$d/policies/extra.yaml"; }

# run NAME BIN: the agent on the mesh, ROUNDS x (add, edit, remove), its "model applied" lines.
run() {
  local name=$1 bin=$2 w pid
  w=$(mktemp -d)
  rm -f "$d/policies/extra.yaml"
  taskset -c "$SERVER_CPU" "$bin" run --dataplane-file "$d/dp.yaml" --policies-dir "$d/policies" --envoy=false \
    --work-dir "$w/work" --admin-address 127.0.0.1:0 --dns-address 127.0.0.1 --dns-proxy-port 0 \
    --dns-upstream 127.0.0.1:9 --ready-file "$w/ready.json" > "$w/log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do [[ -s $w/ready.json ]] && break; sleep 0.1; done
  sleep 3
  for ((r = 0; r < ROUNDS; r++)); do
    extra 10.99.0.1; sleep 2
    extra 10.99.0.2; sleep 2
    rm -f "$d/policies/extra.yaml"; sleep 2
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
  grep 'msg="model applied"' "$w/log" | grep -v trigger=start |
    sed -E 's/.*(load=[^ ]+) (took=[^ ]+).*/\1 \2/' | awk -v n="$name" '{ printf "%s %s %s\n", n, (NR % 3 == 1 ? "added" : NR % 3 == 2 ? "edited" : "removed"), $0 }'
  rm -rf "$w"
}

echo "one dataplane changed among $N ($(date -u +%F), $(nproc) CPUs, agent on CPU $SERVER_CPU, load average $(cut -d' ' -f1 /proc/loadavg))"
run kuma-dp "$BENCH/bin/kuma-dp"
[[ -n $BASELINE ]] && run baseline "$BASELINE"
exit 0
