#!/usr/bin/env bash
# Installs the Debian packages libgmjit builds against; packages already present are skipped,
# so running it twice is harmless. The CUDA 13 toolkit is expected under /usr/local/cuda
# (or CUDA_HOME) and is checked, not installed.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libsqlite3-dev
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libxxhash-dev
  zlib1g-dev libzstd-dev llvm-19-dev
  clang-19 libclang-rt-19-dev
  python3-pytest python3-pip python3-setuptools python3-wheel
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi

cuda_home="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
if [ ! -f "$cuda_home/include/nvrtc.h" ] || [ ! -f "$cuda_home/include/cuda.h" ]; then
  echo "install-deps: no CUDA toolkit at $cuda_home (need nvrtc.h and cuda.h); set CUDA_HOME" >&2
  exit 1
fi
echo "install-deps: CUDA toolkit at $cuda_home"
