"""Int8 (W8A8) serving of a BERT-base-sized intent classifier whose dynamic activation scales are read on the host.

12 post-norm layers of width 768, 3 calls of 16 queries x 128 tokens per step.

Baseline: every quantized Linear quantizes its input dynamically, per tensor and symmetric, and
reads the scale back as Python floats (`amax.item()`-style, one `.tolist()` per Linear, to pass
plain numbers around as hand-written int8 code often does): 48 device-to-host syncs per forward,
each draining the GPU queue before the host can launch the next kernels. Variant `device_scales`:
the same scales kept as 0-dim device tensors (no sync until the logits are read). The same
arithmetic: the activation is multiplied by 127 / amax and the int32 product by amax / 127 and the
weight scales (float32 in both), `torch._int_mm` for the int8 x int8 -> int32 GEMMs.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

LAYERS, DIM, HEADS, BATCH, SEQ, VOCAB, CLASSES, CALLS = (12, 768, 12, 16, 128, 30522, 150, 3) if CUDA else (2, 32, 2, 2, 16, 100, 5, 2)
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Int8Linear(nn.Module):
    """A Linear converted after training: int8 weight with per-output-channel scales, dynamic int8 activations."""

    host_scales = True  # the baseline: scales read back as Python floats

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        w = torch.randn(n, k) / k ** 0.5
        w_scale = w.abs().amax(1) / 127
        self.register_buffer("w_q", torch.round(w / w_scale[:, None]).clamp(-127, 127).to(torch.int8))  # (N, K)
        self.register_buffer("w_scale", w_scale.float())
        self.register_buffer("bias", torch.zeros(n, dtype=DTYPE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).float()
        amax = x2.abs().amax().clamp(min=1e-8)
        inv, sx = 127 / amax, amax / 127
        if self.host_scales:
            inv, sx = torch.stack([inv, sx]).tolist()  # one sync per Linear
        xq = (x2 * inv).round().clamp(-127, 127).to(torch.int8)
        acc = torch._int_mm(xq, self.w_q.t())  # (M, N) int32
        y = (acc.float() * sx) * self.w_scale
        return (y.to(x.dtype) + self.bias).view(*shape[:-1], -1)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.o = Int8Linear(DIM, 3 * DIM), Int8Linear(DIM, DIM)
        self.up, self.down = Int8Linear(DIM, 4 * DIM), Int8Linear(4 * DIM, DIM)
        self.n1, self.n2 = nn.LayerNorm(DIM, dtype=DTYPE), nn.LayerNorm(DIM, dtype=DTYPE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = self.n1(x + self.o(a))  # post-norm, as BERT
        return self.n2(x + self.down(F.gelu(self.up(x))))


class IntentBERT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM, dtype=DTYPE), nn.Embedding(SEQ, DIM, dtype=DTYPE)
        self.norm = nn.LayerNorm(DIM, dtype=DTYPE)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.cls = nn.Linear(DIM, CLASSES, dtype=DTYPE)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.tok(ids) + self.pos.weight)
        for layer in self.layers:
            x = layer(x)
        return self.cls(x[:, 0])


@torch.no_grad()
def main() -> None:
    args = options(__doc__, ("device_scales",)).parse_args()
    Int8Linear.host_scales = args.variant != "device_scales"
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = IntentBERT().eval()
    gen = torch.Generator(device=DEVICE).manual_seed(20)
    queries = [torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen, device=DEVICE) for _ in range(CALLS)]
    total = torch.zeros((), dtype=torch.float64, device=DEVICE)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        for ids in queries:  # CALLS serving calls per step
            total += model(ids).float().softmax(-1).amax(-1).sum()
        timer.end()
    timer.report(f"int8_bert_scale_item variant={args.variant or 'baseline'} confidence checksum {total.item():.6f}")


if __name__ == "__main__":
    main()
