#!/usr/bin/env bash
# Installs what berth builds and tests with: Debian 12 packages only.
# Run as root on a fresh machine (CI does exactly this).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends \
  build-essential cmake pkg-config \
  protobuf-c-compiler libprotobuf-c-dev \
  libnng-dev librocksdb-dev libsodium-dev libgoogle-perftools-dev \
  libcriterion-dev openssl clang libfuzzer-14-dev libmbedtls-dev \
  python3 python3-protobuf protobuf-compiler python3-pytest nodejs libcjson-dev \
  postgresql-15 libpq-dev faketime \
  postgresql-15-auto-failover chromium
# (postgresql-15-auto-failover: the monitor's extension; it pulls in
# pg-auto-failover-cli, whose /usr/bin/pg_autoctl tools/pg-ha.sh and the
# failover test run.)
# (chromium: the console's tests drive it headless, tests/console/.)
# npm (for the Node client's one dependency and the console tests'
# puppeteer-core), unless a nodejs that brings its own is installed already
command -v npm >/dev/null || apt-get install -y --no-install-recommends npm
