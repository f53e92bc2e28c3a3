"""Kernels for checking tracekit's byte estimates against ncu's DRAM counters (issue 4, item 5).

Runs each case once after a warm-up of all of them; ProfilerStep#1 (record with --warmup 1) and the
ncu region (--ncu: cudaProfilerStart/Stop around it, for `ncu --profile-from-start off`) hold exactly
one run of every case, in the order of CASES, each inside a record_function / NVTX range named
`case:<name>`. Sizes are chosen so that most cases move far more than the 50 MB L2; the ones that
do not are marked `fits_l2` in cases.json.

  tracekit profile benchmarks/gpu/ncu_kernels.py --warmup 1 -o ncu_kernels.trace.json.gz --no-report
  ncu --clock-control none --profile-from-start off --nvtx --print-units base --csv \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
      python3 benchmarks/gpu/ncu_kernels.py --ncu
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_traces" / "scripts"))
from triton_matmul import matmul
from triton_vector_add import add

try:
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


def _cases(dev: str) -> list[tuple[str, bool, object]]:
    """(name, fits_l2, fn) for every case; tensors are made once here."""
    g = torch.Generator(device=dev).manual_seed(0)

    def rn(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=dev, dtype=dtype, generator=g)

    bf = torch.bfloat16
    cpu = dev != "cuda"  # a CPU smoke test of this script shrinks every size 64x
    n = (lambda x: max(16, x // 64)) if cpu else (lambda x: x)
    blk = 32 if cpu else 128
    x64m, y64m = rn(n(8192), 8192), rn(n(8192), 8192)  # 64M fp32 = 256 MiB each
    vec = rn(8192)
    a4k_bf, w4k_bf, b4k_bf = rn(n(4096), 4096, dtype=bf), rn(4096, 4096, dtype=bf), rn(4096, dtype=bf)
    a4k, w4k = rn(n(4096), 4096), rn(4096, 4096)
    x1_bf, w8k_bf = rn(1, 8192, dtype=bf), rn(n(8192), 8192, dtype=bf)  # 128 MiB weight
    x1_768, w_attn, b_attn = rn(1, 768), rn(2304, 768), rn(2304)  # GPT-2 c_attn, fp32, 7 MB
    rows = rn(n(16384), 4096)  # 256 MiB fp32
    rows_bf = rows.to(bf)
    ln_w, ln_b = rn(4096), rn(4096)
    ln_w_bf, ln_b_bf = ln_w.to(bf), ln_b.to(bf)
    q, k, v = (rn(n(8), 16, n(2048), 64, dtype=bf) for _ in range(3))  # 32 MiB each
    scores = rn(n(8), 16, n(2048), 2048, dtype=bf)  # 1 GiB
    logits = rn(n(4096), 50257)
    targets = torch.randint(0, 50257, (n(4096),), device=dev, generator=g)
    table = rn(50257, 768)
    ids = torch.randint(0, 50257, (n(16384),), device=dev, generator=g)
    a2k, b2k = rn(n(2048), n(2048), dtype=torch.float16), rn(n(2048), n(2048), dtype=torch.float16)
    c2k = torch.empty_like(a2k)
    a8k, b8k = rn(n(8192), n(8192), dtype=torch.float16), rn(n(8192), n(8192), dtype=torch.float16)
    c8k = torch.empty_like(a8k)
    out64m = torch.empty_like(x64m)

    def tf32(flag: bool, fn):
        def run():
            torch.backends.cuda.matmul.allow_tf32 = flag
            try:
                return fn()
            finally:
                torch.backends.cuda.matmul.allow_tf32 = False

        return run

    return [
        ("gemm_bf16_linear_4096", False, lambda: F.linear(a4k_bf, w4k_bf, b4k_bf)),
        ("gemm_fp32_4096_tf32_off", False, tf32(False, lambda: a4k @ w4k)),
        ("gemm_tf32_4096", False, tf32(True, lambda: a4k @ w4k)),
        ("gemv_bf16_1x8192x8192", False, lambda: F.linear(x1_bf, w8k_bf)),
        ("gemv_fp32_gpt2_c_attn_1x768x2304", True, lambda: F.linear(x1_768, w_attn, b_attn)),
        ("elementwise_add_64m_fp32", False, lambda: x64m + y64m),
        ("elementwise_mul_bcast_64m_fp32", False, lambda: x64m * vec),
        ("elementwise_gelu_64m_fp32", False, lambda: F.gelu(x64m)),
        ("cast_fp32_to_bf16_64m", False, lambda: x64m.to(bf)),
        ("copy_transpose_contiguous_64m", False, lambda: x64m.t().contiguous()),
        ("reduction_sum_all_64m_fp32", False, lambda: x64m.sum()),
        ("reduction_sum_rows_16384x4096_fp32", False, lambda: rows.sum(dim=-1)),
        ("layer_norm_16384x4096_fp32", False, lambda: F.layer_norm(rows, (4096,), ln_w, ln_b)),
        ("layer_norm_16384x4096_bf16", False, lambda: F.layer_norm(rows_bf, (4096,), ln_w_bf, ln_b_bf)),
        ("softmax_16384x4096_fp32", False, lambda: torch.softmax(rows, dim=-1)),
        ("softmax_scores_8x16x2048x2048_bf16", False, lambda: torch.softmax(scores, dim=-1)),
        ("sdpa_causal_8x16x2048x64_bf16", False, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        ("attn_scores_bmm_8x16x2048x2048x64_bf16", False, lambda: q @ k.transpose(-2, -1)),
        ("cross_entropy_4096x50257_fp32", False, lambda: F.cross_entropy(logits, targets)),
        ("embedding_16384_of_50257x768_fp32", False, lambda: F.embedding(ids, table)),
        ("triton_add_kernel_64m_fp32", False, lambda: add(x64m, y64m, out64m)),
        ("triton_matmul_kernel_2048_fp16", True, lambda: matmul(a2k, b2k, c2k, blk)),
        ("triton_matmul_kernel_8192_fp16", False, lambda: matmul(a8k, b8k, c8k, blk)),
    ]


def main() -> None:
    ncu = "--ncu" in sys.argv
    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.backends.cuda.matmul.allow_tf32 = False
    cases = _cases("cuda" if cuda else "cpu")
    for _, _, fn in cases:  # warm-up: Triton compiles, cuBLAS/cuDNN heuristics, allocator
        fn()
    sync()
    mark_step()  # ends ProfilerStep#0 (setup + warm-up)
    if ncu:
        torch.cuda.profiler.start()
    for name, _, fn in cases:
        if cuda:
            torch.cuda.nvtx.range_push(f"case:{name}")
        with torch.profiler.record_function(f"case:{name}"):
            fn()
        sync()
        if cuda:
            torch.cuda.nvtx.range_pop()
    if ncu:
        torch.cuda.profiler.stop()
    mark_step()
    if "--list" in sys.argv[1:]:
        out = Path(sys.argv[sys.argv.index("--list") + 1])
        out.write_text(json.dumps([{"case": n, "fits_l2": f} for n, f, _ in cases], indent=1))


if __name__ == "__main__":
    main()
