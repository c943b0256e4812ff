#!/usr/bin/env bash
# Installs, idempotently, the Debian packages holdfast builds, tests and runs with
# (DESIGN.md §6, plus ccache and the build tools). Installs only what is missing, so a
# second run takes a second. Nothing is downloaded from anywhere but Debian's archive.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config ccache make
  libsqlite3-dev sqlite3
  libpq-dev postgresql
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  # Argon2id for the panel's passwords (crypto_pwhash)
  libsodium-dev
  # the drivers people already use, for holdfast's adapters (include/holdfast/adapters/)
  libpqxx-dev libsqlitecpp-dev libasio-dev
  # the panel's HTTP server (Beast on Asio C++20 coroutines); the Asio adapter is tested on it too
  libboost1.81-dev
  # the PostgreSQL drill's connection pooler (transaction mode)
  pgbouncer
  # the HA drill's real stack (make drill-pg-ha, the Patroni e2e test): Patroni 3.0.2 over
  # etcd 3.4 (scripts/patroni-test-cluster.sh); etcd-client for etcdctl; curl for their
  # REST APIs (the script, and the drill's PATCH /config)
  patroni etcd-server etcd-client curl
  # the API reference (make docs; a test checks it builds without a warning)
  doxygen
)
# Extra packages a part of the project asks for (the browser test adds chromium).
if [[ -f "$(dirname "$0")/extra-packages.txt" ]]; then
  while read -r p; do [[ -n "$p" && "$p" != \#* ]] && packages+=("$p"); done \
    < "$(dirname "$0")/extra-packages.txt"
fi

# More packages for one command (make fuzz sets HOLDFAST_EXTRA_PACKAGES="clang ...").
for p in ${HOLDFAST_EXTRA_PACKAGES:-}; do packages+=("$p"); done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
