"""Batch-4 greedy decoding of a model kept in float32 and run under bf16 autocast entered per forward: every token re-casts every weight.

The usual suspect: precision. A Llama-style decoder (4 layers of width 4096, 32 heads of 128,
RMSNorm, SwiGLU 11008, 32,000-token embedding and untied head; 939M weights in the GEMMs), inference
mode, 4 prompts of 256 tokens prefilled once into a bf16 K/V cache; each step decodes 16 greedy
tokens after the prompt. Baseline: the weights are float32 (3.8 GB) and the model's `forward` runs
under `torch.autocast(dtype=bfloat16)`; autocast's cast cache lives only as long as the autocast
region, so each token's forward casts every weight to bf16 again (read 4 bytes, write 2, then the
GEMM reads 2). Variant `bf16_weights`: `model.to(torch.bfloat16)` once and no autocast (the same
bf16 values go into the same GEMMs; RMSNorm and the embedding cast explicitly, as in the baseline).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("bf16_weights",)
if CUDA:
    LAYERS, WIDTH, HEADS, FFN, VOCAB, BATCH, PROMPT, NEW = 4, 4096, 32, 11008, 32000, 4, 256, 16
else:
    LAYERS, WIDTH, HEADS, FFN, VOCAB, BATCH, PROMPT, NEW = 2, 64, 4, 176, 512, 2, 8, 4
HD = WIDTH // HEADS
MAX_LEN = PROMPT + NEW
LOW = torch.bfloat16


class RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(LOW) * self.weight.to(LOW)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = RMSNorm(), RMSNorm()
        self.qkv, self.o = nn.Linear(WIDTH, 3 * WIDTH, bias=False), nn.Linear(WIDTH, WIDTH, bias=False)
        self.gate_up = nn.Linear(WIDTH, 2 * FFN, bias=False)
        self.down = nn.Linear(FFN, WIDTH, bias=False)
        self.k_cache = torch.zeros(BATCH, HEADS, MAX_LEN, HD, device=DEVICE, dtype=LOW)
        self.v_cache = torch.zeros(BATCH, HEADS, MAX_LEN, HD, device=DEVICE, dtype=LOW)

    def forward(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        self.k_cache[:, :, pos:pos + t] = k
        self.v_cache[:, :, pos:pos + t] = v
        a = F.scaled_dot_product_attention(q, self.k_cache[:, :, :pos + t], self.v_cache[:, :, :pos + t],
                                           is_causal=t > 1)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, WIDTH))
        gate, up = self.gate_up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self, autocast: bool) -> None:
        super().__init__()
        self.autocast = autocast
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm, self.head = RMSNorm(), nn.Linear(WIDTH, VOCAB, bias=False)

    def body(self, ids: torch.Tensor, pos: int) -> torch.Tensor:
        x = self.tok(ids).to(LOW)
        for layer in self.layers:
            x = layer(x, pos)
        return self.head(self.norm(x[:, -1]))

    def forward(self, ids: torch.Tensor, pos: int) -> torch.Tensor:
        if self.autocast:  # as a `@torch.autocast(...)`-decorated forward does
            with torch.autocast(DEVICE, dtype=LOW):
                return self.body(ids, pos)
        return self.body(ids, pos)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Decoder(autocast=args.variant is None)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]) if p.shape[0] != VOCAB else 0.02, generator=gen)
    if args.variant == "bf16_weights":
        model = model.to(LOW)
    model.eval()
    prompts = torch.randint(0, VOCAB, (BATCH, PROMPT), device=DEVICE, generator=gen)
    total = 0
    timer = StepTimer()
    with torch.inference_mode():
        first = model(prompts, 0).argmax(-1, keepdim=True)
        for _ in range(args.steps):
            timer.tick()
            tok, out = first, []
            for j in range(NEW):
                tok = model(tok, PROMPT + j).argmax(-1, keepdim=True)
                out.append(tok)
            total += int(torch.cat(out, 1).sum())
            timer.end()
    timer.report(f"autocast_decode variant={args.variant or 'baseline'} token checksum {total}")


if __name__ == "__main__":
    main()
