#!/usr/bin/env bash
# Installs what Strand needs to build, test and run, from Debian's packages only.
# Packages already installed are skipped; nothing is downloaded from elsewhere.
# Then resolves the Apache Kafka broker from Maven Central (scripts/kafka/assemble.sh).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git curl ca-certificates
  librdkafka-dev libpq-dev libhiredis-dev libprotobuf-c-dev protobuf-c-compiler
  libevent-dev libcunit1-dev libjansson-dev libcurl4-openssl-dev uuid-dev libssl-dev
  postgresql-15 postgresql-client-15 redis-server
  openjdk-17-jre-headless maven
  clang libclang-rt-14-dev
  libgraphviz-dev
  golang-go python3-venv python3-yaml iproute2
  nodejs npm chromium fonts-liberation
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# A JDK installed another way (e.g. a Temurin JDK on PATH) is as good as the package.
if command -v java >/dev/null && java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])'; then
  missing=("${missing[@]/openjdk-17-jre-headless}")
fi
if command -v mvn >/dev/null; then missing=("${missing[@]/maven}"); fi
# The web console (web/) builds with any Node.js >= 18 and npm; ones installed another
# way (e.g. NodeSource's nodejs, which bundles npm) are as good as Debian's.
if command -v node >/dev/null && node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 18 ? 1 : 0)'; then
  missing=("${missing[@]/nodejs}")
  if command -v npm >/dev/null; then missing=("${missing[@]/npm}"); fi
fi
# scripts/check_deploy.sh builds kustomize with any Go >= 1.19 and needs a python3
# with venv and PyYAML; ones installed another way (e.g. /usr/local/go) are as good.
if command -v go >/dev/null; then missing=("${missing[@]/golang-go}"); fi
if python3 -c 'import venv, ensurepip' 2>/dev/null; then missing=("${missing[@]/python3-venv}"); fi
if python3 -c 'import yaml' 2>/dev/null; then missing=("${missing[@]/python3-yaml}"); fi
read -r -a missing <<<"${missing[*]:-}"

if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "deps: all Debian packages present"
fi

"$(dirname "$0")/kafka/assemble.sh"
