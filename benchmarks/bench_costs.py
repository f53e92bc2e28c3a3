"""Print the time of classify, estimate_costs and roofline on a synthetic trace of N kernels.

usage: python benchmarks/bench_costs.py [--kernels 100000] [--shapes 50] [TRACE ...]

The synthetic trace repeats a transformer-like op mix (mm, addmm, add, layer norm, softmax, SDPA,
copy) over `--shapes` distinct sizes, one kernel per op call, so the cost models run once per
distinct signature and the rest is table work. Real traces given as arguments are timed too."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time

import tracekit
from tracekit.analyzers.costs.attribution import estimate_costs
from tracekit.analyzers.devices import match_device
from tracekit.analyzers.kernels import classify
from tracekit.analyzers.roofline import roofline

BF16 = "c10::BFloat16"
OPS = (
    ("aten::mm", lambda n: [[n, 1024], [1024, 1024]], [BF16, BF16], "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_NNT"),
    ("aten::addmm", lambda n: [[1024], [n, 1024], [1024, 1024], [], []], [BF16] * 3 + ["Scalar"] * 2,
     "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_bias_TNT"),
    ("aten::add", lambda n: [[n, 1024], [n, 1024], []], [BF16, BF16, "Scalar"],
     "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>"),
    ("aten::native_layer_norm", lambda n: [[n, 1024], [], [1024], [1024], []],
     [BF16, "ScalarList", BF16, BF16, "Scalar"], "void at::native::vectorized_layer_norm_kernel<c10::BFloat16>"),
    ("aten::_softmax", lambda n: [[n, 1024], [], []], [BF16, "Scalar", "Scalar"],
     "void at::native::cunn_SoftMaxForward<c10::BFloat16>"),
    ("aten::_scaled_dot_product_flash_attention", lambda n: [[1, 16, n, 64]] * 3 + [[]] * 4,
     [BF16] * 3 + ["Scalar"] * 4, "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>"),
    ("aten::copy_", lambda n: [[n, 1024], [n, 1024], []], [BF16, "float", "Scalar"],
     "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda>"),
)


def synthetic(path: str, kernels: int, shapes: int) -> None:
    events = []
    t = 0.0
    for i in range(kernels):
        name, dims, types, kernel = OPS[i % len(OPS)]
        n = 64 * (1 + (i // len(OPS)) % shapes)
        ext, corr = i + 1, 10_000_000 + i
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": t, "dur": 8,
                       "args": {"External id": ext, "Input Dims": dims(n), "Input type": types}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t + 1, "dur": 4, "args": {"External id": ext, "correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": t + 5,
                       "dur": 6, "args": {"External id": ext, "correlation": corr, "device": 0,
                                          "stream": 7}})
        t += 10
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
           "traceEvents": events}
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)


def timed(path: str) -> None:
    t0 = time.perf_counter()
    rank = tracekit.load_trace(path).rank()
    t1 = time.perf_counter()
    kc = classify(rank)
    t2 = time.perf_counter()
    costs = estimate_costs(rank, kc)
    t3 = time.perf_counter()
    rf = roofline(rank, kc, costs, match_device(rank.meta))
    t4 = time.perf_counter()
    print(f"{os.path.basename(path)}: {len(rank.gpu)} GPU rows, {len(rf.table)} kernel rows | "
          f"load {t1 - t0:.2f} s, classify {t2 - t1:.2f} s, estimate_costs {t3 - t2:.2f} s, "
          f"roofline {t4 - t3:.2f} s | FLOPs known for {costs.flops_known_share:.1%} of GPU time, "
          f"bytes for {costs.bytes_known_share:.1%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--kernels", type=int, default=100_000)
    ap.add_argument("--shapes", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"synthetic_{args.kernels}.json.gz")
        synthetic(path, args.kernels, args.shapes)
        timed(path)
    for p in args.traces:
        timed(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
