# One call on the lent GPU machine from a carried build (.device/pack.txz: libgmjit, gmtune,
# gmjit-worker, gmjit_gpu_tests, bench_expr, bench_gemm, bench_tuner, bench_compile;
# bench/pack_device.sh), logs under $OUT. $1 picks the part:
# Several parts may be named in one call (e.g. `tier bench`), run in that order.
#   tier   the gpu tier alone (GMJIT_REQUIRE_GPU=1), narrowed by TIER_FILTER
#   python the Python suite on torch alone
#   tests  the gpu tier outside gemm (GMJIT_REQUIRE_GPU=1; TIER_FILTER narrows it), the Python suite on torch, the per-call
#          overhead of gmjit.softmax beside torch.softmax
#   gemm   the gemm part of the gpu tier
#   stream gemm_wgmma_check --stream (the decode shapes' weights read by TMA alone, by loads, by
#          cudaMemcpy), then ncu over its --profile-decode (cuBLAS, the tiles, the streams)
#   wgmma  tests/standalone/gemm_wgmma_check (built here with nvcc, carried in the pack): the Hopper
#          family against a double reference, then --time beside cuBLAS
#   bench  bench_expr (generated kernels against a copy and the templates; BENCH_CASES narrows it,
#          e.g. "--case softmax --case silu_mul") and bench/torch_expr.py
#   gemmbench  bench_gemm over $GEMM_SHAPES (default the pack's gemm.json) against cuBLAS, GEMM_ARGS
#          adds flags; the SASS of the bf16 4096^3 winner (bench/h200_run.sh gemm)
#   search bench_tuner search: a long random search per shape of $SEARCH_SHAPES (default the pack's
#          gemm.json), every strategy replayed on it; SEARCH_ARGS adds flags (--max-shapes N, ...)
#   triton bench/triton_autotune.py on bf16 x @ W^T at $TRITON_SHAPES with $TRITON_CONFIGS configs
#   operand  bench/operand_power.py: cuBLAS (torch.mm) on random operands beside constant ones
#   compile  the machine's cores and CPU quota, then bench_compile: how 16 distinct Hopper
#          compiles scale over 1-16 threads and over as many processes (NOTES, twenty-fourth session)
set -u
# xz, whose 64 MiB window finds the LLVM code every binary carries once more in the next: a quarter
# of gzip's size. Python unpacks it, whatever the machine's tar supports.
D=/tmp/gmjit-dev; mkdir -p $D && python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .device/pack.txz $D || exit 1
export GMJIT_REQUIRE_GPU=1 LD_LIBRARY_PATH=$D:/usr/local/cuda/lib64
# One binary cache for every tier call on a warm machine (h200_run.sh makes a fresh one per call
# otherwise): the suites share most instantiations, since a shape enters them only through its
# alignment, so a split tier compiles each once. Keys hold the source and toolkit: a new pack's
# changed templates miss.
export GMJIT_TEST_BINARY_CACHE=$D/binaries.db  # in a directory of our own: the store refuses a shared one such as /tmp
# A pack built with TIER_BINARIES brings the cubins a compile-only run of the tier made; the first
# call on a machine starts from them, later ones keep what it added.
if [ -f $D/tier-binaries.db ] && [ ! -f $GMJIT_TEST_BINARY_CACHE ]; then cp $D/tier-binaries.db $GMJIT_TEST_BINARY_CACHE; fi
for part in "${@:-tests}"; do
case "$part" in
tier)
  GTEST_FILTER="${TIER_FILTER:-*}" TIER_TIMEOUT="${TIER_TIMEOUT:-400}" bash bench/h200_run.sh $D tier 2>&1 | tail -30
  mv $OUT/logs.tgz $OUT/tier_only.tgz ;;
tests|python)
  if [ "$part" = tests ]; then
    GTEST_FILTER="${TIER_FILTER:--SM90/Gemm.*:SM90/GemmWgmma.*:SM90_GemmTune.*}" TIER_TIMEOUT="${TIER_TIMEOUT:-400}" bash bench/h200_run.sh $D tier 2>&1 | tail -30
    mv $OUT/logs.tgz $OUT/tier.tgz
  fi
  export GMJIT_LIBRARY=$D/libgmjit.so.0 GMJIT_GMTUNE=$D/gmtune GMJIT_WORKER=$D/gmjit-worker PYTHONPATH=$PWD/python GMJIT_TEST_NVRTC=1 GMJIT_CACHE=$(mktemp -d)/py.db
  python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())'
  # The machine's own pytest (9.x, with its pytest_timeout plugin); an older one on PYTHONPATH
  # clashes with that plugin.
  timeout 170 python3 -m pytest python/tests -q -p no:cacheprovider -rs 2>&1 | tee $OUT/pytest.log | tail -15
  [ "$part" = tests ] && timeout 100 python3 python/bench_overhead.py 2>&1 | tee $OUT/overhead.log | tail -14 ;;
gemm)
  # 'SM90/Gemm.*' names the suite SM90/Gemm only: the Hopper family's own suite is listed too.
  GTEST_FILTER='SM90/Gemm.*:SM90/GemmWgmma.*:SM90_GemmTune.*' TIER_TIMEOUT="${TIER_TIMEOUT:-540}" bash bench/h200_run.sh $D tier 2>&1 | tail -30
  mv $OUT/logs.tgz $OUT/tier_gemm.tgz ;;
bench)
  export GMJIT_GMTUNE=$D/gmtune GMJIT_WORKER=$D/gmjit-worker
  timeout 330 $D/bench_expr --db $(mktemp -d)/bench.db ${BENCH_CASES:-} 2>&1 | tee $OUT/bench_expr.log
  timeout 200 python3 bench/torch_expr.py 2>&1 | tee $OUT/torch_expr.log | tail -12 ;;
wgmma)
  timeout 200 $D/gemm_wgmma_check 2>&1 | tee $OUT/wgmma_check.log | grep -E "FAIL|failed" | head -20
  timeout 260 $D/gemm_wgmma_check --time 2>&1 | tee $OUT/wgmma_time.log | tail -100 ;;
stream)
  # The decode shapes' weight stream (gemm_wgmma_check --stream), then ncu on cuBLAS, the tuned
  # tiles and the streams there (--profile-decode): report and its details page under $OUT.
  timeout 150 $D/gemm_wgmma_check --stream 2>&1 | tee $OUT/stream.log | tail -40
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 300 "$ncu" --clock-control none -k regex:'gemm|nvjet|stream' --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum -o $OUT/decode \
    $D/gemm_wgmma_check --profile-decode >$OUT/ncu_run.log 2>&1
  tail -5 $OUT/ncu_run.log
  "$ncu" -i $OUT/decode.ncu-rep --page details >$OUT/ncu_decode.txt 2>&1
  grep -E "^  [a-z_0-9]|Duration|DRAM Throughput|Memory Throughput" $OUT/ncu_decode.txt | head -120 ;;
gemmbench)
  GEMM_SHAPES="${GEMM_SHAPES:-$D/gemm.json}" GEMM_SGEMM=0 GEMM_TIMEOUT="${GEMM_TIMEOUT:-540}" TAIL=100 \
    bash bench/h200_run.sh $D gemm 2>&1 | tail -110
  mv $OUT/logs.tgz $OUT/gemmbench.tgz ;;
search)
  export GMJIT_GMTUNE=$D/gmtune GMJIT_WORKER=$D/gmjit-worker GMJIT_CACHE=$(mktemp -d)/search.db
  # shellcheck disable=SC2086  # extra flags, word-split on purpose
  timeout "${SEARCH_TIMEOUT:-560}" $D/bench_tuner search --kernel gemm --dtype bf16 \
    --shapes "${SEARCH_SHAPES:-$D/gemm.json}" --long-strategy random --json-out $OUT/search.json ${SEARCH_ARGS:-} \
    2>&1 | tee $OUT/search.log | grep -v '^curve,' | tail -80 ;;
triton)
  timeout "${TRITON_TIMEOUT:-300}" python3 -u bench/triton_autotune.py --dtype bf16 --trans-b 1 \
    --configs "${TRITON_CONFIGS:-24}" --shapes "${TRITON_SHAPES:-4096x4096x4096}" --time-limit "${TRITON_LIMIT:-240}" \
    --json-out $OUT/triton.json 2>&1 | tee $OUT/triton.log | tail -20 ;;
operand)
  timeout 120 python3 bench/operand_power.py 2>&1 | tee $OUT/operand_power.log ;;
compile)
  { nproc; cat /sys/fs/cgroup/cpu.max 2>/dev/null; ls -l /usr/local/cuda/lib64/libnvrtc.so*; } 2>&1 | tee $OUT/cores.log
  timeout 200 $D/bench_compile 2>&1 | tee $OUT/bench_compile.log ;;
*) echo "device_call.sh: unknown part $part (tier, tests, python, gemm, bench, stream, wgmma, gemmbench, search, triton, operand, compile)"; exit 2 ;;
esac
done
