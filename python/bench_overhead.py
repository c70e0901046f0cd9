"""Per-call cost of gmjit.softmax(x) on a small tensor beside torch.softmax's, in one run on one
GPU: each path called `--calls` times back to back and synchronized once, so on a tensor this
small the time is the host's per-call overhead (launch-bound); median of `--repeats` rounds,
the paths interleaved. Not a test: it prints a table."""

import argparse
import statistics
import time

import torch

import gmjit


def per_call_us(fn, calls):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--cols", type=int, default=128)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--cache", default=None, help="cache file (default: gmjit's default)")
    args = parser.parse_args()
    gmjit.configure(cache=args.cache, miss_policy="nearest")
    x = torch.randn(args.rows, args.cols, device="cuda")
    y = torch.empty_like(x)
    paths = {
        "torch.softmax(x, -1)": lambda: torch.softmax(x, -1),
        "gmjit.softmax(x)": lambda: gmjit.softmax(x),
        "gmjit.softmax(x, out=y)": lambda: gmjit.softmax(x, out=y),
        "torch.ops.gmjit.softmax(x)": lambda: torch.ops.gmjit.softmax(x),
    }
    torch.testing.assert_close(gmjit.softmax(x), torch.softmax(x, -1))  # also the first launch, off the clock
    samples = {name: [] for name in paths}
    for _ in range(args.repeats):
        for name, fn in paths.items():
            samples[name].append(per_call_us(fn, args.calls))
    base = statistics.median(samples["torch.softmax(x, -1)"])
    print(f"per-call time, softmax of {args.rows}x{args.cols} fp32 on {torch.cuda.get_device_name()}, "
          f"{args.calls} calls back to back, median of {args.repeats}")
    print(f"{'path':32} {'us/call':>9} {'vs torch':>9}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:32} {median:9.2f} {median / base:8.2f}x")


if __name__ == "__main__":
    main()
