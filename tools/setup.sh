#!/usr/bin/env bash
# Installs what dlua needs from Debian's packages (only what is missing), then
# configures and builds it in build/. Idempotent: a second run installs nothing
# and rebuilds only what changed.
#   tools/setup.sh            install + build (Release)
#   DLUA_BUILD_DIR=dir tools/setup.sh    build elsewhere
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ make pkg-config luajit libluajit-5.1-dev libopenblas-dev
          catch2 libedit-dev zlib1g-dev dataset-fashion-mnist python3
          libopenmpi-dev openmpi-bin nlohmann-json3-dev liblapacke-dev
          libonnx-dev libprotobuf-dev python3-onnx libstb-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

build=${DLUA_BUILD_DIR:-build}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${DLUA_CMAKE_ARGS:-}
fi
cmake --build "$build" -j "$(nproc)"
