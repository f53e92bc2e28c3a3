"""Self-attention forward + backward through F.scaled_dot_product_attention with an explicit boolean
causal mask: the mask rules flash out and the fused kernel runs every tile, the masked half too.

Run: tracekit profile sample_traces/scripts/attention_causal_mask.py -o sample_traces/attention_causal_mask.trace.json.gz
     tracekit profile sample_traces/scripts/attention_causal_mask.py --fixed -o sample_traces/attention_causal_mask_fixed.trace.json.gz
The pair of the causal_mask rule: B=8, H=16, L=2048, D=64, bf16; the mask
torch.ones(L, L, dtype=torch.bool).tril() is built once, outside the loop (so the trace shows no
aten::tril in the steps); --fixed passes is_causal=True and no mask. Without CUDA it runs at tiny
sizes on the CPU (a quick check of the script, no GPU kernels).
"""

import argparse
import time

import torch
import torch.nn.functional as F

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true", help="is_causal=True instead of the explicit mask")
    p.add_argument("--steps", type=int, default=12)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    b, h, seq, d = (8, 16, 2048, 64) if cuda else (2, 2, 64, 16)
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, seq, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    causal = torch.ones(seq, seq, dtype=torch.bool, device=device).tril()  # once, outside the loop
    mask = None if args.fixed else causal
    # warm-up, and a check that the masked and the causal call agree
    out = attention(q, k, v, mask)
    ref = attention(q, k, v, None) if mask is not None else attention(q, k, v, causal)
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    assert err < 2e-2, f"masked vs causal SDPA relative error {err}"
    out.float().sum().backward()
    if cuda:
        torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
    times = []
    for _ in range(args.steps):
        times.append(time.perf_counter())
        q.grad = k.grad = v.grad = None
        out = attention(q, k, v, mask)
        out.float().sum().backward()
        mark_step()
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = [*times[2:], end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    kind = "is_causal=True" if args.fixed else "attn_mask=causal mask"
    print(f"{kind}: mean step time over steps 2..{args.steps - 1}: {per * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
