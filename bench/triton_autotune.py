#!/usr/bin/env python3
"""Triton's autotuner on a GEMM, the baseline for `bench_tuner wall` (fp32) and for gmjit's 16-bit gemm.

Times triton.autotune over the first --configs entries of a fixed list of triton.Config (BLOCK_M/N/K,
num_warps, num_stages) on one GEMM, C[m,n] = A[m,k] B with A row-major:

  --dtype fp32 (default): fp32 in and out, true fp32 arithmetic (tl.dot with input_precision="ieee",
        or allow_tf32=False on an older Triton), like gmjit's sgemm; the list of 232 configs made for it.
  --dtype bf16 / fp16: 16-bit in and out, tl.dot on the tensor cores with an fp32 accumulator, like
        gmjit's gemm; a list of 112 configs made for Hopper (sm_90): tiles of 64..256, BLOCK_K up to
        128, 3 to 5 stages, 4 or 8 warps.
  --trans-b, as gmjit's gemm's trans_b: 0 stores B as k x n (C = A B), 1 stores it as n x k, the
        layout of a weight matrix (C = A B^T). The kernel reads B^T through B's strides, no copy.
        Default 1 for the 16-bit dtypes (gmjit's bf16 sweeps use it), 0 for fp32 (as before).

  cold: a fresh process and an empty TRITON_CACHE_DIR: the first call compiles and benchmarks
        every config.
  warm: a second fresh process on the same cache dir: the kernels come from the disk cache,
        the autotuner benchmarks them again (its own result cache is switched off).

Wall time is the first call, from launch to synchronize, in each process. The winner is then
checked against a float64 product of the same (rounded) inputs and timed against torch.matmul in
the same dtype and layout (cuBLAS; fp32 with TF32 off, 16-bit at torch's defaults, which allow
cuBLAS reduced-precision split-k reductions as bench_gemm's cublasGemmEx does; the JSON records
the flag), both by the median of triton.testing.do_bench. The check: fp32, relative L2 error
<= 1e-4 (TF32 would show as ~1e-3); 16-bit, max |error| <= tol * max |reference| with tol 1e-2
for bf16 and 2e-3 for fp16 (rounding the fp32 accumulator to the output alone costs up to 2^-8
resp. 2^-11 of a value). The table's winner and TFLOP/s are the cold phase's.

--shapes "MxNxK,..." runs the cold + warm pair for each shape in turn, every shape on its own
fresh, empty cache dir, so each shape's cold time counts its own compiles; --time-limit stops
starting new shapes once that many seconds have passed (a started shape runs both phases) and
names the ones skipped. One table at the end, one row a shape; --json-out holds those rows
("shapes"), the per-phase rows ("rows") and the skipped shapes.

Not a test: exit status 1 only when a phase fails or a result is wrong.
Needs torch and triton with a CUDA GPU. --list prints the configs and needs neither.

  python3 -u bench/triton_autotune.py --dtype bf16 --trans-b 1 --configs 24 \\
      --shapes 4096x4096x4096,2048x6144x4096,8192x8192x8192,512x4096x4096 --time-limit 200 --json-out t.json
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

DTYPES = ("fp32", "bf16", "fp16")
# max |error| / max |reference| a 16-bit result may show; see the docstring.
TOLERANCE_16 = {"bf16": 1e-2, "fp16": 2e-3}
# Shared memory an sm_90 block may use (H100 and H200 alike).
SMEM_LIMIT = 227 * 1024


def parse_shapes(text, p):
    shapes = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)[xX](\d+)[xX](\d+)\s*", item)
        if not match:
            p.error(f"--shapes: {item.strip()!r} is not MxNxK (e.g. 4096x4096x4096)")
        shape = tuple(int(v) for v in match.groups())
        if min(shape) < 1:
            p.error(f"--shapes: {item.strip()!r} has a zero dimension")
        shapes.append(shape)
    return shapes


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", type=int, default=48, help="how many configs of the fixed list to autotune over")
    p.add_argument("--dtype", choices=DTYPES, default="fp32", help="element type of A, B and C (default fp32)")
    p.add_argument("--trans-b", type=int, choices=(0, 1),
                   help="1: B is stored n x k and C = A B^T; 0: B is k x n (default 1 for bf16/fp16, 0 for fp32)")
    p.add_argument("--size", type=int, default=4096, help="M = N = K unless given separately")
    p.add_argument("--m", type=int)
    p.add_argument("--n", type=int)
    p.add_argument("--k", type=int)
    p.add_argument("--shapes", help="comma-separated MxNxK list, run in turn (instead of --size/--m/--n/--k)")
    p.add_argument("--time-limit", type=float, default=0,
                   help="seconds after which no new shape is started (0: no limit)")
    p.add_argument("--phase", choices=("both", "cold", "warm"), default="both",
                   help="both: cold then warm, each in a fresh process")
    p.add_argument("--cache-dir", help="TRITON_CACHE_DIR (default: a fresh temporary dir per shape; with several "
                                       "shapes, one subdirectory MxNxK of it per shape)")
    p.add_argument("--keep-cache", action="store_true", help="keep the temporary cache dirs of --phase both")
    p.add_argument("--json-out", help="write the summary as JSON to this file")
    p.add_argument("--list", action="store_true", help="print the configs (of --dtype's list) and exit")
    args = p.parse_args()
    if args.shapes is not None:
        if args.m or args.n or args.k:
            p.error("give either --shapes or --m/--n/--k, not both")
        args.shapes = parse_shapes(args.shapes, p)
    else:
        args.shapes = [(args.m or args.size, args.n or args.size, args.k or args.size)]
    if min(min(s) for s in args.shapes) < 1:
        p.error("every dimension must be at least 1")
    # A phase on its own is one process; a second shape in it would find the first one's kernels.
    if args.phase != "both" and len(args.shapes) > 1:
        p.error("--phase cold/warm runs one shape; give several with --phase both")
    args.m, args.n, args.k = args.shapes[0]
    if args.trans_b is None:
        args.trans_b = 0 if args.dtype == "fp32" else 1
    if args.configs < 1:
        p.error("--configs must be at least 1")
    if args.time_limit < 0:
        p.error("--time-limit must be >= 0")
    return args


def config_space_fp32():
    """Every config worth compiling, in a fixed shuffled order so any prefix mixes tile shapes,
    warps and stages (the first 32 are not all 32x32 tiles)."""
    space = []
    for bm in (32, 64, 128):
        for bn in (32, 64, 128):
            for bk in (16, 32, 64):
                for warps in (2, 4, 8):
                    for stages in (2, 3, 4):
                        # fp32 A and B tiles per pipeline stage; an H200 block may use 227 KiB.
                        if (bm * bk + bk * bn) * 4 * stages > 200 * 1024:
                            continue
                        # More than 128 fp32 accumulators a thread spills, as more than tm*tn = 64
                        # would in gmjit's sgemm, whose domain stops there.
                        if bm * bn // (32 * warps) > 128:
                            continue
                        space.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk,
                                      "num_warps": warps, "num_stages": stages})
    random.Random(4).shuffle(space)
    return space


def config_space_16():
    """Configs for a 16-bit GEMM on Hopper tensor cores (wgmma wants 4-warp groups, hence 4 or 8
    warps; tiles of 64 and up), in a fixed shuffled order. Seed 0: the first 8 hold 8 of the 9
    BLOCK_M x BLOCK_N tiles, the first 12 all three BLOCK_K, the first 16 every tile."""
    space = []
    for bm in (64, 128, 256):
        for bn in (64, 128, 256):
            for bk in (32, 64, 128):
                for warps in (4, 8):
                    for stages in (3, 4, 5):
                        # 2-byte A and B tiles in every pipeline stage must fit a block's shared memory;
                        # Triton would otherwise fail the config at launch (OutOfResources).
                        if stages * (bm + bn) * bk * 2 > SMEM_LIMIT:
                            continue
                        # fp32 accumulators a thread holds. 256 already exceed the 255 registers a thread
                        # may have, so those configs spill; they stay, timed as a user's list would be.
                        if bm * bn // (32 * warps) > 256:
                            continue
                        space.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk,
                                      "num_warps": warps, "num_stages": stages})
    random.Random(0).shuffle(space)
    return space


def config_space(dtype="fp32"):
    return config_space_fp32() if dtype == "fp32" else config_space_16()


def element_bytes(dtype):
    return 4 if dtype == "fp32" else 2


def describe(c):
    return "BM{BLOCK_M} BN{BLOCK_N} BK{BLOCK_K} w{num_warps} s{num_stages}".format(**c)


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None and ARGS.list:
    space = config_space(ARGS.dtype)
    size = element_bytes(ARGS.dtype)
    kind = "fp32" if ARGS.dtype == "fp32" else "16-bit (bf16, fp16)"
    print(f"{len(space)} {kind} configs; the first {min(ARGS.configs, len(space))} are used:")
    for i, c in enumerate(space[:ARGS.configs]):
        smem = c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * size
        acc = c["BLOCK_M"] * c["BLOCK_N"] // (32 * c["num_warps"])
        print(f"{i:4d} {describe(c):<24} smem {smem / 1024:6.1f} KiB, {acc:3d} accumulators a thread")
    sys.exit(0)
if ARGS is not None and ARGS.phase != "both":
    # Before triton is imported: it reads these when it first touches its caches.
    if ARGS.cache_dir:
        os.environ["TRITON_CACHE_DIR"] = ARGS.cache_dir
    os.environ["TRITON_CACHE_AUTOTUNING"] = "0"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _grouped_tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # Grouped launch order (Triton's matmul tutorial) so neighbouring blocks share A rows in L2.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _sgemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
           EVEN_K: tl.constexpr, IEEE: tl.constexpr):
    pid_m, pid_n = _grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    # Rows and columns past the edge wrap around instead of being masked; the store masks them.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - kt * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - kt * BLOCK_K, other=0.0)
        # A constexpr branch: only the spelling this Triton knows is ever compiled.
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc += tl.dot(a, b, allow_tf32=False)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


# A kernel of its own rather than a dtype switch in _sgemm: the fp32 baseline keeps compiling the
# exact source it was measured with.
@triton.jit
def _gemm16(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
            EVEN_K: tl.constexpr):
    pid_m, pid_n = _grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    # Rows and columns past the edge wrap around instead of being masked; the store masks them.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    # B is read as the k x n matrix B^T when trans_b=1: its strides arrive swapped. A unit stride
    # is specialized by Triton's launcher as a constant 1, so either layout loads vectorized.
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - kt * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - kt * BLOCK_K, other=0.0)
        # 16-bit operands on the tensor cores, fp32 accumulator (tl.dot's default out_dtype).
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def dot_takes_input_precision():
    import inspect
    try:
        return "input_precision" in inspect.signature(tl.dot).parameters
    except (TypeError, ValueError):
        return int(triton.__version__.split(".")[0]) >= 3


def build_autotuned(configs, failures, kernel=None):
    """triton.autotune over `configs`; a config whose compile fails in a way the autotuner does not
    expect is recorded and timed as infinitely slow instead of ending the run."""
    import inspect
    from triton.testing import do_bench

    def bench(kernel_call, *args, **kwargs):
        try:
            return do_bench(kernel_call, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - any failure of one config must not stop the others
            failures.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200])
            quantiles = kwargs.get("quantiles")
            return [math.inf] * len(quantiles) if quantiles else math.inf

    triton_configs = [triton.Config({"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"], "BLOCK_K": c["BLOCK_K"]},
                                    num_warps=c["num_warps"], num_stages=c["num_stages"]) for c in configs]
    kwargs = {}
    # do_bench= exists since Triton 3.2; older ones benchmark with the same triton.testing.do_bench.
    if "do_bench" in inspect.signature(triton.autotune).parameters:
        kwargs["do_bench"] = bench
    heuristics = triton.heuristics({"EVEN_K": lambda meta: meta["K"] % meta["BLOCK_K"] == 0})
    return triton.autotune(configs=triton_configs, key=["M", "N", "K"], **kwargs)(heuristics(kernel or _sgemm))


def first_quantile(value):
    if isinstance(value, (list, tuple)):
        return float(value[0])
    return float(value)


def winner_of(best):
    """A triton.Config as describe() writes a config; None when the autotuner picked none."""
    if best is None:
        return None
    try:
        return describe(dict(best.kwargs, num_warps=best.num_warps, num_stages=best.num_stages))
    except (AttributeError, KeyError, TypeError):
        return str(best)


def tflops(flops, ms):
    # None, not NaN, for a missing time: the JSON stays standard.
    return flops / ms / 1e9 if ms and math.isfinite(ms) and ms > 0 else None


def run_phase(args):
    began = time.perf_counter()
    import torch

    if not torch.cuda.is_available():
        print("triton_autotune: no CUDA device", file=sys.stderr)
        return 1, None
    # fp32 everywhere: torch.matmul must not use TF32 either (the float64 check below would show it).
    # The 16-bit products leave torch at its defaults, cuBLAS as a user (and bench_gemm) gets it.
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    else:
        torch.set_float32_matmul_precision("highest")

    dtype = args.dtype
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    space = config_space(dtype)
    configs = space[:args.configs]
    if len(configs) < args.configs:
        print(f"only {len(configs)} configs in the list; using all of them")
    ieee = dot_takes_input_precision() if dtype == "fp32" else False
    failures = []
    kernel = build_autotuned(configs, failures, _sgemm if dtype == "fp32" else _gemm16)
    cache_dir = os.environ.get("TRITON_CACHE_DIR", "")
    cached_before = sum(len(files) for _, _, files in os.walk(cache_dir)) if cache_dir else 0

    m, n, k = args.m, args.n, args.k
    trans_b = args.trans_b
    gen = torch.Generator(device="cuda").manual_seed(5)
    # Drawn in fp32 and rounded once, so both dtypes see the same values up to their rounding.
    a = (torch.rand((m, k), device="cuda", dtype=torch.float32, generator=gen) * 2 - 1).to(torch_dtype)
    b = (torch.rand((n, k) if trans_b else (k, n), device="cuda", dtype=torch.float32, generator=gen) * 2 - 1
         ).to(torch_dtype)
    # The k x n operand: a transposed view of the n x k weights, which neither kernel copies.
    b_kn = b.t() if trans_b else b

    def matmul():
        c = torch.empty((m, n), device="cuda", dtype=torch_dtype)
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
        extra = {"IEEE": ieee} if dtype == "fp32" else {}
        kernel[grid](a, b_kn, c, m, n, k, a.stride(0), a.stride(1), b_kn.stride(0), b_kn.stride(1),
                     c.stride(0), c.stride(1), GROUP_M=8, **extra)
        return c

    torch.cuda.synchronize()
    setup_s = time.perf_counter() - began
    start = time.perf_counter()
    c = matmul()
    torch.cuda.synchronize()
    wall = time.perf_counter() - start

    timings = {str(cfg): first_quantile(t) for cfg, t in (getattr(kernel, "configs_timings", None) or {}).items()}
    benchmarked = sum(1 for t in timings.values() if math.isfinite(t))
    best = getattr(kernel, "best_config", None)
    best_autotune_ms = timings.get(str(best), math.nan)

    # Against float64 of the inputs as stored: fp32 with TF32 anywhere would show as ~1e-3 (fp32
    # over k = 4096 stays near 1e-6); a 16-bit result is off by its own rounding, so it is judged
    # by its worst element against the largest reference value.
    ref = a.double() @ b_kn.double()
    ref_norm = ref.norm().item()
    ref_max = ref.abs().max().item()

    def rel_err(x):
        return ((x.double() - ref).norm() / ref_norm).item()

    def max_err(x):
        return ((x.double() - ref).abs().max() / ref_max).item()

    from triton.testing import do_bench
    triton_ms = first_quantile(do_bench(matmul, quantiles=[0.5]))
    torch_ms = first_quantile(do_bench(lambda: torch.matmul(a, b_kn), quantiles=[0.5]))
    torch_c = torch.matmul(a, b_kn)
    triton_err, torch_err = rel_err(c), rel_err(torch_c)
    triton_max_err, torch_max_err = max_err(c), max_err(torch_c)
    del torch_c
    if dtype == "fp32":
        check, tolerance = "relative L2 error vs float64", 1e-4
        triton_checked, torch_checked = triton_err, torch_err
    else:
        check, tolerance = "max |error| / max |float64 reference|", TOLERANCE_16[dtype]
        triton_checked, torch_checked = triton_max_err, torch_max_err
    # NaN compares false: a NaN anywhere fails the check.
    triton_correct = bool(triton_checked <= tolerance)
    torch_correct = bool(torch_checked <= tolerance)
    flops = 2.0 * m * n * k
    if dtype == "fp32":
        dot_precision = "ieee" if ieee else "allow_tf32=False"
    else:
        dot_precision = f"{dtype} operands, fp32 accumulator"
    reduced = getattr(torch.backends.cuda.matmul, f"allow_{dtype}_reduced_precision_reduction", None)

    summary = {
        "phase": args.phase, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "dtype": dtype, "trans_b": trans_b, "m": m, "n": n, "k": k,
        "shape": [m, n, k], "dot_precision": dot_precision,
        "torch_reduced_precision_reduction": reduced,
        "cache_dir": cache_dir, "cache_files_before": cached_before, "configs": len(configs),
        "benchmarked": benchmarked, "failures": failures, "wall_s": wall,
        "s_per_config": wall / len(configs), "autotune_bench_s": getattr(kernel, "bench_time", None),
        "setup_s": setup_s, "best_config": str(best), "winner": winner_of(best), "best_autotune_ms": best_autotune_ms,
        "triton_ms": triton_ms, "torch_ms": torch_ms,
        "triton_tflops": tflops(flops, triton_ms), "torch_tflops": tflops(flops, torch_ms),
        "triton_rel_err": triton_err, "torch_rel_err": torch_err,
        "triton_max_err": triton_max_err, "torch_max_err": torch_max_err,
        "check": check, "tolerance": tolerance, "triton_correct": triton_correct, "torch_correct": torch_correct,
        "correct": triton_correct and torch_correct,
    }
    label = f"{dtype} trans_b={trans_b} {m}x{n}x{k}"
    print(f"{args.phase} {label}: {len(configs)} configs ({benchmarked} benchmarked, {len(failures)} failed) "
          f"in {wall:.2f} s = {wall / len(configs):.3f} s per config; setup (imports, inputs) {setup_s:.1f} s; "
          f"{cached_before} files in the cache dir before")
    for f in failures[:5]:
        print(f"  failed: {f}")
    print(f"best {summary['winner']}: autotune {best_autotune_ms:.4f} ms, re-timed {triton_ms:.4f} ms "
          f"({number(summary['triton_tflops'], '.2f')} TFLOP/s); torch.matmul {dtype} {torch_ms:.4f} ms "
          f"({number(summary['torch_tflops'], '.2f')} TFLOP/s): {torch_ms / triton_ms:.2f}x torch")
    print(f"check ({check}): triton {triton_checked:.2e} {'ok' if triton_correct else 'FAILED'}, "
          f"torch {torch_checked:.2e} {'ok' if torch_correct else 'FAILED'} (tolerance {tolerance:.0e}); "
          f"relative L2 error triton {triton_err:.2e}, torch {torch_err:.2e}")
    if args.json_out:
        with open(args.json_out, "w") as out:
            json.dump(summary, out, indent=2)
    return (0 if summary["correct"] and best is not None else 1), summary


def print_table(rows):
    print("\n| phase | configs | benchmarked | wall s | s per config | autotune bench s | best config | best ms "
          "| torch.matmul ms | vs torch | rel err | check |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        bench_s = r["autotune_bench_s"]
        print(f"| {r['phase']} | {r['configs']} | {r['benchmarked']} | {r['wall_s']:.2f} | {r['s_per_config']:.3f} "
              f"| {'-' if bench_s is None else f'{bench_s:.2f}'} | {r.get('winner') or r['best_config']} "
              f"| {r['triton_ms']:.4f} | {r['torch_ms']:.4f} | {r['torch_ms'] / r['triton_ms']:.2f} | {r['triton_rel_err']:.1e} "
              f"| {'ok' if r['correct'] else 'FAILED'} |")


def number(value, spec):
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def print_shape_table(shapes):
    print("\n| m | n | k | dtype | trans_b | configs | cold s | warm s | winner | triton TFLOP/s | torch TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in shapes:
        print(f"| {s['m']} | {s['n']} | {s['k']} | {s['dtype']} | {s['trans_b']} | {s['configs']} "
              f"| {number(s['cold_s'], '.2f')} | {number(s['warm_s'], '.2f')} | {s['winner'] or '-'} "
              f"| {number(s['triton_tflops'], '.1f')} | {number(s['torch_tflops'], '.1f')} |")


def run_shape(args, m, n, k, cache_dir, work):
    """Cold, then warm, each in a fresh interpreter (Triton also caches compiled kernels in memory).
    Returns the phase rows that came back and whether every phase succeeded."""
    if os.listdir(cache_dir):
        print(f"warning: {cache_dir} is not empty: the cold run is not cold")
    print(f"\ntriton_autotune: {args.configs} configs, {args.dtype} trans_b={args.trans_b} {m}x{n}x{k}, "
          f"TRITON_CACHE_DIR={cache_dir}")
    env = dict(os.environ, TRITON_CACHE_DIR=cache_dir, TRITON_CACHE_AUTOTUNING="0")
    rows, ok = [], True
    for phase in ("cold", "warm"):
        out = os.path.join(work, f"{m}x{n}x{k}-{phase}.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase, "--cache-dir", cache_dir,
               "--configs", str(args.configs), "--dtype", args.dtype, "--trans-b", str(args.trans_b),
               "--m", str(m), "--n", str(n), "--k", str(k), "--json-out", out]
        sys.stdout.flush()
        started = time.perf_counter()
        rc = subprocess.run(cmd, env=env).returncode
        process_s = time.perf_counter() - started
        if not os.path.exists(out):
            print(f"{phase} {m}x{n}x{k}: failed (exit {rc}), no summary")
            ok = False
            continue
        with open(out) as f:
            row = json.load(f)
        row["process_s"] = process_s
        rows.append(row)
        ok = ok and rc == 0
    if rows:
        print(f"\ndevice {rows[0]['device']}, torch {rows[0]['torch']}, triton {rows[0]['triton']}, "
              f"tl.dot {rows[0]['dot_precision']}; wall s: the first call (compiles + autotuning), not the imports")
        print_table(rows)
    return rows, ok


def shape_row(args, m, n, k, cache_dir, rows, ok):
    """One line of the final table: the cold phase's winner and speeds (the warm phase's when cold
    left no summary); the warm winner is kept too, as noise may pick another."""
    by_phase = {r["phase"]: r for r in rows}
    cold, warm = by_phase.get("cold"), by_phase.get("warm")
    main_row = cold or warm or {}
    return {
        "m": m, "n": n, "k": k, "dtype": args.dtype, "trans_b": args.trans_b,
        "configs": main_row.get("configs", args.configs),
        "cold_s": cold["wall_s"] if cold else None, "warm_s": warm["wall_s"] if warm else None,
        "winner": main_row.get("winner"), "warm_winner": warm.get("winner") if warm else None,
        "triton_ms": main_row.get("triton_ms"), "torch_ms": main_row.get("torch_ms"),
        "triton_tflops": main_row.get("triton_tflops"), "torch_tflops": main_row.get("torch_tflops"),
        "failures": len(main_row.get("failures", [])),
        "correct": ok and all(r.get("correct") for r in rows) and len(rows) == 2,
        "cache_dir": cache_dir,
    }


def run_both(args):
    began = time.perf_counter()
    work = tempfile.mkdtemp(prefix="gmjit-triton-json-")
    phase_rows, shapes, skipped, made, status = [], [], [], [], 0
    for index, (m, n, k) in enumerate(args.shapes):
        elapsed = time.perf_counter() - began
        if args.time_limit and elapsed >= args.time_limit:
            skipped = [f"{sm}x{sn}x{sk}" for sm, sn, sk in args.shapes[index:]]
            print(f"\n--time-limit {args.time_limit:g} s reached after {elapsed:.0f} s: "
                  f"not started: {', '.join(skipped)}")
            break
        # A fresh, empty cache per shape: its cold phase must compile everything itself.
        if not args.cache_dir:
            cache_dir = tempfile.mkdtemp(prefix=f"gmjit-triton-cache-{m}x{n}x{k}-")
            made.append(cache_dir)
        elif len(args.shapes) == 1:
            cache_dir = args.cache_dir
        else:
            cache_dir = os.path.join(args.cache_dir, f"{m}x{n}x{k}")
        os.makedirs(cache_dir, exist_ok=True)
        rows, ok = run_shape(args, m, n, k, cache_dir, work)
        phase_rows.extend(rows)
        row = shape_row(args, m, n, k, cache_dir, rows, ok)
        shapes.append(row)
        status |= not row["correct"]
        warm_note = "" if row["warm_winner"] in (None, row["winner"]) else f" (warm picked {row['warm_winner']})"
        print(f"{m}x{n}x{k} {args.dtype} trans_b={args.trans_b}: cold {number(row['cold_s'], '.2f')} s, "
              f"warm {number(row['warm_s'], '.2f')} s, winner {row['winner']}{warm_note}, "
              f"{number(row['triton_tflops'], '.1f')} TFLOP/s vs torch {number(row['torch_tflops'], '.1f')}; "
              f"check {'passed' if row['correct'] else 'FAILED'}")
    total_s = time.perf_counter() - began
    if shapes:
        print(f"\n{len(shapes)} of {len(args.shapes)} shapes in {total_s:.0f} s; cold s / warm s: the first call "
              f"(compiles + autotuning) of each phase; winner and TFLOP/s: the cold phase's, median of do_bench")
        print_shape_table(shapes)
        failed = [f"{s['m']}x{s['n']}x{s['k']}" for s in shapes if not s["correct"]]
        print(f"check: {'passed for every shape' if not failed else 'FAILED for ' + ', '.join(failed)}")
    if skipped:
        print(f"skipped (--time-limit {args.time_limit:g} s): {', '.join(skipped)}")
    if args.json_out:
        options = dict(vars(args), shapes=[f"{m}x{n}x{k}" for m, n, k in args.shapes])
        with open(args.json_out, "w") as f:
            json.dump({"benchmark": "triton_autotune", "options": options, "total_s": total_s,
                       "shapes": shapes, "skipped": skipped, "rows": phase_rows}, f, indent=2)
    shutil.rmtree(work, ignore_errors=True)
    if args.keep_cache:
        for cache_dir in made:
            print(f"kept {cache_dir}")
    else:
        for cache_dir in made:
            shutil.rmtree(cache_dir, ignore_errors=True)
    return status


def main(args):
    if args.phase == "both":
        return run_both(args)
    if args.cache_dir:
        os.makedirs(args.cache_dir, exist_ok=True)
        if args.phase == "cold" and os.listdir(args.cache_dir):
            print(f"warning: {args.cache_dir} is not empty: the cold run is not cold")
    status, summary = run_phase(args)
    if summary is not None:
        print(f"\ndevice {summary['device']}, torch {summary['torch']}, triton {summary['triton']}, "
              f"tl.dot {summary['dot_precision']}, TRITON_CACHE_DIR={summary['cache_dir']}")
        print_table([summary])
    return status


if __name__ == "__main__":
    sys.exit(main(ARGS))
