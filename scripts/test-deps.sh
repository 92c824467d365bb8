#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine: iptables (legacy and nft),
# dig, iproute2 (ip netns), conntrack, musl-gcc, the real DNS clients, nsd, named-checkzone
# and chromium;
# getent comes with libc. Does nothing when all are present;
# as non-root it only says what is missing (the tests that need them then skip).
set -euo pipefail
need=()
command -v iptables-legacy-restore >/dev/null 2>&1 || need+=(iptables)
command -v iptables-nft-restore >/dev/null 2>&1 || need+=(iptables)
command -v dig >/dev/null 2>&1 || need+=(dnsutils)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
# musl-gcc: the real-client DNS test builds its getaddrinfo client against musl too (Alpine's libc)
command -v musl-gcc >/dev/null 2>&1 || need+=(musl-tools)
# the real-resolver tests' clients: bind9's host, Ruby's Resolv, Erlang's inet_res, dnspython,
# busybox's nslookup (Node and Java come with the machine)
command -v host >/dev/null 2>&1 || need+=(bind9-host)
command -v ruby >/dev/null 2>&1 || need+=(ruby)
command -v escript >/dev/null 2>&1 || need+=(erlang-base)
/usr/bin/python3 -c 'import dns.resolver' >/dev/null 2>&1 || need+=(python3-dnspython)
command -v busybox >/dev/null 2>&1 || need+=(busybox)
# etcd (the control plane's store: the tests run a real 3-member cluster)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
# nsd (a real secondary for the control plane's zone transfers) and named-checkzone
command -v nsd >/dev/null 2>&1 || need+=(nsd)
command -v named-checkzone >/dev/null 2>&1 || need+=(bind9-utils)
# chromium (the control plane's GUI is tested in a real headless browser, cp/gui)
[ -x /usr/bin/chromium ] || need+=(chromium)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "test-deps: missing ${need[*]} (not root or no apt-get): tests that need them will skip" >&2
  exit 0
fi
echo "test-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
