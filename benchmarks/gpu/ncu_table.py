"""Markdown table of ncu_vs_trace.csv next to each case's ideal DRAM traffic (each input read once,
each output written once), for docs/measurements/README.md.

  python benchmarks/gpu/ncu_table.py docs/measurements/ncu_vs_trace.csv
"""

from __future__ import annotations

import csv
import re
import sys

MB = 1e6
F4, F2, I8 = 4, 2, 8
M64 = 1 << 26  # 64M elements
S = 8 * 16 * 2048 * 2048  # attention score elements
Q = 8 * 16 * 2048 * 64  # q/k/v elements

# case -> (ideal read bytes, ideal write bytes); the second cross_entropy kernel is nll_loss
IDEAL: dict[str, tuple[float, float]] = {
    "gemm_bf16_linear_4096": (2 * 4096 * 4096 * F2 + 4096 * F2, 4096 * 4096 * F2),
    "gemm_fp32_4096_tf32_off": (2 * 4096 * 4096 * F4, 4096 * 4096 * F4),
    "gemm_tf32_4096": (2 * 4096 * 4096 * F4, 4096 * 4096 * F4),
    "gemv_bf16_1x8192x8192": (8192 * 8192 * F2 + 8192 * F2, 8192 * F2),
    "gemv_fp32_gpt2_c_attn_1x768x2304": ((768 * 2304 + 2304 + 768) * F4, 2304 * F4),
    "elementwise_add_64m_fp32": (2 * M64 * F4, M64 * F4),
    "elementwise_mul_bcast_64m_fp32": (M64 * F4 + 8192 * F4, M64 * F4),
    "elementwise_gelu_64m_fp32": (M64 * F4, M64 * F4),
    "cast_fp32_to_bf16_64m": (M64 * F4, M64 * F2),
    "copy_transpose_contiguous_64m": (M64 * F4, M64 * F4),
    "reduction_sum_all_64m_fp32": (M64 * F4, F4),
    "reduction_sum_rows_16384x4096_fp32": (M64 * F4, 16384 * F4),
    "layer_norm_16384x4096_fp32": (M64 * F4 + 2 * 4096 * F4, M64 * F4 + 2 * 16384 * F4),
    "layer_norm_16384x4096_bf16": (M64 * F2 + 2 * 4096 * F2, M64 * F2 + 2 * 16384 * F4),
    "softmax_16384x4096_fp32": (M64 * F4, M64 * F4),
    "softmax_scores_8x16x2048x2048_bf16": (S * F2, S * F2),
    "sdpa_causal_8x16x2048x64_bf16": (3 * Q * F2, Q * F2 + 8 * 16 * 2048 * F4),
    "attn_scores_bmm_8x16x2048x2048x64_bf16": (2 * Q * F2, S * F2),
    "cross_entropy_4096x50257_fp32": (4096 * 50257 * F4, 4096 * 50257 * F4),
    "cross_entropy_4096x50257_fp32#2": (4096 * I8 + 4096 * F4, F4),
    "embedding_16384_of_50257x768_fp32": (16384 * 768 * F4 + 16384 * I8, 16384 * 768 * F4),
    "triton_add_kernel_64m_fp32": (2 * M64 * F4, M64 * F4),
    "triton_matmul_kernel_2048_fp16": (2 * 2048 * 2048 * F2, 2048 * 2048 * F2),
    "triton_matmul_kernel_8192_fp16": (2 * 8192 * 8192 * F2, 8192 * 8192 * F2),
}


def short(name: str) -> str:
    """A readable kernel name: no return type, namespaces or template arguments."""
    name = re.sub(r"\(anonymous namespace\)::", "", name).replace("void ", "")
    if name.startswith("std::enable_if"):
        name = name.split(">::type ", 1)[1]
    return name.split("<")[0].split("(")[0].split("::")[-1][:40]


def main() -> None:
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    print(
        "| case | kernel | trace µs | ncu µs | ideal read MB | ncu read MB | ideal write MB "
        "| ncu write MB (flush / no flush) | ncu (read + no-flush write) / ideal |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    seen: set[str] = set()
    for r in rows:
        case = r["case"]
        key = f"{case}#2" if case in seen else case
        seen.add(case)
        rd, wr = IDEAL[key]
        nr, nw = float(r["ncu_dram_read_bytes"]), float(r["ncu_dram_write_bytes"])
        nwn = float(r["ncu_nocache_dram_write_bytes"])
        label = case + (" (fits L2)" if r["fits_l2"] == "True" else "")
        label += " (2nd kernel)" if key.endswith("#2") else ""
        print(
            f"| {label} | `{short(r['trace_kernel'])}` | {float(r['trace_dur_us']):.1f} "
            f"| {float(r['ncu_duration_ns']) / 1e3:.1f} | {rd / MB:.2f} | {nr / MB:.1f} | {wr / MB:.2f} "
            f"| {nw / MB:.1f} / {nwn / MB:.1f} | {(nr + nwn) / (rd + wr):.2f} |"
        )


if __name__ == "__main__":
    main()
