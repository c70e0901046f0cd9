#!/usr/bin/env bash
# Builds libgmjit and runs the whole test suite: unit, nvrtc and gpu tiers (the gpu tier skips
# with a reason when no device is present; GMJIT_REQUIRE_GPU=1 turns those skips into failures).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${GMJIT_BUILD_DIR:-build}"
jobs="$(nproc)"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${GMJIT_BUILD_TYPE:-Release}"
cmake --build "$build_dir" -j "$jobs"
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" "$@"
