"""GPT-2-small-style LM trained with nanoGPT's "slow" attention path: a registered `tril` buffer, masked_fill, softmax.

Baseline: per layer `att = (q @ k^T) * d**-0.5`, `att.masked_fill(self.bias[:, :, :T, :T] == 0, -inf)`,
`softmax(att, -1)` (float32 under autocast), `att @ v`: the (B, H, T, T) scores are written, masked,
normalised and re-read, forward and backward. Variants: `sdpa_mask`
(`F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias[:, :, :T, :T].bool())`: a fused kernel,
but with an explicit mask it cannot use flash attention nor skip the masked tiles), `sdpa_causal`
(`F.scaled_dot_product_attention(q, k, v, is_causal=True)`: the flash kernel, upper-triangle tiles skipped).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, block_size: int, mode: str | None) -> None:
        super().__init__()
        self.heads, self.mode = heads, mode
        self.c_attn, self.c_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        mask = self.bias[:, :, :t, :t]
        if self.mode == "sdpa_causal":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.mode == "sdpa_mask":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bool())
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(mask == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, block_size: int, mode: str | None) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, block_size, mode)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block_size: int, dim: int, heads: int, layers: int, mode: str | None) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(block_size, dim)
        self.h = nn.ModuleList(Block(dim, heads, block_size, mode) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main() -> None:
    args = options(__doc__, ("sdpa_mask", "sdpa_causal")).parse_args()
    batch, block_size, vocab, dim, heads, layers = (8, 1024, 32768, 768, 12, 6) if CUDA else (2, 32, 128, 48, 4, 2)
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = GPT(vocab, block_size, dim, heads, layers, args.variant)
        data = torch.randint(0, vocab, (4, batch, block_size + 1))
    inputs, targets = data[:, :, :-1].contiguous(), data[:, :, 1:].contiguous()
    opt = adamw(list(model.parameters()))
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        with bf16():
            loss = model(inputs[i % 4], targets[i % 4])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"tril_attention variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
