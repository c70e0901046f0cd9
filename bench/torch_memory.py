#!/usr/bin/env python3
"""Torch's operator for every problem of a gmtune shapes file (issue 5), timed as bench_memory times
ours: fresh random inputs, an L2 flush (a write of a >= 256 MiB buffer) before every sample, CUDA
events around one call, the median of the samples. GB/s counts every input (weights and bias too)
read once and every output written once: the bytes bench_memory counts. Writes a JSON list for
`bench_memory --torch`; a shape torch cannot run (out of memory) is reported and skipped."""
import argparse
import json
import statistics
import sys

import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "u8": torch.uint8}


def uniform(shape, dtype):
    # Ours: magnitudes in [1/16, 1) with a random sign. Speed does not depend on the values; the
    # range only keeps sums and exponentials finite.
    return (torch.rand(shape, device="cuda") * 2 - 1).to(dtype)


def histogram_input(n, contention):
    # GPU MODE's data, as bench_memory's: `contention`% of the bytes are one value, the rest uniform.
    x = torch.randint(0, 256, (n,), device="cuda", dtype=torch.uint8)
    x[torch.rand(n, device="cuda") < contention / 100.0] = int(torch.randint(0, 256, ()).item())
    return x


def bincount(x):
    try:
        torch.bincount(x[:16], minlength=256)
        return "torch.bincount", lambda: torch.bincount(x, minlength=256)
    except RuntimeError:
        return "torch.bincount(x.int()), uint8 refused", lambda: torch.bincount(x.int(), minlength=256)


def candidates(kernel, dtype, s):
    """(bytes, [(op name, callable)]): the callables are timed and the fastest reported."""
    t = DTYPES[dtype]
    e = torch.empty((), dtype=t).element_size()
    if kernel == "vector_add":
        a, b = uniform(s["n"], t), uniform(s["n"], t)
        c = torch.empty_like(a)
        return 3 * s["n"] * e, [("torch.add(out=)", lambda: torch.add(a, b, out=c))]
    if kernel == "vector_sum":
        x = torch.randn(s["n"], device="cuda") * 5 + 50  # ours: randn * scale + offset
        return 4 * s["n"] + 4, [("torch.sum", lambda: torch.sum(x))]
    if kernel == "grayscale":
        h, w = s["h"], s["w"]
        x = torch.rand(h, w, 3, device="cuda")
        weights = torch.tensor([0.2989, 0.5870, 0.1140], device="cuda")
        out = torch.empty(h, w, device="cuda")
        flat = x.view(-1, 3)
        return 16 * h * w, [
            ("x.view(-1,3) @ w", lambda: torch.mv(flat, weights, out=out.view(-1))),
            ("(x * w).sum(-1)", lambda: torch.sum(x * weights, -1, out=out)),
            ("0.2989 R + 0.5870 G + 0.1140 B",
             lambda: torch.add(torch.add(x[..., 0] * 0.2989, x[..., 1], alpha=0.5870), x[..., 2], alpha=0.1140,
                               out=out)),
        ]
    if kernel == "histogram":
        x = histogram_input(s["n"], s["contention"])
        return s["n"] + 256 * 4, [bincount(x)]
    if kernel == "prefix_sum":
        x = torch.randn(s["n"], device="cuda")
        return 8 * s["n"], [("torch.cumsum", lambda: torch.cumsum(x, 0))]
    rows, cols = s["rows"], s["cols"]
    x = torch.randn(rows, cols, device="cuda", dtype=t)
    if kernel == "softmax":
        return 2 * rows * cols * e, [("torch.softmax", lambda: torch.softmax(x, -1))]
    if kernel == "rmsnorm":
        w = torch.randn(cols, device="cuda", dtype=t)
        return (2 * rows * cols + cols) * e, [
            ("F.rms_norm", lambda: torch.nn.functional.rms_norm(x, (cols,), w, eps=1e-5))]
    if kernel == "layernorm":
        w, b = torch.randn(cols, device="cuda", dtype=t), torch.randn(cols, device="cuda", dtype=t)
        return (2 * rows * cols + 2 * cols) * e, [
            ("F.layer_norm", lambda: torch.nn.functional.layer_norm(x, (cols,), w, b, eps=1e-5))]
    if kernel == "transpose":
        return 2 * rows * cols * e, [("x.t().contiguous()", lambda: x.t().contiguous())]
    raise KeyError(f"no torch operator for kernel '{kernel}'")


def median_ms(fn, flush, samples):
    fn()  # warm-up: allocator, kernel selection
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(samples):
        flush.fill_(i % 256)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def measure(kernel, dtype, shape, flush, samples):
    nbytes, ops = candidates(kernel, dtype, shape)
    timed = [(median_ms(fn, flush, samples), name) for name, fn in ops]
    ms, op = min(timed)
    entry = {"kernel": kernel, "dtype": dtype, "shape": shape, "op": op, "ms": ms, "gbps": nbytes / ms / 1e6,
             "bytes": nbytes}
    if len(timed) > 1:
        entry["alternatives"] = {name: t for t, name in timed}
    return entry


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", required=True, help="gmtune shapes file")
    parser.add_argument("--json-out", required=True)
    parser.add_argument("--kernels", default="", help="comma-separated: only these kernels")
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--flush-mib", type=int, default=256)
    args = parser.parse_args()
    if args.samples < 30 or args.flush_mib < 256:
        parser.error("--samples must be >= 30 and --flush-mib >= 256")
    if not torch.cuda.is_available():
        sys.exit("torch_memory.py: torch sees no CUDA device")
    only = set(filter(None, args.kernels.split(",")))
    flush = torch.empty(args.flush_mib << 20, dtype=torch.uint8, device="cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: median of {args.samples} samples, "
          f"{args.flush_mib} MiB written before each\n")
    print("| kernel | dtype | shape | op | ms | GB/s |\n|---|---|---|---|--:|--:|", flush=True)
    results = []
    with open(args.shapes) as f:
        sweeps = json.load(f)["sweeps"]
    for sweep in sweeps:
        kernel, dtype = sweep["kernel"], sweep["dtype"]
        if only and kernel not in only:
            continue
        for s in sweep["shapes"]:
            shape = {k: v for k, v in s.items() if k != "from"}
            label = ",".join(f"{k}={v}" for k, v in sorted(shape.items()))
            try:
                entry = measure(kernel, dtype, shape, flush, args.samples)
                print(f"| {kernel} | {dtype} | {label} | {entry['op']} | {entry['ms']:.4f} "
                      f"| {entry['gbps']:.0f} |", flush=True)
            except (RuntimeError, KeyError) as ex:  # torch.cuda.OutOfMemoryError is a RuntimeError
                why = (str(ex) or type(ex).__name__).splitlines()[0][:300]
                entry = {"kernel": kernel, "dtype": dtype, "shape": shape, "error": why}
                print(f"| {kernel} | {dtype} | {label} | ERROR: {entry['error']} | | |", flush=True)
            results.append(entry)
            torch.cuda.empty_cache()
    with open(args.json_out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
