# syntax=docker/dockerfile:1
# One image for every Strand service (strand-api, strand-executor, strand-scheduler,
# strand-monitor, strand-admin, strandctl); the Kubernetes manifests pick the binary
# with `command:`. Build from the repository root:
#   docker build -t strand:dev .
# docs/operations.md: this file was linted structurally (scripts/check_deploy.sh), but
# no image was built in the project's CI, which has no container engine.

# ---- build: the same flow as a developer's machine (scripts/build.sh) ----
FROM debian:12 AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git ca-certificates \
      librdkafka-dev libpq-dev libhiredis-dev libprotobuf-c-dev protobuf-c-compiler \
      libevent-dev libcunit1-dev libjansson-dev libcurl4-openssl-dev uuid-dev libssl-dev \
      libgraphviz-dev nodejs npm \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN rm -rf build build-asan .cache .stack \
 && STRAND_CRASH_POINTS=OFF scripts/build.sh release \
 && cmake --install build --prefix /out --strip

# ---- runtime: Debian slim, shared libraries only, non-root ----
FROM debian:12-slim AS runtime
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates librdkafka1 libpq5 libhiredis0.14 libprotobuf-c1 libevent-2.1-7 \
      libjansson4 libcurl4 libuuid1 libssl3 libevent-openssl-2.1-7 libgvc6 libcgraph6 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 strand \
 && useradd --system --uid 10001 --gid strand --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin strand
COPY --from=build /out/bin/ /usr/local/bin/
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
# The services listen on STRAND_HTTP_PORT (defaults 8080 api, 8081 executor,
# 8082 scheduler, 8083 monitor) for the API, /healthz, /readyz and /metrics.
EXPOSE 8080 8081 8082 8083
ENV STRAND_HTTP_ADDR=0.0.0.0
CMD ["/usr/local/bin/strand-api"]
