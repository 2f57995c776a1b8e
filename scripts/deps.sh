#!/usr/bin/env bash
# Install the Debian packages this project needs, only the missing ones.
# Quiet when everything is there; needs root (or sudo) otherwise.
set -euo pipefail

PKGS=(
  build-essential pkg-config
  libuv1-dev libnng-dev libsqlite3-dev sqlite3 libxgboost-dev llvm-16-dev
  libmsgpack-dev libmbedtls-dev libcairo2-dev fonts-dejavu-core libseccomp-dev
  protobuf-c-compiler libprotobuf-c-dev libonnx-dev
  libcmocka-dev clang libclang-rt-14-dev
  qemu-user gcc-aarch64-linux-gnu libc6-arm64-cross libc6-dev-arm64-cross
  libopenblas-dev libdnnl-dev python3-onnx lld-16 python3-numpy
)

# The aarch64 agent ('make agent-aarch64') links arm64 builds of its libraries (Debian
# multiarch): the architecture is added once, then these are installed like the others.
ARM64_PKGS=(libuv1-dev:arm64 libnng-dev:arm64 libmsgpack-dev:arm64 libseccomp-dev:arm64
            libmbedtls-dev:arm64)

# 'scripts/deps.sh bench': also what the benchmarks run as references (PyTorch; ONNX
# Runtime comes from PyPI into a throwaway venv made by the benchmark itself).
BENCH_PKGS=(python3-torch python3-torchvision python3-venv)
[ "${1:-}" = bench ] && PKGS+=("${BENCH_PKGS[@]}")

missing=()
for p in "${ARM64_PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
SUDO=
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
if [[ " ${missing[*]} " == *":arm64 "* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: done"
