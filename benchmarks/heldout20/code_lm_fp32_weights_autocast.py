"""Code-completion LM (24 layers, width 2,048, 1.3 B parameters) served with float32 weights under bf16 autocast.

Baseline: the checkpoint is loaded in float32 and each decoding call runs under
`torch.autocast("cuda", dtype=torch.bfloat16)` (entered per call, weights frozen with
`requires_grad_(False)`, so autocast keeps no cast cache): every Linear first converts its float32
weight to bf16 (read 4 bytes, write 2) before the GEMM reads the copy: ~4x the weight bytes of a
bf16 model per token on a weight-bound decode (4 completions at a time). Variant `bf16_weights`: the
model converted once with `.to(torch.bfloat16)` at load, no autocast. Rounding differs (LayerNorm,
residual stream and embeddings in bf16 instead of float32), so the generated tokens may differ.
"""

import contextlib

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, bf16, options
from torch import nn

LAYERS, DIM, HEADS, VOCAB, BATCH, PROMPT, NEW = (24, 2048, 16, 32768, 4, 128, 8) if CUDA else (2, 32, 2, 100, 2, 8, 4)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.wqkv, self.wo = nn.Linear(DIM, 3 * DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.fc1, self.fc2 = nn.Linear(DIM, 4 * DIM, bias=False), nn.Linear(4 * DIM, DIM, bias=False)

    def forward(self, x: torch.Tensor, kbuf: torch.Tensor, vbuf: torch.Tensor, start: int) -> torch.Tensor:
        """x: (B, T, D) at positions start..start+T-1; writes their keys/values into the buffers."""
        b, t, d = x.shape
        q, k, v = self.wqkv(self.ln1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        kbuf[:, :, start:start + t] = k
        vbuf[:, :, start:start + t] = v
        a = F.scaled_dot_product_attention(q, kbuf[:, :, :start + t], vbuf[:, :, :start + t], is_causal=t > 1)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class CodeLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(PROMPT + NEW, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]], start: int) -> torch.Tensor:
        x = self.emb(ids) + self.pos.weight[start:start + ids.shape[1]]
        for blk, (kb, vb) in zip(self.blocks, caches, strict=True):
            x = blk(x, kb, vb, start)
        return self.head(self.norm(x[:, -1])).argmax(-1)


@torch.no_grad()
def main() -> None:
    args = options(__doc__, ("bf16_weights",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        lm = CodeLM().eval().requires_grad_(False)
    low = args.variant == "bf16_weights"
    if low:
        lm = lm.to(torch.bfloat16)
    context = contextlib.nullcontext if low else bf16  # entered by every call
    cache_dtype = torch.bfloat16 if (low or CUDA) else torch.float32
    caches = [(torch.zeros(BATCH, HEADS, PROMPT + NEW, DIM // HEADS, dtype=cache_dtype, device=DEVICE),
               torch.zeros(BATCH, HEADS, PROMPT + NEW, DIM // HEADS, dtype=cache_dtype, device=DEVICE)) for _ in range(LAYERS)]
    gen = torch.Generator(device=DEVICE).manual_seed(20)
    prompt = torch.randint(0, VOCAB, (BATCH, PROMPT), generator=gen, device=DEVICE)

    def call(ids: torch.Tensor, start: int) -> torch.Tensor:
        with context():
            return lm(ids, caches, start)

    def complete() -> torch.Tensor:
        """Prefill the prompt, then greedy-decode NEW tokens, one call per token."""
        tok, out = call(prompt, 0), []
        for j in range(NEW):
            out.append(tok)
            tok = call(tok[:, None], PROMPT + j)
        return torch.stack(out, 1)

    total = torch.zeros((), dtype=torch.int64, device=DEVICE)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        total += complete().sum()
        timer.end()
    timer.report(f"code_lm_fp32_weights_autocast variant={args.variant or 'baseline'} token checksum {total.item()}")


if __name__ == "__main__":
    main()
