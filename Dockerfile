# kuma-dp image: the agent (static, CGO_ENABLED=0) plus Envoy, running as UID 5678.
#
#   docker build -t kuma-dp .
#   docker build --build-arg ENVOY_IMAGE=envoyproxy/envoy:v1.35-latest -t kuma-dp .
#
# The same image serves the sidecar (`kuma-dp run`) and the init container
# (`kuma-dp tproxy install`, run as root with NET_ADMIN: see deploy/kubernetes/pod.yaml),
# which is why iptables is installed.

ARG GO_IMAGE=golang:1.26-bookworm
ARG ENVOY_IMAGE=envoyproxy/envoy:v1.35-latest
ARG BASE_IMAGE=debian:bookworm-slim

# kuma-cp's image is the stage of that name:
#
#   docker build --target kuma-cp -t kuma-cp:dev .     (deploy/kubernetes/kuma-cp.yaml)

# --- build: the static kuma-dp and kuma-cp binaries ----------------------------------
FROM ${GO_IMAGE} AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X github.com/kumadp/kuma-dp/internal/buildinfo.Version=${VERSION}" \
      -o /out/kuma-dp ./cmd/kuma-dp \
 && /out/kuma-dp version \
 && CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X github.com/kumadp/kuma-dp/internal/buildinfo.Version=${VERSION}" \
      -o /out/kuma-cp ./cmd/kuma-cp \
 && /out/kuma-cp version

# --- kuma-cp: the control plane alone (static; no Envoy, no iptables), UID 5679 --------
FROM ${BASE_IMAGE} AS kuma-cp
RUN groupadd --system --gid 5679 kuma-cp \
 && useradd --system --uid 5679 --gid 5679 --no-create-home --shell /usr/sbin/nologin kuma-cp
COPY --from=build /out/kuma-cp /usr/local/bin/kuma-cp
USER 5679:5679
# 5678: agents (xDS); 5681: the API; 5680: metrics, /ready, /healthz; 5653: the shards' DNS.
EXPOSE 5678 5681 5680 5653/udp 5653/tcp
ENTRYPOINT ["/usr/local/bin/kuma-cp"]
CMD ["serve", "--help"]

# --- envoy: taken from the official image, nothing else from it ----------------------
FROM ${ENVOY_IMAGE} AS envoy

# --- final ------------------------------------------------------------------------------
# Envoy is linked against glibc, so the base is a small glibc distribution; iptables
# (legacy and nft) for `kuma-dp tproxy`, CA certificates for TLS origination to external
# services (kuma-dp finds the system bundle at the usual paths).
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates iptables \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 5678 kuma-dp \
 && useradd --system --uid 5678 --gid 5678 --home-dir /var/lib/kuma-dp --create-home --shell /usr/sbin/nologin kuma-dp
COPY --from=envoy /usr/local/bin/envoy /usr/local/bin/envoy
COPY --from=build /out/kuma-dp /usr/local/bin/kuma-dp

# The work dir (VIP state file, Envoy bootstrap, unix sockets) is the agent user's.
ENV KUMA_DATAPLANE_RUNTIME_WORK_DIR=/var/lib/kuma-dp \
    KUMA_DATAPLANE_RUNTIME_BINARY_PATH=/usr/local/bin/envoy
USER 5678:5678
WORKDIR /var/lib/kuma-dp
# 15053: DNS (UDP+TCP); 15001/15006: Envoy's outbound/inbound capture listeners;
# 9901: the readiness endpoint when --readiness-address=:9901 (the admin endpoint, 9902,
# stays on loopback).
EXPOSE 15053/udp 15053/tcp 15001 15006 9901
ENTRYPOINT ["/usr/local/bin/kuma-dp"]
CMD ["run", "--help"]
