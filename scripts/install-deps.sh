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

# The toolkit here ships no disassembler; the nvrtc tier reads the SASS of the Hopper family's
# kernels (HGMMA, no local memory) where one is found, and `gmtune compile --out` writes .sass
# with it. PyPI's wheel carries nvdisasm alone; a failed download leaves those checks skipped,
# with the reason in the test log, rather than failing the install.
nvdisasm_version=13.5.37
nvdisasm_dir=/opt/gmjit-tools/nvdisasm-$nvdisasm_version
if command -v nvdisasm >/dev/null || command -v cuobjdump >/dev/null || [ -x "$cuda_home/bin/nvdisasm" ] ||
   [ -x "$cuda_home/bin/cuobjdump" ]; then
  echo "install-deps: a disassembler is present"
elif [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: no nvdisasm; as root this installs PyPI's nvidia-cuda-nvdisasm==$nvdisasm_version" \
       "into $nvdisasm_dir and links it into /usr/local/bin (the SASS checks skip without it)"
elif python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$nvdisasm_dir" \
       "nvidia-cuda-nvdisasm==$nvdisasm_version" && [ -x "$nvdisasm_dir/nvidia/cu13/bin/nvdisasm" ]; then
  ln -sf "$nvdisasm_dir/nvidia/cu13/bin/nvdisasm" /usr/local/bin/nvdisasm
  echo "install-deps: nvdisasm $nvdisasm_version from PyPI at /usr/local/bin/nvdisasm"
else
  echo "install-deps: could not install nvdisasm from PyPI; the SASS checks will skip" >&2
fi
