#!/usr/bin/env python3
"""Triton's autotuner on an fp32 GEMM, the baseline for `bench_tuner wall`.

Times triton.autotune over the first --configs entries of a fixed list of triton.Config (BLOCK_M/N/K,
num_warps, num_stages) on C = A B, fp32 in and out, true fp32 arithmetic (tl.dot with
input_precision="ieee", or allow_tf32=False on an older Triton), like gmjit's sgemm.

  cold: a fresh process and an empty TRITON_CACHE_DIR: the first call compiles and benchmarks
        every config.
  warm: a second fresh process on the same cache dir: the kernels come from the disk cache,
        the autotuner benchmarks them again (its own result cache is switched off).

Wall time is the first call, from launch to synchronize, in each process. The winner is then
checked against a float64 product and timed against torch.matmul (fp32, TF32 off). Not a test:
exit status 1 only when a phase fails or the result is wrong.
Needs torch and triton with a CUDA GPU. --list prints the configs and needs neither.
"""
import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", type=int, default=48, help="how many configs of the fixed list to autotune over")
    p.add_argument("--size", type=int, default=4096, help="M = N = K unless given separately")
    p.add_argument("--m", type=int)
    p.add_argument("--n", type=int)
    p.add_argument("--k", type=int)
    p.add_argument("--phase", choices=("both", "cold", "warm"), default="both",
                   help="both: cold then warm, each in a fresh process")
    p.add_argument("--cache-dir", help="TRITON_CACHE_DIR (default: a fresh temporary dir)")
    p.add_argument("--keep-cache", action="store_true", help="keep the temporary cache dir of --phase both")
    p.add_argument("--json-out", help="write the summary as JSON to this file")
    p.add_argument("--list", action="store_true", help="print the configs and exit")
    args = p.parse_args()
    args.m = args.m or args.size
    args.n = args.n or args.size
    args.k = args.k or args.size
    if args.configs < 1:
        p.error("--configs must be at least 1")
    return args


def config_space():
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


def describe(c):
    return "BM{BLOCK_M} BN{BLOCK_N} BK{BLOCK_K} w{num_warps} s{num_stages}".format(**c)


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None and ARGS.list:
    space = config_space()
    print(f"{len(space)} configs; the first {min(ARGS.configs, len(space))} are used:")
    for i, c in enumerate(space[:ARGS.configs]):
        print(f"{i:4d} {describe(c)}")
    sys.exit(0)
if ARGS is not None and ARGS.phase != "both":
    # Before triton is imported: it reads these when it first touches its caches.
    if ARGS.cache_dir:
        os.environ["TRITON_CACHE_DIR"] = ARGS.cache_dir
    os.environ["TRITON_CACHE_AUTOTUNING"] = "0"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _sgemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
           EVEN_K: tl.constexpr, IEEE: tl.constexpr):
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


def dot_takes_input_precision():
    import inspect
    try:
        return "input_precision" in inspect.signature(tl.dot).parameters
    except (TypeError, ValueError):
        return int(triton.__version__.split(".")[0]) >= 3


def build_autotuned(configs, failures):
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
    return triton.autotune(configs=triton_configs, key=["M", "N", "K"], **kwargs)(heuristics(_sgemm))


def first_quantile(value):
    if isinstance(value, (list, tuple)):
        return float(value[0])
    return float(value)


def run_phase(args):
    began = time.perf_counter()
    import torch

    if not torch.cuda.is_available():
        print("triton_autotune: no CUDA device", file=sys.stderr)
        return 1, None
    # fp32 everywhere: torch.matmul must not use TF32 either (the float64 check below would show it).
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    else:
        torch.set_float32_matmul_precision("highest")

    space = config_space()
    configs = space[:args.configs]
    if len(configs) < args.configs:
        print(f"only {len(configs)} configs in the list; using all of them")
    ieee = dot_takes_input_precision()
    failures = []
    kernel = build_autotuned(configs, failures)
    cache_dir = os.environ.get("TRITON_CACHE_DIR", "")
    cached_before = sum(len(files) for _, _, files in os.walk(cache_dir)) if cache_dir else 0

    m, n, k = args.m, args.n, args.k
    gen = torch.Generator(device="cuda").manual_seed(5)
    a = torch.rand((m, k), device="cuda", dtype=torch.float32, generator=gen) * 2 - 1
    b = torch.rand((k, n), device="cuda", dtype=torch.float32, generator=gen) * 2 - 1

    def matmul():
        c = torch.empty((m, n), device="cuda", dtype=torch.float32)
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
        kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                     GROUP_M=8, IEEE=ieee)
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

    # Against float64: TF32 anywhere would show as ~1e-3; fp32 over k = 4096 stays near 1e-6.
    ref = a.double() @ b.double()
    ref_norm = ref.norm().item()

    def rel_err(x):
        return ((x.double() - ref).norm() / ref_norm).item()

    from triton.testing import do_bench
    triton_ms = first_quantile(do_bench(matmul, quantiles=[0.5]))
    torch_ms = first_quantile(do_bench(lambda: torch.matmul(a, b), quantiles=[0.5]))
    triton_err = rel_err(c)
    torch_err = rel_err(torch.matmul(a, b))
    tolerance = 1e-4
    flops = 2.0 * m * n * k

    summary = {
        "phase": args.phase, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "shape": [m, n, k], "dot_precision": "ieee" if ieee else "allow_tf32=False",
        "cache_dir": cache_dir, "cache_files_before": cached_before, "configs": len(configs),
        "benchmarked": benchmarked, "failures": failures, "wall_s": wall,
        "s_per_config": wall / len(configs), "autotune_bench_s": getattr(kernel, "bench_time", None),
        "setup_s": setup_s, "best_config": str(best), "best_autotune_ms": best_autotune_ms,
        "triton_ms": triton_ms, "torch_ms": torch_ms, "triton_rel_err": triton_err, "torch_rel_err": torch_err,
        "tolerance": tolerance, "correct": triton_err <= tolerance and torch_err <= tolerance,
    }
    print(f"{args.phase}: {len(configs)} configs ({benchmarked} benchmarked, {len(failures)} failed) in {wall:.2f} s "
          f"= {wall / len(configs):.3f} s per config; setup (imports, inputs) {setup_s:.1f} s; "
          f"{cached_before} files in the cache dir before")
    for f in failures[:5]:
        print(f"  failed: {f}")
    print(f"best {best}: autotune {best_autotune_ms:.4f} ms, re-timed {triton_ms:.4f} ms "
          f"({flops / triton_ms / 1e9:.2f} TFLOP/s); torch.matmul fp32 {torch_ms:.4f} ms "
          f"({flops / torch_ms / 1e9:.2f} TFLOP/s): {torch_ms / triton_ms:.2f}x torch")
    print(f"relative L2 error vs float64: triton {triton_err:.2e}, torch {torch_err:.2e} (tolerance {tolerance:.0e})")
    if args.json_out:
        with open(args.json_out, "w") as out:
            json.dump(summary, out, indent=2)
    return (0 if summary["correct"] and best is not None else 1), summary


def print_table(rows):
    print("\n| phase | configs | benchmarked | wall s | s per config | autotune bench s | best config | best ms "
          "| torch.matmul ms | vs torch | rel err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        bench_s = r["autotune_bench_s"]
        print(f"| {r['phase']} | {r['configs']} | {r['benchmarked']} | {r['wall_s']:.2f} | {r['s_per_config']:.3f} "
              f"| {'-' if bench_s is None else f'{bench_s:.2f}'} | {r['best_config']} | {r['triton_ms']:.4f} "
              f"| {r['torch_ms']:.4f} | {r['torch_ms'] / r['triton_ms']:.2f} | {r['triton_rel_err']:.1e} |")


def run_both(args):
    """Cold, then warm, each in a fresh interpreter (Triton also caches compiled kernels in memory)."""
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="gmjit-triton-cache-")
    if os.listdir(cache_dir):
        print(f"warning: {cache_dir} is not empty: the cold run is not cold")
    work = tempfile.mkdtemp(prefix="gmjit-triton-json-")
    print(f"triton_autotune: {args.configs} configs, fp32 {args.m}x{args.n}x{args.k}, TRITON_CACHE_DIR={cache_dir}")
    env = dict(os.environ, TRITON_CACHE_DIR=cache_dir, TRITON_CACHE_AUTOTUNING="0")
    rows, status = [], 0
    for phase in ("cold", "warm"):
        out = os.path.join(work, f"{phase}.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase, "--cache-dir", cache_dir,
               "--configs", str(args.configs), "--m", str(args.m), "--n", str(args.n), "--k", str(args.k),
               "--json-out", out]
        sys.stdout.flush()
        started = time.perf_counter()
        rc = subprocess.run(cmd, env=env).returncode
        process_s = time.perf_counter() - started
        if not os.path.exists(out):
            print(f"{phase}: failed (exit {rc})")
            status = 1
            continue
        with open(out) as f:
            row = json.load(f)
        row["process_s"] = process_s
        rows.append(row)
        status |= rc != 0
    if rows:
        print(f"\ndevice {rows[0]['device']}, torch {rows[0]['torch']}, triton {rows[0]['triton']}, "
              f"tl.dot {rows[0]['dot_precision']}; wall s: the first call (compiles + autotuning), not the imports")
        print_table(rows)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"benchmark": "triton_autotune", "options": vars(args), "rows": rows}, f, indent=2)
    shutil.rmtree(work, ignore_errors=True)
    if not args.cache_dir and not args.keep_cache:
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
