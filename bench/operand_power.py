"""How much a GEMM's time depends on its operands' values: torch.mm (cuBLAS) on bf16 operands that
are random, and on operands of one repeated value, as bench_gemm once filled cuBLAS's. Constant
operands toggle few bits in the tensor cores, so they draw less power and the clocks stay higher;
a baseline timed on them is faster than the same baseline on the data a tuned kernel sees.

Rounds alternate the two kinds; every sample follows an L2 flush; medians of CUDA-event times.
"""
import argparse
import statistics

import torch


def timed(fn, flush):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush.add_(1)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096,8192", help="comma-separated n of n^3 GEMMs")
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    print(f"{torch.cuda.get_device_name()}: torch.mm bf16 (x @ W^T), median of {args.samples}, L2 flushed")
    print("| n^3 | random TFLOP/s | constant TFLOP/s | constant / random |\n|--:|--:|--:|--:|")
    for n in (int(s) for s in args.sizes.split(",")):
        gen = torch.Generator(device="cuda").manual_seed(n)
        # +-[1/16, 1) with a random sign, the harness's distribution: never zero.
        magnitude = lambda: torch.rand(n, n, device="cuda", generator=gen) * (15 / 16) + 1 / 16  # noqa: E731
        sign = lambda: torch.randint(0, 2, (n, n), device="cuda", generator=gen) * 2 - 1  # noqa: E731
        random = [(magnitude() * sign()).to(torch.bfloat16) for _ in range(2)]
        constant = [torch.full((n, n), 0.0115, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
        out = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
        runs = {"random": random, "constant": constant}
        times = {name: [] for name in runs}
        for name, (a, b) in runs.items():
            torch.mm(a, b.t(), out=out)  # cuBLAS picks and loads its kernel
        torch.cuda.synchronize()
        for i in range(args.samples):
            for name in (("random", "constant") if i % 2 else ("constant", "random")):
                a, b = runs[name]
                times[name].append(timed(lambda: torch.mm(a, b.t(), out=out), flush))
        tflops = {name: 2 * n**3 / statistics.median(t) / 1e9 for name, t in times.items()}
        print(f"| {n} | {tflops['random']:.1f} | {tflops['constant']:.1f} | "
              f"{tflops['constant'] / tflops['random']:.3f} |")


if __name__ == "__main__":
    main()
