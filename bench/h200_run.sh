#!/usr/bin/env bash
# Calls on the lent H200, from binaries built elsewhere and carried in $1 (default .device).
# $2 picks the part, since one call may run 10 minutes at most:
#   tests  the gpu tier with GMJIT_REQUIRE_GPU=1, the default sweep, the runtime benchmark
#   tier   the gpu tier alone (GMJIT_REQUIRE_GPU=1, bounded by TIER_TIMEOUT); GTEST_FILTER splits it
#          over calls, e.g. 'SM90/Gemm.*:SM90/GemmWgmma.*:SM90_GemmTune.*' (about 6 minutes) and then
#          the negation '-SM90/Gemm.*:SM90/GemmWgmma.*:SM90_GemmTune.*'
#   tuner  the tuner's benchmarks against Triton's autotuner (issue 4)
#   memory the memory-bound kernels against a device-to-device copy and torch (issue 5); it expects
#          the shapes file at $1/memory_bound.json, or at $MEMORY_SHAPES (a subset in the same format)
#   all    tests and tuner, then the older benchmarks (compile, sgemm, cache) and the unit and nvrtc
#          tiers (not memory or multigpu: with them the call would pass 10 minutes)
#   gemm   gemm against cuBLAS (issue 17): bench_gemm over $GEMM_SHAPES (default $1/gemm.json, a copy of
#          shared/shapes/gemm.json) into a fresh cache, sgemm 4096^3 against cuBLAS fp32, and the SASS
#          of the bf16 4096^3 winner; GEMM_ARGS adds bench_gemm flags (e.g. --tune-evaluations 24);
#          GEMM_CACHE names the cache (default a fresh one), for part profile to reuse; GEMM_SGEMM=0
#          leaves out the sgemm benchmark
#   profile  ncu (--clock-control none) of the first gemm_mma launch of bench_gemm over
#          $PROFILE_SHAPES with the winners in $GEMM_CACHE: the verification launch of the winner
#   multigpu  sweep throughput of the llm preset on one GPU against --devices all (issue 6), and
#          whether the winners agree; not part of all (it takes two sweeps)
# Logs are packed into $OUT/logs.tgz (the lease returns few files).
set -uo pipefail
bin="$(cd "${1:-.device}" && pwd)"
out="$(mktemp -d)/logs"
mkdir -p "$out"
trap 'tar -czf "${OUT:-.}/logs.tgz" -C "$(dirname "$out")" logs' EXIT
export LD_LIBRARY_PATH="$bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GMJIT_GMTUNE="$bin/gmtune" GMJIT_WORKER="$bin/gmjit-worker" GMJIT_REQUIRE_GPU=1
# The gpu tier's binary cache: the default path is in the build tree this was built in, which the
# lent machine lacks; a fresh file per call, so the tier's time includes its compiles.
export GMJIT_TEST_BINARY_CACHE="${GMJIT_TEST_BINARY_CACHE:-$(mktemp -d)/binaries.db}"
# The tests read tests/data from the checkout this runs in, not from where they were built.
export GMJIT_SOURCE_DIR="$(cd "$(dirname "$0")/.." && pwd)"
part=${2:-all}
status=0
step() {  # name, command...
  local name=$1; shift
  echo "=== $name: $*"
  stdbuf -oL -eL "$@" >"$out/$name.log" 2>&1
  local rc=$?
  last_rc=$rc
  echo "=== $name: exit $rc"
  [ $rc -eq 0 ] || status=1
  tail -n "${TAIL:-15}" "$out/$name.log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >"$out/gpu.csv" 2>&1
cat "$out/gpu.csv"
ldd "$bin/libgmjit.so.0" "$bin/gmtune" | grep -v -E "linux-vdso|ld-linux" | awk '{print $1}' | sort -u | tr '\n' ' '; echo
if [ "$part" = tier ]; then
step gpu_tier timeout "${TIER_TIMEOUT:-540}" "$bin/gmjit_gpu_tests"
fi
if [ "$part" = tests ] || [ "$part" = all ]; then
step devices "$bin/gmtune" devices
# Bounded, so a hang still leaves the logs and the steps after it.
step gpu_tier timeout "${TIER_TIMEOUT:-540}" "$bin/gmjit_gpu_tests"
if [ "$last_rc" != 124 ] && ! grep -q "tests ran" "$out/gpu_tier.log"; then
  # A crash: where it happened, from the debugger the image carries.
  cuda-gdb -batch -ex run -ex bt --args "$bin/gmjit_gpu_tests" >"$out/gpu_tier_backtrace.log" 2>&1
  grep -A25 -E "SIGSEGV|SIGABRT" "$out/gpu_tier_backtrace.log" | head -40
fi
cache_dir="$(mktemp -d)"
TAIL=8 step sweep_default env GMJIT_CACHE="$cache_dir/gmjit.db" "$bin/gmtune" sweep
TAIL=3 step sweep_again env GMJIT_CACHE="$cache_dir/gmjit.db" "$bin/gmtune" sweep
TAIL=8 step show env GMJIT_CACHE="$cache_dir/gmjit.db" "$bin/gmtune" show
TAIL=3 step verify env GMJIT_CACHE="$cache_dir/gmjit.db" "$bin/gmtune" verify
TAIL=14 step bench_runtime "$bin/bench_runtime"
# shellcheck disable=SC2086
TAIL=8 step tuner_stability timeout 160 "$bin/bench_tuner" stability --repeats 20 --time-limit "${STABILITY_S:-100}" \
  --json-out "$out/tuner_stability.json" ${STABILITY_ARGS:---max-evaluations 58}
fi
if [ "$part" = all ]; then
step unit_tier "$bin/gmjit_unit_tests"
step nvrtc_tier "$bin/gmjit_nvrtc_tests"
step bench_compile "$bin/bench_compile"
TAIL=12 step bench_sgemm "$bin/bench_sgemm" 4096
TAIL=8 step bench_cache "$bin/bench_cache"
mkdir -p "$out/compile"
TAIL=3 step compile_sass "$bin/gmtune" compile sgemm --shape m=4096,n=4096,k=4096 \
  --config bm=128,bn=128,bk=8,tm=8,tn=8,vec=1 --out "$out/compile"
fi

# The tuner against its targets (issue 4). Added time on an H200, estimated from an exhaustive
# sgemm 4096^3 tuning at 31 s for 196 configs and Triton compiling ~1-2 s per fp32 config:
#   wall, 4096^3, $TUNER_CONFIGS configs cold + warm           ~15 s   (timeout 150)
#   efficiency, 9 shapes, stops starting shapes at $EFFICIENCY_S ~240 s  (timeout 300)
#   stability (in part tests), 2048^3 model x 20, stops starting runs at $STABILITY_S ~100 s
#   triton cold ($TUNER_CONFIGS compiles + benchmarks) and warm  ~80 s   (timeouts 240 + 120)
# about 4.5 minutes in all; the timeouts bound it at 14 minutes if everything goes wrong.
# TUNER_CONFIGS, EFFICIENCY_S, STABILITY_S, EFFICIENCY_ARGS and STABILITY_ARGS (extra flags) adjust it.
if [ "$part" = tuner ] || [ "$part" = all ]; then
here="$(cd "$(dirname "$0")" && pwd)"
configs=${TUNER_CONFIGS:-32}
TAIL=8 step tuner_wall timeout 150 "$bin/bench_tuner" wall --shape 4096x4096x4096 --max-evaluations "$configs" \
  --json-out "$out/tuner_wall.json"
# shellcheck disable=SC2086  # extra flags, word-split on purpose
TAIL=20 step tuner_efficiency timeout 300 "$bin/bench_tuner" efficiency --time-limit "${EFFICIENCY_S:-240}" \
  --json-out "$out/tuner_efficiency.json" ${EFFICIENCY_ARGS:-}
triton_cache="$(mktemp -d)"
TAIL=9 step triton_cold timeout 240 python3 -u "$here/triton_autotune.py" --phase cold --configs "$configs" \
  --cache-dir "$triton_cache" --json-out "$out/triton_cold.json"
TAIL=9 step triton_warm timeout 120 python3 -u "$here/triton_autotune.py" --phase warm --configs "$configs" \
  --cache-dir "$triton_cache" --json-out "$out/triton_warm.json"
fi

# Sweep throughput on 1 GPU against every GPU (issue 6): the llm preset, cold, into two caches;
# problems per minute of each, the ratio (target >= 1.8 on 2 GPUs), and the winners compared.
# MULTIGPU_ARGS (default --budget 8: two sweeps must fit one call), MULTIGPU_DEVICES (default all;
# 0,0 puts two workers on one GPU to exercise the machinery where only one exists, timings then
# disturb each other), MULTIGPU_NOISE (default 3: a different winner within this many percent of
# the other's median counts as agreeing).
if [ "$part" = multigpu ]; then
mg="$(mktemp -d)"
# shellcheck disable=SC2086
TAIL=4 step sweep_1gpu timeout 280 sh -c "\"$bin/gmtune\" sweep --preset llm --json --device 0 --db $mg/one.db \
  ${MULTIGPU_ARGS:---budget 8} >$mg/one.json"
# shellcheck disable=SC2086
TAIL=6 step sweep_all timeout 280 sh -c "\"$bin/gmtune\" sweep --preset llm --json --devices ${MULTIGPU_DEVICES:-all} \
  --db $mg/all.db ${MULTIGPU_ARGS:---budget 8} >$mg/all.json"
"$bin/gmtune" show --json --db "$mg/one.db" >"$mg/one_winners.json"
"$bin/gmtune" show --json --db "$mg/all.db" >"$mg/all_winners.json"
cp "$mg"/*.json "$out/"
step multigpu_compare python3 - "$mg" "${MULTIGPU_NOISE:-3}" <<'PY'
import json, sys
d, noise = sys.argv[1], float(sys.argv[2])
one, allg = (json.load(open(f"{d}/{n}.json")) for n in ("one", "all"))
print(f"1 GPU: {one['tuned']} tuned in {one['wall_seconds']:.1f} s, {one['problems_per_minute']:.1f} problems/min")
per = ", ".join(f"gpu{x['device']} {x['tuned']}" for x in allg["devices"])
print(f"{len(allg['devices'])} workers ({per}): {allg['tuned']} tuned in {allg['wall_seconds']:.1f} s, "
      f"{allg['problems_per_minute']:.1f} problems/min")
if one["problems_per_minute"] > 0:
    print(f"speedup {allg['problems_per_minute'] / one['problems_per_minute']:.2f}x")
key = lambda w: (w["device_key"], w["kernel"], w["dtype"], json.dumps(w["shape"], sort_keys=True))
a = {key(w): w for w in json.load(open(f"{d}/one_winners.json"))["winners"]}
b = {key(w): w for w in json.load(open(f"{d}/all_winners.json"))["winners"]}
same = within = 0
for k in sorted(set(a) & set(b)):
    if a[k]["config"] == b[k]["config"]:
        same += 1
        continue
    ratio = b[k]["median_ms"] / a[k]["median_ms"]
    if abs(ratio - 1) * 100 <= noise:
        within += 1
    else:
        print(f"differ: {k[1]} {k[2]} {k[3]}: {a[k]['config']} {a[k]['median_ms']:.4f} ms vs "
              f"{b[k]['config']} {b[k]['median_ms']:.4f} ms ({(ratio - 1) * 100:+.1f}%)")
common = len(set(a) & set(b))
print(f"winners: {same} identical, {within} different within {noise}%, {common - same - within} beyond, "
      f"{len(set(a) ^ set(b))} in one cache only")
sys.exit(0 if common == len(a) == len(b) and common - same - within == 0 else 1)
PY
fi

# The memory-bound kernels (issue 5), on a fresh cache. Measured on the H200 (2026-12-03):
#   sweep of the 34 problems, every valid candidate ($MEMORY_SWEEP_ARGS, default
#   --strategy exhaustive: the cost model cannot tell a warp from a block per row when
#   there are few rows, and a budget of 32 then missed the right strategy)    (timeout 300)
#   torch's operators, 50 samples each, grayscale three ways       ~40 s  (timeout 100)
#   bench_memory: winners from the cache, verified, 50 samples each
#   interleaved with the copy                                      ~60 s  (timeout 130)
# The timeouts bound it at 10 minutes. A sweep cut short leaves bench_memory to tune the rest,
# 5 s each (--tune-seconds).
if [ "$part" = gemm ]; then
gemm_cache="${GEMM_CACHE:-$(mktemp -d)/gmjit.db}"
# shellcheck disable=SC2086  # extra flags, word-split on purpose
TAIL=80 step bench_gemm timeout "${GEMM_TIMEOUT:-360}" "$bin/bench_gemm" --shapes "${GEMM_SHAPES:-$bin/gemm.json}" \
  --cache "$gemm_cache" --json-out "$out/bench_gemm.json" ${GEMM_ARGS:-}
# Every candidate the tunings measured, for reading the search beside the winners.
"$bin/gmtune" export --db "$gemm_cache" "$out/gemm_trials.json" >/dev/null 2>&1 || echo "=== gemm export failed"
if [ "${GEMM_SGEMM:-1}" = 1 ]; then  # 0 when a call benchmarks only some of the gemm shapes
TAIL=12 step bench_sgemm timeout 150 "$bin/bench_sgemm" 4096
fi
mkdir -p "$out/gemm_sass"
winner=$(GMJIT_CACHE="$gemm_cache" "$bin/gmtune" show --json 2>/dev/null |
  python3 -c 'import json,sys; w=[r for r in json.load(sys.stdin)["winners"] if r.get("kernel")=="gemm" and r.get("dtype")=="bf16" and r.get("shape",{}).get("m")==4096 and r.get("shape",{}).get("k")==4096 and r.get("shape",{}).get("n")==4096]; print(",".join(f"{k}={v}" for k,v in w[0]["config"].items()) if w else "")' 2>/dev/null)
if [ -n "$winner" ]; then
  TAIL=3 step gemm_sass "$bin/gmtune" compile gemm --dtype bf16 --shape m=4096,n=4096,k=4096,trans_b=1 \
    --config "$winner" --out "$out/gemm_sass"
fi
fi
if [ "$part" = profile ]; then
TAIL=60 step ncu_gemm timeout 120 ncu --clock-control none --target-processes all -k regex:gemm_mma -c 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  "$bin/bench_gemm" --shapes "$PROFILE_SHAPES" --cache "$GEMM_CACHE" --samples 10
fi
if [ "$part" = memory ]; then
here="$(cd "$(dirname "$0")" && pwd)"
memory_cache="$(mktemp -d)/gmjit.db"
shapes=${MEMORY_SHAPES:-$bin/memory_bound.json}
only=${MEMORY_KERNELS:+--kernels $MEMORY_KERNELS}  # e.g. MEMORY_KERNELS=prefix_sum,softmax
# shellcheck disable=SC2086  # extra flags, word-split on purpose
TAIL=6 step memory_sweep env GMJIT_CACHE="$memory_cache" timeout 300 "$bin/gmtune" sweep --shapes "$shapes" \
  ${MEMORY_SWEEP_ARGS:---strategy exhaustive} $only
TAIL=40 step memory_show env GMJIT_CACHE="$memory_cache" timeout 20 "$bin/gmtune" show
TAIL=6 step memory_verify env GMJIT_CACHE="$memory_cache" timeout 20 "$bin/gmtune" verify
GMJIT_CACHE="$memory_cache" "$bin/gmtune" show --json >"$out/memory_winners.json" 2>/dev/null || true
# shellcheck disable=SC2086
TAIL=40 step torch_memory timeout 100 python3 -u "$here/torch_memory.py" --shapes "$shapes" \
  --json-out "$out/torch_memory.json" $only
TAIL=55 step bench_memory env GMJIT_CACHE="$memory_cache" timeout 130 "$bin/bench_memory" --cache "$memory_cache" \
  --shapes "$shapes" --torch "$out/torch_memory.json" --json-out "$out/bench_memory.json" --tune-seconds 5 $only
fi
exit $status
