"""A small compiled transformer (6 blocks, inference) whose blocks each test a data-dependent condition
with `.item()`: every block is a torch.compile graph break, so Dynamo runs two compiled regions per
block with the `.item()` sync (and Python) between them.

Run: tracekit profile --warmup 1 --active 6 sample_traces/scripts/compile_graph_breaks.py
     tracekit profile --warmup 1 --active 6 sample_traces/scripts/compile_graph_breaks.py --fixed
The pair of the graph_breaks rule: batch 8, seq 256, width 512, 8 heads, bf16 weights, no_grad.
Each block rescales its residual stream when its largest magnitude passes LIMIT; the before variant
branches in Python on `(scale > LIMIT).item()` (the branch is never taken at these sizes, so Dynamo
compiles one resume function per block and never recompiles), --fixed computes the same result
with tensor ops (`x * clamp(LIMIT / scale, max=1)`), so the whole model is one graph. Compilation
happens before the first step mark (ProfilerStep#0: record with --warmup 1). Without CUDA it runs
tiny sizes on the CPU (a quick check of the script).
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""

LIMIT = 1e4  # rescale threshold: far above the activations' magnitude here, so never reached


class Block(nn.Module):
    def __init__(self, d: int, heads: int, fixed: bool) -> None:
        super().__init__()
        self.heads, self.fixed = heads, fixed
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        scale = x.abs().amax()
        if self.fixed:
            x = x * torch.clamp(LIMIT / scale, max=1.0)  # tensor ops: no graph break
        elif (scale > LIMIT).item():  # data-dependent Python branch: a graph break and a sync
            x = x * (LIMIT / scale)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Model(nn.Module):
    def __init__(self, layers: int, d: int, heads: int, fixed: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, heads, fixed) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return x


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true", help="tensor ops instead of the .item() branch")
    p.add_argument("--steps", type=int, default=12)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batch, seq, d, heads, layers = (8, 256, 512, 8, 6) if cuda else (2, 16, 32, 4, 2)
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    model = Model(layers, d, heads, args.fixed).to(device, dtype).eval()
    compiled = torch.compile(model)
    x = torch.randn(batch, seq, d, device=device, dtype=dtype)
    with torch.no_grad():
        ref = model(x)
        for _ in range(3):  # warm-up: compiles every region
            out = compiled(x)
        err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        assert err < 5e-2, f"compiled vs eager relative error {err}"
        if cuda:
            torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
        mark_step()  # ends ProfilerStep#0 (setup + compile): record with --warmup 1 to leave it out
        times = []
        for _ in range(args.steps):
            times.append(time.perf_counter())
            out = compiled(x)
            mark_step()
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = [*times[2:], end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    kind = "tensor-op rescale (no break)" if args.fixed else ".item() branch per block"
    print(f"{kind}: mean step time over steps 2..{args.steps - 1}: {per * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
