#!/usr/bin/env bash
# Packs what bench/device_call.sh runs on the lent GPU machine into .device/pack.txz (carry
# ".device"): libgmjit, gmtune, gmjit-worker, the gpu tier, bench_expr, bench_gemm, bench_tuner
# and bench_compile from the build tree (stripped), the standalone wgmma check (nvcc, if it was
# built into $WGMMA_CHECK), the shapes files the benchmarks read (the machine's Python brings
# torch and pytest). xz, whose 64 MiB window finds the LLVM code every binary carries once more
# in the next: under the 64 MiB a call may carry, where gzip is not.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${GMJIT_BUILD_DIR:-build}"
pack="$(mktemp -d)"
cp "$build/lib/libgmjit.so.0.1.0" "$pack/libgmjit.so.0"
cp "$build/tools/gmtune" "$build/tuner/gmjit-worker" "$build/tests/gmjit_gpu_tests" "$build/bench/bench_expr" \
   "$build/bench/bench_gemm" "$build/bench/bench_tuner" "$build/bench/bench_compile" "$pack/"
if [ -n "${WGMMA_CHECK:-}" ]; then cp "$WGMMA_CHECK" "$pack/gemm_wgmma_check"; fi
strip "$pack"/* 2>/dev/null || true
shapes="${GMJIT_SHAPES_DIR:-../shared/shapes}"
if [ -f "$shapes/gemm.json" ]; then cp "$shapes/gemm.json" "$pack/"; fi
# TIER_BINARIES: a binary cache that a compile-only run of the tier filled here
# (GMJIT_TEST_COMPILE_ONLY=sm_90a GMJIT_TEST_BINARY_CACHE=that.db build/tests/gmjit_gpu_tests), so
# the tier on the lent machine checks instead of compiling. Its PTX stays behind: a launch from the
# cache reads the cubin alone, and the cubins are what fits in a call.
if [ -n "${TIER_BINARIES:-}" ]; then
  cp "$TIER_BINARIES" "$pack/tier-binaries.db"
  python3 -c "import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute(\"UPDATE binaries SET ptx = '', bytes = length(cubin)\")
db.commit()
db.execute('VACUUM')" "$pack/tier-binaries.db"
fi
mkdir -p .device
tar -cf - -C "$pack" . | xz -9 -T2 >.device/pack.txz
rm -rf "$pack"
ls -la .device/pack.txz
# A call carries the tracked tree and .device together, 64 MiB at most.
carried=$(( $(git ls-files -z | xargs -0 cat | wc -c) + $(du -sb .device | cut -f1) ))
echo "a call carries $((carried / 1048576)) MiB of its 64 (tracked files and .device)"
if [ $carried -gt $((64 * 1048576)) ]; then echo "too much to carry: leave TIER_BINARIES out or trim .device" >&2; exit 1; fi
