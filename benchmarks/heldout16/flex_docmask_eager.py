"""Packed-document LM evaluation with FlexAttention document masking, `flex_attention` never compiled.

Workload: perplexity evaluation of a SmolLM2-style decoder (49,152-token tied vocabulary, 4 layers
of width 1024, 16 heads of 64, RMSNorm, rotary positions restarting at every document, SwiGLU
2,816; 102M weights, bf16, inference mode) on packed rows: each step scores one row of 4,096
tokens holding ~15 documents of 32..512 tokens, with attention confined to each document
(document masking: `doc[q] == doc[kv] and q >= kv`) through `torch.nn.attention.flex_attention`
and a `BlockMask` built once per row with `create_block_mask` (128 x 128 blocks). The model calls
`flex_attention(q, k, v, block_mask=...)` directly and nothing is compiled, so every layer takes
FlexAttention's eager fallback, the one PyTorch warns about ("flex_attention called without
torch.compile() - this will use an unfused implementation that materializes the full scores matrix
instead of generating a fused kernel. SOLUTION: Use torch.compile(flex_attention)(...)"): q and k
cast to float32, the (1, 16, 4096, 4096) float32 score matrix, the mask evaluated at every (q, kv)
pair through vmap, a float32 softmax, then the product with v: ~1 GB a tensor, several passes a
layer, although ~90 % of the 128 x 128 blocks are masked out.

Variant `compiled_flex`: `flex_attention = torch.compile(flex_attention)` once, as the warning's
SOLUTION line and the FlexAttention documentation say; the rest of the model stays eager. The fused
Triton kernel skips the masked-out blocks the BlockMask lists and never materialises the scores.
The same NLL up to the kernels' rounding (float32 softmax either way).

No extra variant (the variant is the compile).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

if CUDA:
    DIM, HEADS, LAYERS, FF, VOCAB, SEQ, DOC_MIN, DOC_MAX = 1024, 16, 4, 2816, 49152, 4096, 32, 512
else:
    DIM, HEADS, LAYERS, FF, VOCAB, SEQ, DOC_MIN, DOC_MAX = 64, 4, 2, 128, 512, 256, 8, 64
HEAD_DIM = DIM // HEADS
DTYPE = torch.bfloat16 if CUDA else torch.float32


class RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding; x (B, H, L, D), cos / sin (L, D)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = RMSNorm(), RMSNorm()
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.gate_up, self.down = nn.Linear(DIM, 2 * FF, bias=False), nn.Linear(FF, DIM, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: BlockMask, attend) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        a = attend(rotate(q, cos, sin), rotate(k, cos, sin), v, block_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, DIM))
        gate, up = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class PackedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm()

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: BlockMask, attend) -> torch.Tensor:
        inv = 1.0 / 10000.0 ** (torch.arange(0, HEAD_DIM, 2, device=ids.device, dtype=torch.float32) / HEAD_DIM)
        ang = pos[0].float()[:, None] * inv[None]
        cos, sin = (torch.cat([f(ang)] * 2, -1).to(DTYPE) for f in (torch.cos, torch.sin))
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, attend)
        return self.norm(x) @ self.embed.weight.T  # tied head


def packed_row(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids (1, SEQ), document ids (SEQ,) and per-document positions (1, SEQ) of one packed row."""
    lengths = torch.randint(DOC_MIN, DOC_MAX + 1, (SEQ // DOC_MIN,), device=DEVICE, generator=gen)
    ends = lengths.cumsum(0)
    doc = torch.searchsorted(ends, torch.arange(SEQ, device=DEVICE), right=True)
    starts = torch.cat([torch.zeros(1, device=DEVICE, dtype=ends.dtype), ends])[doc]
    pos = torch.arange(SEQ, device=DEVICE) - starts
    ids = torch.randint(0, VOCAB, (1, SEQ), device=DEVICE, generator=gen)
    return ids, doc, pos[None]


def main() -> None:
    args = options(__doc__, ("compiled_flex",)).parse_args()
    attend = torch.compile(flex_attention) if args.variant == "compiled_flex" else flex_attention
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = PackedLM()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=1.0 / math.sqrt(m.in_features))
    nn.init.normal_(model.embed.weight, std=0.02)
    model = model.to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    rows = [packed_row(gen) for _ in range(4)]
    docs = sum(int(doc[-1]) + 1 for _, doc, _ in rows)

    nll = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            ids, doc, pos = rows[step % len(rows)]

            def same_doc_causal(b, h, q_idx, kv_idx, doc=doc):
                return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

            mask = create_block_mask(same_doc_causal, 1, None, SEQ, SEQ, device=DEVICE,
                                     BLOCK_SIZE=128 if CUDA else 16)
            logits = model(ids, pos, mask, attend)
            nll += F.cross_entropy(logits[0, :-1].float(), ids[0, 1:], reduction="mean").double()
            timer.end()
    timer.report(f"flex_docmask_eager variant={args.variant or 'baseline'} mean NLL "
                 f"{nll.item() / args.steps:.5f} documents in the 4 rows {docs}")


if __name__ == "__main__":
    main()
