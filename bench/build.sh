# bench/build.sh: sourced by the benchmark scripts. Go servers are built as they ship:
# static (CGO_ENABLED=0), -trimpath -ldflags "-s -w", as the kuma-dp image and CoreDNS's
# releases are.
COREDNS_VERSION=v1.15.0
GO_BUILD_FLAGS=(-trimpath -ldflags "-s -w")

# go_build DIR PKG...: this repository's packages into DIR.
go_build() {
  local dir=$1; shift
  (cd "$ROOT" && CGO_ENABLED=0 go build "${GO_BUILD_FLAGS[@]}" -o "$dir/" "$@")
}

# build_coredns DIR: CoreDNS $COREDNS_VERSION from the Go module proxy into DIR, unless the
# one there was built the same way.
build_coredns() {
  local dir=$1 stamp="$COREDNS_VERSION CGO_ENABLED=0 ${GO_BUILD_FLAGS[*]}"
  [[ $(cat "$dir/coredns.build" 2>/dev/null) == "$stamp" ]] && return 0
  log "building CoreDNS $COREDNS_VERSION from the Go module proxy"
  CGO_ENABLED=0 GOBIN=$dir go install "${GO_BUILD_FLAGS[@]}" "github.com/coredns/coredns@$COREDNS_VERSION"
  echo "$stamp" > "$dir/coredns.build"
}
