"""torch eager and torch.compile of the chains bench_expr generates (issue 20): silu(a) * b and
the rmsnorm chain x * rsqrt(mean(x^2) + eps) * w, bf16, the same shapes, each sample one call
after a 256 MiB L2 flush, median of --samples. Prints a table; run beside bench_expr in one call so
the ratios compare one GPU's numbers."""

import argparse
import statistics

import torch


def silu_mul(a, b):
    return torch.nn.functional.silu(a) * b


def rmsnorm(x, w):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * w


def median_ms(fn, args, samples):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(samples):
        flush.zero_()
        start.record()
        fn(*args)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    torch.manual_seed(0)
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    cases = [
        ("silu_mul", silu_mul, (torch.randn(8192, 14336, **bf16), torch.randn(8192, 14336, **bf16)), 3),
        ("rmsnorm", rmsnorm, (torch.randn(16384, 4096, **bf16), torch.randn(4096, **bf16)), 2),
    ]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print("| case | path | ms | GB/s (bf16 tensors read and written once) |\n|---|---|--:|--:|")
    for name, fn, inputs, tensors in cases:
        bytes_moved = tensors * inputs[0].numel() * 2
        for path, callable_ in (("eager", fn), ("torch.compile", torch.compile(fn, fullgraph=True))):
            ms = median_ms(callable_, inputs, args.samples)
            print(f"| {name} | {path} | {ms:.4f} | {bytes_moved / ms / 1e6:.0f} |", flush=True)


if __name__ == "__main__":
    main()
